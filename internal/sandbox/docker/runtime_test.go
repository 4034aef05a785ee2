package docker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"vak/internal/sandbox"
	"vak/internal/testenv"
)

// TestProbeRuntime: a backend configured with a runtime the daemon does
// not list is unavailable (ErrNoRuntime, naming the runtime, the ones the
// daemon has and the key to change), through the Engine API and through
// the CLI, and a cached success for another runtime does not vouch for
// it; one the daemon lists (runc always is) passes.
func TestProbeRuntime(t *testing.T) {
	testenv.RequireDocker(t)
	cache := t.TempDir()
	for _, tc := range []struct {
		name string
		// check probes through the API (a Backend where RunsHere) or the CLI.
		check func(runtime string) error
	}{
		{"EngineAPI", func(rt string) error {
			b := &Backend{Runtime: rt, Probe: &Probe{CacheDir: cache}}
			if !b.RunsHere() {
				t.Skipf("vak run takes the CLI path here: %s", b.CLIReason())
			}
			return b.Available(context.Background())
		}},
		{"CLI", func(rt string) error {
			return (&Probe{Runtime: rt, CacheDir: cache}).Check(context.Background())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check("runc"); err != nil {
				t.Fatalf("runtime runc: %v", err)
			}
			err := tc.check("vak-no-such-runtime")
			if !errors.Is(err, ErrNoRuntime) {
				t.Fatalf("an unlisted runtime: %v, want ErrNoRuntime", err)
			}
			for _, want := range []string{`"vak-no-such-runtime"`, "runc", "sandbox.runtime", "daemon.json"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not name %s: %v", want, err)
				}
			}
			if err := tc.check(""); err != nil {
				t.Fatalf("the default runtime: %v", err)
			}
		})
	}
}

// TestWrapRuntime: the runtime is named on the docker run command line
// (runc when none is configured); a proxied network under a runtime other
// than runc is refused, whatever the order of the other checks.
func TestWrapRuntime(t *testing.T) {
	ws := t.TempDir()
	net := &sandbox.NetworkAttachment{Mode: "container:vak-nc-x"}
	for _, tc := range []struct {
		runtime string
		network *sandbox.NetworkAttachment
		want    string // the --runtime value; "" for none
		err     error
	}{
		// None configured: runc by name, never the daemon's default.
		{"", nil, "runc", nil},
		{"", net, "runc", nil},
		{"runsc", nil, "runsc", nil},
		{"runc", net, "runc", nil},
		{"runsc", net, "", ErrRuntimeNetwork},
		{"kata", net, "", ErrRuntimeNetwork},
	} {
		b := &Backend{Image: "img:1", Runtime: tc.runtime}
		argv, err := b.Wrap(sandbox.Command{ID: "rt", Shell: "true", Workspace: ws, Mode: sandbox.WorkspaceWrite, Network: tc.network})
		if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("runtime %q, network %v: %v, want %v", tc.runtime, tc.network != nil, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		got := ""
		if i := slices.Index(argv, "--runtime"); i >= 0 {
			got = argv[i+1]
		}
		if got != tc.want {
			t.Errorf("runtime %q: --runtime %q in %q", tc.runtime, got, argv)
		}
	}
}
