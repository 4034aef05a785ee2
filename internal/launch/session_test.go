package launch

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/errclass"
	"vak/internal/taskenv"
)

// TestSessionRequestsRefused: a session request that cannot be honoured is
// refused before anything starts, with an error of class Invalid (the
// command line's usage status) that says why. No daemon is needed: the
// Engine is pointed at a socket nobody serves.
func TestSessionRequestsRefused(t *testing.T) {
	key := strings.Repeat("a", 64)
	tests := []struct {
		name string
		body string // [sandbox] and [network] of the user config
		call func(context.Context, Request) error
		want string
	}{
		{"full access is no sandbox", "[sandbox]\nmode = \"full-access\"\n",
			func(ctx context.Context, r Request) error { return CreateSession(ctx, r, SessionCreate{Task: "t"}) },
			"a session is a sandbox"},
		{"--from with --image", "",
			func(ctx context.Context, r Request) error {
				return CreateSession(ctx, r, SessionCreate{Task: "t", From: key, ImageSet: true})
			},
			"--from and --image exclude each other"},
		{"--from a non-key", "",
			func(ctx context.Context, r Request) error {
				return CreateSession(ctx, r, SessionCreate{Task: "t", From: "v1"})
			},
			"is not a snapshot key"},
		{"--docker without the proxied network", "",
			func(ctx context.Context, r Request) error {
				return CreateSession(ctx, r, SessionCreate{Task: "t", Docker: true})
			},
			"needs --network proxied"},
		{"pool fill without a pool", "",
			func(ctx context.Context, r Request) error { return FillPool(ctx, r, false, io.Discard) },
			"session.pool_size is 0"},
		{"manifest entry without a value", "",
			func(ctx context.Context, r Request) error {
				_, err := Snapshot(ctx, r, "t-0123456789", []string{"lock"}, "")
				return err
			},
			`-m "lock": want NAME=VALUE or NAME=@FILE`},
		{"manifest entry of a missing file", "",
			func(ctx context.Context, r Request) error {
				_, err := Snapshot(ctx, r, "t-0123456789", []string{"lock=@" + filepath.Join(t.TempDir(), "none")}, "")
				return err
			},
			"-m lock: "},
		{"missing manifest file", "",
			func(ctx context.Context, r Request) error {
				_, err := Snapshot(ctx, r, "t-0123456789", nil, filepath.Join(t.TempDir(), "none"))
				return err
			},
			"--manifest: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws, cfg, file := setup(t, "version = 1\n"+tc.body)
			t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-daemon.sock"))
			req := Request{Workspace: ws, Config: cfg, UserConfig: file, Labels: map[string]string{"vak.test": "1"},
				Warn: func(s string) { t.Logf("warning: %s", s) }}
			err := tc.call(context.Background(), req)
			if errclass.Of(err) != errclass.Invalid || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v (class %v), want class Invalid and %q", err, errclass.Of(err), tc.want)
			}
		})
	}
}

// TestSessionRequestControl: the control of TestSessionRequestsRefused, a
// valid request, gets past the checks and fails only for want of a daemon
// (class Unavailable).
func TestSessionRequestControl(t *testing.T) {
	ws, cfg, file := setup(t, "version = 1\n")
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-daemon.sock"))
	req := Request{Workspace: ws, Config: cfg, UserConfig: file, Labels: map[string]string{"vak.test": "1"}}
	created := false
	err := CreateSession(context.Background(), req, SessionCreate{Task: "t", Created: func(string) { created = true }})
	if errclass.Of(err) != errclass.Unavailable || created {
		t.Fatalf("err = %v (class %v), created %v: want class Unavailable, nothing created", err, errclass.Of(err), created)
	}
	if errors.Is(err, taskenv.ErrInvalidSpec) {
		t.Fatalf("err = %v: the spec was refused", err)
	}
	// As Start, both want a config and a workspace.
	if err := CreateSession(context.Background(), Request{Config: cfg}, SessionCreate{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a create without a workspace: %v", err)
	}
	if err := FillPool(context.Background(), Request{Workspace: ws}, false, io.Discard); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a pool fill without a config: %v", err)
	}
}

// TestSessionShortID: `vak session ls` shows image IDs as docker does.
func TestSessionShortID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"sha256:0123456789abcdef0123", "0123456789ab"},
		{"0123456789abcdef", "0123456789ab"},
		{"vak-test:latest", "vak-test:lat"},
		{"short", "short"},
	} {
		if got := shortID(tc.in); got != tc.want {
			t.Errorf("shortID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
