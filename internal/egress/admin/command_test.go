package admin

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"vak/internal/errclass"
)

// Command's output for each operation, and the class of its errors.
func TestCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(l, &fakeCtl{})
	defer srv.Close()
	tests := []struct {
		name, socket, want string
		class              *errclass.Class // of the error; nil: none
		fails              bool
	}{
		{"reload", path, "reloaded\n", nil, false},
		{"status", path, "{\n  \"reloads\": 1\n}\n", nil, false}, // after the reload
		{"env", path, "A=vakph_x\n", nil, false},
		{"revoke", path, "", nil, true},
		{"nope", path, "", nil, true},
		{"status", filepath.Join(t.TempDir(), "none.sock"), "", errclass.Unavailable, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := NewClient(tc.socket).Command(context.Background(), tc.name, &out)
			if (err != nil) != tc.fails || out.String() != tc.want || errclass.Of(err) != tc.class {
				t.Fatalf("err %v (class %v), output %q, want %q", err, errclass.Of(err), out.String(), tc.want)
			}
			if tc.class != nil && !errors.Is(err, ErrNotRunning) {
				t.Fatalf("err %v does not wrap ErrNotRunning", err)
			}
		})
	}
}
