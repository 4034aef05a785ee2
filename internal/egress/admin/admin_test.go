package admin

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

type fakeCtl struct{ reloads int }

func (f *fakeCtl) Status() any            { return map[string]int{"reloads": f.reloads} }
func (f *fakeCtl) Reload() error          { f.reloads++; return nil }
func (f *fakeCtl) Revoke() (int, error)   { return 3, errors.New("boom") }
func (f *fakeCtl) Env() map[string]string { return map[string]string{"A": "vakph_x"} }
func (f *fakeCtl) CACert() []byte         { return []byte("-----BEGIN CERTIFICATE-----\n") }

func TestSocketLifecycle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "gw.sock")
	// A stale socket file (no listener) is replaced.
	os.MkdirAll(dir, 0o700)
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v", fi.Mode().Perm())
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", di.Mode().Perm())
	}
	// A live socket is not taken over.
	if _, err := Listen(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Listen: %v", err)
	}
	ctl := &fakeCtl{}
	srv := Serve(l, ctl)
	defer srv.Close()
	c := NewClient(path)
	ctx := context.Background()
	if err := c.Reload(ctx); err != nil || ctl.reloads != 1 {
		t.Fatalf("reload: %v", err)
	}
	if _, err := c.Revoke(ctx); err == nil || err.Error() != "boom" {
		t.Fatalf("revoke error not passed through: %v", err)
	}
	if env, err := c.Env(ctx); err != nil || env["A"] != "vakph_x" {
		t.Fatalf("env: %v %v", env, err)
	}
	if _, err := NewClient(filepath.Join(dir, "none.sock")).Status(ctx); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("missing socket: %v", err)
	}
	// Not a socket: refused.
	f := filepath.Join(dir, "file")
	os.WriteFile(f, nil, 0o600)
	if _, err := Listen(f); err == nil {
		t.Fatal("regular file accepted as socket path")
	}
}
