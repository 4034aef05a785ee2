package sandbox

import (
	"context"
	"errors"
	"testing"
)

func TestResolveName(t *testing.T) {
	for _, tc := range []struct {
		req  Name
		mode Mode
		goos string
		want Name
		err  error
	}{
		{Auto, WorkspaceWrite, "linux", Landlock, nil},
		{Auto, ReadOnly, "darwin", Seatbelt, nil},
		{Auto, WorkspaceWrite, "windows", "", ErrNoNativeBackend},
		{Landlock, WorkspaceWrite, "linux", Landlock, nil},
		{Landlock, WorkspaceWrite, "darwin", Seatbelt, nil}, // falls back to the real backend
		{Seatbelt, ReadOnly, "linux", Landlock, nil},        // never to none
		{Seatbelt, ReadOnly, "darwin", Seatbelt, nil},
		{Seatbelt, ReadOnly, "freebsd", "", ErrNoNativeBackend},
		{Docker, WorkspaceWrite, "linux", Docker, nil},
		{Docker, ReadOnly, "darwin", Docker, nil},
		{Docker, ReadOnly, "windows", Docker, nil},
		{None, WorkspaceWrite, "linux", "", ErrNoneRestricted},
		{None, ReadOnly, "darwin", "", ErrNoneRestricted},
		{None, FullAccess, "linux", None, nil},
		{Docker, FullAccess, "linux", None, nil}, // full access disables sandboxing
		{Auto, FullAccess, "darwin", None, nil},
		{"bogus", WorkspaceWrite, "linux", "", ErrUnknownBackend},
		{"", WorkspaceWrite, "linux", "", ErrUnknownBackend},
		{Auto, Mode(0), "linux", "", ErrUnknownMode},
		{Auto, Mode(42), "linux", "", ErrUnknownMode},
	} {
		got, err := ResolveName(tc.req, tc.mode, tc.goos)
		if !errors.Is(err, tc.err) {
			t.Errorf("ResolveName(%q, %v, %s) err = %v, want %v", tc.req, tc.mode, tc.goos, err, tc.err)
			continue
		}
		if got.Effective != tc.want {
			t.Errorf("ResolveName(%q, %v, %s) = %q, want %q", tc.req, tc.mode, tc.goos, got.Effective, tc.want)
		}
		if err == nil && got.Reason == "" {
			t.Errorf("ResolveName(%q, %v, %s): empty reason", tc.req, tc.mode, tc.goos)
		}
	}
}

type fake struct{ name string }

func (f fake) Name() string                        { return f.name }
func (f fake) Scope() Scope                        { return ScopeProcess }
func (f fake) Available(ctx context.Context) error { return nil }

var errLater = errors.New("not yet available")

func TestRegistryResolve(t *testing.T) {
	r := NewRegistry()
	r.GOOS = "linux"
	r.Register(fake{"docker"})
	r.Register(fake{"none"})
	r.Unavailable(Landlock, errLater)

	// An unavailable native backend is an explicit error, never none.
	if b, _, err := r.Resolve(Auto, WorkspaceWrite); !errors.Is(err, errLater) || b != nil {
		t.Fatalf("Resolve(auto) = %v, %v; want errLater", b, err)
	}
	if b, _, err := r.Resolve(Docker, ReadOnly); err != nil || b.Name() != "docker" {
		t.Fatalf("Resolve(docker) = %v, %v", b, err)
	}
	if b, _, err := r.Resolve(Docker, FullAccess); err != nil || b.Name() != "none" {
		t.Fatalf("Resolve(docker, full) = %v, %v", b, err)
	}
	r.GOOS = "darwin"
	if _, _, err := r.Resolve(Auto, ReadOnly); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("Resolve(auto) on darwin without seatbelt = %v, want ErrNotRegistered", err)
	}
}

func TestParseModeAndNarrowest(t *testing.T) {
	for _, m := range []Mode{ReadOnly, WorkspaceWrite, FullAccess} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("rw"); !errors.Is(err, ErrUnknownMode) {
		t.Errorf("ParseMode(rw) = %v", err)
	}
	if Narrowest(FullAccess, ReadOnly) != ReadOnly || Narrowest(WorkspaceWrite, FullAccess) != WorkspaceWrite {
		t.Error("Narrowest picks the wider mode")
	}
}

func TestLimitsDefaults(t *testing.T) {
	l := Limits{Pids: 10}.WithDefaults()
	if l.Pids != 10 || l.Memory != DefaultMemory || l.CPUs != DefaultCPUs || l.TmpfsSize != DefaultTmpfsSize {
		t.Fatalf("WithDefaults = %+v", l)
	}
}
