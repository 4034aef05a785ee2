package wsync

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// entry is one tar entry of a hand-made (hostile) stream.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
	size             int64 // overrides len(body) when non-zero
}

func stream(t testing.TB, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.size != 0 {
			h.Size = e.size
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("header %q: %v", e.name, err)
		}
		if e.typ == tar.TypeReg && e.size == 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

// TestRoundTrip: what Pack writes, Unpack rebuilds: contents, modes
// (without setuid/setgid), symlinks as symlinks (even dangling or pointing
// outside), directory and file times.
func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o750)
	os.WriteFile(filepath.Join(src, "a", "b", "f.txt"), []byte("hello"), 0o640)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(src, "suid"), []byte("x"), 0o755)
	os.Chmod(filepath.Join(src, "suid"), 0o4755)
	os.Symlink("a/b/f.txt", filepath.Join(src, "link"))
	os.Symlink("/etc/passwd", filepath.Join(src, "outside"))
	os.Symlink("missing", filepath.Join(src, "dangling"))
	old := time.Unix(1600000000, 0)
	os.Chtimes(filepath.Join(src, "run.sh"), old, old)

	var b bytes.Buffer
	st, err := Pack(&b, src, PackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 3 || st.Dirs != 2 || st.Symlinks != 3 {
		t.Errorf("pack stats %+v", st)
	}
	dst := t.TempDir()
	if _, err := Unpack(bytes.NewReader(b.Bytes()), dst, UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "a", "b", "f.txt")); string(data) != "hello" {
		t.Errorf("content %q", data)
	}
	for name, want := range map[string]fs.FileMode{"a/b/f.txt": 0o640, "run.sh": 0o755, "suid": 0o755, "a": 0o750 | fs.ModeDir} {
		fi, err := os.Lstat(filepath.Join(dst, name))
		if err != nil || fi.Mode()&(fs.ModePerm|fs.ModeDir|fs.ModeSetuid|fs.ModeSetgid) != want {
			t.Errorf("%s: mode %v, want %v (%v)", name, fi.Mode(), want, err)
		}
	}
	for name, want := range map[string]string{"link": "a/b/f.txt", "outside": "/etc/passwd", "dangling": "missing"} {
		if got, err := os.Readlink(filepath.Join(dst, name)); err != nil || got != want {
			t.Errorf("symlink %s -> %q, want %q (%v)", name, got, want, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dst, "run.sh")); !fi.ModTime().Equal(old) {
		t.Errorf("mtime %v, want %v", fi.ModTime(), old)
	}
}

// TestPackSkipsAndExcludes: sockets and fifos are skipped and counted;
// Exclude leaves out a whole directory.
func TestPackSkipsAndExcludes(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "node_modules", "x"), 0o755)
	os.WriteFile(filepath.Join(src, "node_modules", "x", "i.js"), nil, 0o644)
	os.WriteFile(filepath.Join(src, "keep"), nil, 0o644)
	mkfifo(t, filepath.Join(src, "fifo"))
	var b bytes.Buffer
	st, err := Pack(&b, src, PackOptions{Exclude: func(rel string) bool { return rel == "node_modules" }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 1 || st.Dirs != 0 || len(st.Skipped) != 1 || st.Skipped[0] != "fifo" {
		t.Errorf("stats %+v", st)
	}
}

// TestUnpackRefuses: hostile streams, each next to a benign entry (the
// positive control: a stream of the benign entry alone is unpacked). A
// refused stream writes nothing outside the directory; the canary, a
// sibling directory, stays untouched.
func TestUnpackRefuses(t *testing.T) {
	ok := entry{name: "ok.txt", body: "fine", typ: tar.TypeReg}
	cases := []struct {
		name string
		es   []entry
		want error
	}{
		{"dotdot", []entry{ok, {name: "../canary/x", body: "pwn", typ: tar.TypeReg}}, ErrEntry},
		{"absolute", []entry{ok, {name: "/tmp/x", body: "pwn", typ: tar.TypeReg}}, ErrEntry},
		{"inner dotdot", []entry{ok, {name: "a/../../canary/x", body: "pwn", typ: tar.TypeReg}}, ErrEntry},
		{"unclean", []entry{ok, {name: "a//b", body: "x", typ: tar.TypeReg}}, ErrEntry},
		{"dot", []entry{ok, {name: "./x", body: "x", typ: tar.TypeReg}}, ErrEntry},
		{"backslash", []entry{ok, {name: `..\canary\x`, body: "x", typ: tar.TypeReg}}, ErrEntry},
		{"hardlink", []entry{ok, {name: "h", link: "../canary/secret", typ: tar.TypeLink}}, ErrEntry},
		{"char device", []entry{ok, {name: "dev", typ: tar.TypeChar}}, ErrEntry},
		{"block device", []entry{ok, {name: "dev", typ: tar.TypeBlock}}, ErrEntry},
		{"fifo", []entry{ok, {name: "p", typ: tar.TypeFifo}}, ErrEntry},
		{"symlink then through it", []entry{ok, {name: "a", link: "../canary", typ: tar.TypeSymlink, mode: 0o777}, {name: "a/x", body: "pwn", typ: tar.TypeReg}}, nil},
		{"absolute symlink then through it", []entry{ok, {name: "e", link: "CANARY", typ: tar.TypeSymlink, mode: 0o777}, {name: "e/x", body: "pwn", typ: tar.TypeReg}}, nil},
		{"symlink dir then mkdir through it", []entry{ok, {name: "d", link: "../canary", typ: tar.TypeSymlink, mode: 0o777}, {name: "d/sub/", typ: tar.TypeDir, mode: 0o755}}, nil},
		{"size limit", []entry{ok, {name: "big", body: strings.Repeat("x", 2048), typ: tar.TypeReg}}, ErrLimit},
		{"entry limit", []entry{ok, {name: "b", body: "x", typ: tar.TypeReg}, {name: "c", body: "x", typ: tar.TypeReg}, {name: "d", body: "x", typ: tar.TypeReg}}, ErrLimit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dir, canary := filepath.Join(parent, "ws"), filepath.Join(parent, "canary")
			os.Mkdir(dir, 0o755)
			os.Mkdir(canary, 0o755)
			os.WriteFile(filepath.Join(canary, "secret"), []byte("s"), 0o600)
			for i := range c.es {
				c.es[i].link = strings.ReplaceAll(c.es[i].link, "CANARY", canary)
			}
			// Control: the benign entry alone goes in.
			if _, err := Unpack(bytes.NewReader(stream(t, ok)), dir, UnpackOptions{}); err != nil {
				t.Fatalf("control: %v", err)
			}
			_, err := Unpack(bytes.NewReader(stream(t, c.es...)), dir, UnpackOptions{MaxBytes: 1024, MaxEntries: 3})
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("Unpack: %v, want %v", err, c.want)
			}
			if c.want == nil && err == nil {
				t.Errorf("Unpack through a symlink succeeded")
			}
			ents, _ := os.ReadDir(canary)
			if len(ents) != 1 || ents[0].Name() != "secret" {
				t.Errorf("the canary directory changed: %v", ents)
			}
			if data, _ := os.ReadFile(filepath.Join(canary, "secret")); string(data) != "s" {
				t.Errorf("the canary file changed: %q", data)
			}
		})
	}
}

