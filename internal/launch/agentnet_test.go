package launch

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/agentnet"
	"vak/internal/config"
	"vak/internal/paths"
)

// AgentNetEnabled: only an enabled policy naming the workspace, unless the
// project config disabled it.
func TestAgentNetEnabled(t *testing.T) {
	ws, err := agentnet.Canonical(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	tests := []struct {
		name string
		an   config.AgentNetwork
		want bool
	}{
		{"no policy", config.AgentNetwork{}, false},
		{"enabled", config.AgentNetwork{Workspaces: []config.AgentNetworkWorkspace{{Path: ws, Enabled: true}}}, true},
		{"disabled", config.AgentNetwork{Workspaces: []config.AgentNetworkWorkspace{{Path: ws}}}, false},
		{"another workspace", config.AgentNetwork{Workspaces: []config.AgentNetworkWorkspace{{Path: other, Enabled: true}}}, false},
		{"project disabled", config.AgentNetwork{Workspaces: []config.AgentNetworkWorkspace{{Path: ws, Enabled: true}}, ProjectDisabled: true}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{AgentNetwork: tc.an}
			if got := AgentNetEnabled(cfg, ws); got != tc.want {
				t.Fatalf("AgentNetEnabled = %v, want %v", got, tc.want)
			}
		})
	}
}

// Without an enabled policy nothing registers and nothing starts a broker;
// the directory and the policy file follow the state dir and --config.
func TestAgentNetWithoutPolicy(t *testing.T) {
	state := t.TempDir()
	t.Setenv(paths.EnvStateHome, state)
	n := AgentNet{UserConfig: "rel/config.toml", Executable: "/nonexistent/vak"}
	dir, err := n.Dir()
	if err != nil || !strings.HasPrefix(dir, state) || filepath.Base(dir) != "agentnet" {
		t.Fatalf("Dir = %q, %v", dir, err)
	}
	if f := n.PolicyFile(); !filepath.IsAbs(f) || !strings.HasSuffix(f, "rel/config.toml") {
		t.Fatalf("PolicyFile = %q, want the absolute --config", f)
	}
	ws := t.TempDir()
	cfg := &config.Config{AgentNetwork: config.AgentNetwork{Workspaces: []config.AgentNetworkWorkspace{{Path: ws, Enabled: true}}, ProjectDisabled: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if task := n.Task(ctx, cfg, ws, func(msg string) { t.Errorf("warned: %s", msg) }); task != nil {
		t.Fatal("a task registered without an enabled policy")
	}
	var log bytes.Buffer
	n.Attach(ctx, noServer{t}, cfg, ws, slog.New(slog.NewTextHandler(&log, nil)))
	if !strings.Contains(log.String(), "disabled by the project config") {
		t.Fatalf("log: %s", log.String())
	}
}

// noServer fails the test when anything attaches to it.
type noServer struct{ t *testing.T }

func (s noServer) AttachAgentNet(context.Context, *agentnet.Client, func(context.Context) error) error {
	s.t.Error("attached without an enabled policy")
	return nil
}

func (s noServer) WatchAgentNet(context.Context, time.Duration) { s.t.Error("watched") }
