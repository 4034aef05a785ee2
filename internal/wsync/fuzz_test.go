package wsync

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzUnpack feeds arbitrary streams to Unpack and Apply: whatever they
// hold, nothing is written outside the target directory (a sibling canary
// directory stays as it was) and nothing panics.
func FuzzUnpack(f *testing.F) {
	f.Add(stream(f, entry{name: "a/", typ: tar.TypeDir, mode: 0o755}, entry{name: "a/b", body: "x", typ: tar.TypeReg}))
	f.Add(stream(f, entry{name: "l", link: "../canary", typ: tar.TypeSymlink, mode: 0o777}, entry{name: "l/x", body: "x", typ: tar.TypeReg}))
	f.Add(stream(f, entry{name: "../canary/x", body: "x", typ: tar.TypeReg}))
	f.Add(stream(f, entry{name: "h", link: "../canary/secret", typ: tar.TypeLink}))
	f.Add(stream(f, entry{name: ".git/", typ: tar.TypeDir, mode: 0o755}, entry{name: ".git/config", body: "x", typ: tar.TypeReg}))
	f.Add([]byte("not a tar stream"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir, canary := filepath.Join(parent, "ws"), filepath.Join(parent, "canary")
		os.Mkdir(dir, 0o755)
		os.Mkdir(canary, 0o755)
		os.WriteFile(filepath.Join(canary, "secret"), []byte("s"), 0o600)
		Unpack(bytes.NewReader(data), dir, UnpackOptions{MaxBytes: 1 << 20, MaxEntries: 1000})
		Apply(bytes.NewReader(data), dir, ApplyOptions{Unpack: UnpackOptions{MaxBytes: 1 << 20, MaxEntries: 1000}})
		ents, _ := os.ReadDir(canary)
		if len(ents) != 1 || ents[0].Name() != "secret" {
			t.Fatalf("the canary directory changed: %v", ents)
		}
		if data, _ := os.ReadFile(filepath.Join(canary, "secret")); string(data) != "s" {
			t.Fatalf("the canary changed: %q", data)
		}
		pents, _ := os.ReadDir(parent)
		if len(pents) != 2 {
			t.Fatalf("something was written next to the workspace: %v", pents)
		}
	})
}