// TestUnpackReplaces: a later entry replaces an earlier one of another
// type (a link by a file, a file by a directory), without following the
// link; setuid and setgid bits never survive.
func TestUnpackReplaces(t *testing.T) {
	parent := t.TempDir()
	dir, outside := filepath.Join(parent, "ws"), filepath.Join(parent, "outside")
	os.Mkdir(dir, 0o755)
	os.WriteFile(outside, []byte("keep"), 0o644)
	s := stream(t,
		entry{name: "l", link: outside, typ: tar.TypeSymlink, mode: 0o777},
		entry{name: "l", body: "new", typ: tar.TypeReg, mode: 0o6755},
		entry{name: "f", body: "x", typ: tar.TypeReg},
		entry{name: "f/", typ: tar.TypeDir, mode: 0o755},
	)
	if _, err := Unpack(bytes.NewReader(s), dir, UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(outside); string(data) != "keep" {
		t.Fatalf("the link's target was written: %q", data)
	}
	fi, err := os.Lstat(filepath.Join(dir, "l"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		t.Fatalf("l: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "f")); err != nil || !fi.IsDir() {
		t.Fatalf("f: %v", err)
	}
}

// Two archives written one after the other on one stream unpack one after
// the other: Unpack reads its archive to the end blocks and not a byte
// beyond (a kubernetes session's sync container gets the workspace, then a
// snapshot's home, on one stdin). An empty rest is an empty archive.
func TestUnpackConsecutiveArchives(t *testing.T) {
	src1, src2 := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(src1, "ws.txt"), []byte("workspace"), 0o644)
	os.MkdirAll(filepath.Join(src2, ".local", "bin"), 0o755)
	os.WriteFile(filepath.Join(src2, ".local", "bin", "tool"), []byte("#!/bin/sh\necho tool\n"), 0o755)
	var stream bytes.Buffer
	for _, dir := range []string{src1, src2} {
		if _, err := Pack(&stream, dir, PackOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dst1, dst2, dst3 := t.TempDir(), t.TempDir(), t.TempDir()
	for i, dst := range []string{dst1, dst2, dst3} {
		if _, err := Unpack(&stream, dst, UnpackOptions{}); err != nil {
			t.Fatalf("archive %d: %v", i+1, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst1, "ws.txt")); err != nil || string(b) != "workspace" {
		t.Errorf("first archive: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dst1, ".local")); err == nil {
		t.Error("the second archive's entries went into the first directory")
	}
	if fi, err := os.Stat(filepath.Join(dst2, ".local", "bin", "tool")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("second archive: %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(dst3); len(ents) != 0 {
		t.Errorf("the empty rest unpacked %d entries", len(ents))
	}
}
