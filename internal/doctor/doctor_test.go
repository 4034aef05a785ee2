package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"vak/internal/config"
	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/sandbox"
)

// Print lays the report out as vak doctor shows it: the header, the
// config files, the backends' table, the mode and the effective backend's
// lines, and the problem last when the effective backend cannot run.
func TestPrint(t *testing.T) {
	base := func() *Report {
		return &Report{
			Version: "v1", Platform: "linux/amd64", Workspace: "/ws",
			Sources:  []config.Source{{Path: "/u/config.toml", Trusted: true, Exists: true}, {Path: "/ws/.vak/config.toml"}},
			Backends: []Backend{{Name: sandbox.Landlock, Scope: "process", Status: "available"}, {Name: sandbox.Docker, Scope: "-", Status: "unavailable: down"}},
			Mode:     sandbox.WorkspaceWrite,
			Lines:    []Line{{"effective backend", "landlock"}, {"network", "none"}},
			OK:       true,
		}
	}
	for _, tc := range []struct {
		name   string
		change func(r *Report)
		want   []string
		absent []string
	}{
		{"ok", func(*Report) {}, []string{
			"vak v1 on linux/amd64\n\nworkspace: /ws\nconfig files (applied in order):\n",
			"  /u/config.toml (trusted): loaded\n  /ws/.vak/config.toml (untrusted): not present\n",
			"\nbackends:\n  landlock  process  available\n  docker    -        unavailable: down\n\nmode: workspace-write\neffective backend: landlock\nnetwork: none\n",
		}, []string{"config warnings", "cannot run"}},
		{"no workspace, warnings", func(r *Report) {
			r.WorkspaceErr, r.Warnings = errors.New("no such directory"), []string{"ignoring x"}
		}, []string{"workspace: no such directory\n", "config warnings:\n  ignoring x\n"}, nil},
		{"unavailable", func(r *Report) { r.OK, r.Problem = false, errors.New("landlock missing") },
			[]string{"network: none\n\nthe effective backend cannot run: landlock missing\n"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.change(r)
			var b strings.Builder
			r.Print(&b)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.absent {
				if strings.Contains(b.String(), w) {
					t.Errorf("report has %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// Build in mode full-access: backend none, no limits, the real home, an
// unrestricted network, and the nested Docker line from DockerBaseline.
func TestBuildFullAccess(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	cfg := config.Default()
	cfg.Sandbox.Backend, cfg.Sandbox.Mode = sandbox.None, sandbox.FullAccess
	r := Build(context.Background(), Options{Workspace: t.TempDir(), Config: cfg,
		DockerBaseline: func(context.Context, *engine.Client, *config.Config) (dockerd.Baseline, string, error) {
			return "", "", errors.New("stub: no engine")
		}})
	if !r.OK || r.Problem != nil {
		t.Fatalf("full access: OK %v, problem %v", r.OK, r.Problem)
	}
	got := map[string]string{}
	for _, l := range r.Lines {
		got[l.Key] = l.Value
	}
	for k, want := range map[string]string{
		"limits":        "none (mode full-access: nothing is sandboxed)",
		"home":          "your real home (mode full-access: nothing is sandboxed)",
		"network":       "unrestricted (mode full-access)",
		"nested docker": "off by default (--docker); sidecar baseline: stub: no engine",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	if !strings.HasPrefix(got["effective backend"], "none ") {
		t.Errorf("effective backend: %q, want none", got["effective backend"])
	}
	if len(r.Backends) != len(sandbox.Names)-1 {
		t.Errorf("%d backends, want every one but auto: %+v", len(r.Backends), r.Backends)
	}
}

// The "docker runtime" line appears only when the Engine's default runtime
// is not the one vak names (engine.DefaultRuntime), and then names both.
func TestDefaultRuntimeHow(t *testing.T) {
	for _, tc := range []struct {
		def  string
		want []string // in the line; nil: no line
	}{
		{"", nil},
		{"runc", nil},
		{"runsc", []string{"runc:", `"runsc"`, "sandbox.runtime"}},
		{"kata-runtime", []string{"runc:", `"kata-runtime"`}},
	} {
		got := defaultRuntimeHow(tc.def)
		if (got == "") != (tc.want == nil) {
			t.Errorf("default %q: line %q", tc.def, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("default %q: line %q lacks %q", tc.def, got, w)
			}
		}
	}
}
