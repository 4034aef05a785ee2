package dockerguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// Ping answers with the engine's version when /info answers with one, and
// fails (ErrNoAnswer) on no listener, an error status, or an answer
// without a version.
func TestPing(t *testing.T) {
	serve := func(t *testing.T, h http.HandlerFunc) string {
		t.Helper()
		sock := filepath.Join(t.TempDir(), "d.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return sock
	}
	ctx := context.Background()
	ok := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/info" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		w.Write([]byte(`{"ServerVersion":"20.10.24","Containers":0}`))
	})
	if v, err := Ping(ctx, ok); err != nil || v != "20.10.24" {
		t.Fatalf("Ping = %q, %v; want 20.10.24", v, err)
	}
	for _, tc := range []struct {
		name, sock, want string
	}{
		{"no listener", filepath.Join(t.TempDir(), "none.sock"), "none.sock"},
		{"denied", serve(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"message":"vak dockerguard: not allowed"}`, http.StatusForbidden)
		}), "403 Forbidden"},
		{"no version", serve(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }), "without a server version"},
		{"not JSON", serve(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`OK`)) }), "without a server version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Ping(ctx, tc.sock)
			if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Ping = %q, %v; want ErrNoAnswer naming %q", v, err, tc.want)
			}
		})
	}
}
