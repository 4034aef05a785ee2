package kubesession

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/wsync"
)

// packDigest packs dir and returns the archive and its content digest.
func packDigest(t *testing.T, dir string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	if _, err := wsync.Pack(&b, dir, wsync.PackOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := ContentDigest(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), d
}

// ContentDigest ignores times (the same home packed later digests alike)
// and sees a changed content, mode or link target.
func TestContentDigest(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".local", "bin"), 0o755)
	tool := filepath.Join(home, ".local", "bin", "tool")
	os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("bin/tool", filepath.Join(home, ".local", "t"))
	_, d0 := packDigest(t, home)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(tool, old, old)
	if _, d := packDigest(t, home); d != d0 {
		t.Errorf("a new mtime changed the digest")
	}
	for _, change := range []func(){
		func() { os.Chmod(tool, 0o700) },
		func() { os.WriteFile(tool, []byte("#!/bin/sh\nx\n"), 0o700) },
		func() {
			os.Remove(filepath.Join(home, ".local", "t"))
			os.Symlink("bin/other", filepath.Join(home, ".local", "t"))
		},
	} {
		change()
		_, d := packDigest(t, home)
		if d == d0 {
			t.Errorf("a change kept the digest %s", d)
		}
		d0 = d
	}
	if _, err := ContentDigest(strings.NewReader(strings.Repeat("x", 1024))); err == nil {
		t.Error("a non-tar stream digested")
	}
}

// A stored snapshot is read back only as recorded: a bad key, a missing
// one, a damaged record and an archive changed on disk are each refused,
// naming the key.
func TestSnapshotStore(t *testing.T) {
	m := &Manager{StateDir: t.TempDir()}
	key := strings.Repeat("ab", 32)
	for _, bad := range []string{"", "../x", strings.Repeat("A", 64), key + "0"} {
		if _, err := m.ReadSnapshot(bad); !errors.Is(err, ErrNoSnapshot) {
			t.Errorf("ReadSnapshot(%q) = %v, want ErrNoSnapshot", bad, err)
		}
	}
	if _, err := m.ReadSnapshot(key); !errors.Is(err, ErrNoSnapshot) || !strings.Contains(err.Error(), key) {
		t.Errorf("missing: %v", err)
	}
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "f"), []byte("x"), 0o644)
	archive, content := packDigest(t, home)
	sum := sha256.Sum256(archive)
	dir := filepath.Join(SnapshotDir(m.StateDir), key)
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "home.tar"), archive, 0o600)
	info := SnapshotInfo{Key: key, Image: "busybox", ImageID: "sha256:1", Content: content, Archive: hex.EncodeToString(sum[:]), Size: int64(len(archive))}
	data, _ := json.Marshal(info)
	os.WriteFile(filepath.Join(dir, "snapshot.json"), data, 0o600)
	got, f, err := m.openSnapshot(key)
	if err != nil || got.Content != content {
		t.Fatalf("openSnapshot: %v %+v", err, got)
	}
	f.Close()
	os.WriteFile(filepath.Join(dir, "home.tar"), append(archive[:len(archive)-1], 1), 0o600)
	if _, _, err := m.openSnapshot(key); !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "home.tar changed") {
		t.Errorf("changed archive: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "snapshot.json"), []byte("{"), 0o600)
	if _, err := m.ReadSnapshot(key); !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("damaged record: %v", err)
	}
	if err := m.RemoveSnapshot(key); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("RemoveSnapshot left the directory")
	}
}
