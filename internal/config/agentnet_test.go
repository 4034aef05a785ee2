package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

const agentNetUser = `version = 1
[agent_network]
[[agent_network.workspace]]
path = "/work/a"
peers = ["/work/b"]
messages_per_minute = 30
max_message_bytes = "8k"
queue_depth = 10
[[agent_network.workspace]]
path = "/work/b"
enabled = false
peers = ["/work/a"]
`

func TestAgentNetworkUserConfig(t *testing.T) {
	cfg, err := Parse("u.toml", []byte(agentNetUser))
	if err != nil {
		t.Fatal(err)
	}
	ws := cfg.AgentNetwork.Workspaces
	if len(ws) != 2 || ws[0].Path != "/work/a" || !ws[0].Enabled || ws[0].Peers[0] != "/work/b" ||
		ws[0].MessagesPerMinute != 30 || ws[0].MaxMessageBytes != 8<<10 || ws[0].QueueDepth != 10 || ws[1].Enabled {
		t.Fatalf("agent network = %+v", cfg.AgentNetwork)
	}
	for _, tc := range []struct{ body, key string }{
		{"[[agent_network.workspace]]\npeers = [\"/x\"]\n", "agent_network.workspace[0].path"},
		{"[[agent_network.workspace]]\npath = \"rel\"\n", "agent_network.workspace[0].path"},
		{"[[agent_network.workspace]]\npath = \"/a\"\npeers = [\"/a\"]\n", "agent_network.workspace[0].peers[0]"},
		{"[[agent_network.workspace]]\npath = \"/a\"\n[[agent_network.workspace]]\npath = \"/a/\"\n", "agent_network.workspace[1].path"},
		{"[[agent_network.workspace]]\npath = \"/a\"\nqueue_depth = 0\n", "agent_network.workspace[0].queue_depth"},
		{"[[agent_network.workspace]]\npath = \"/a\"\nmax_message_bytes = \"1g\"\n", "agent_network.workspace[0].max_message_bytes"},
		{"[[agent_network.workspace]]\npath = \"/a\"\ntoken = \"x\"\n", "token"},
	} {
		_, err := Parse("bad.toml", []byte("version = 1\n"+tc.body))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: err = %v, want one naming %s", tc.body, err, tc.key)
		}
	}
	off, err := Parse("off.toml", []byte(strings.Replace(agentNetUser, "[agent_network]\n", "[agent_network]\nenabled = false\n", 1)))
	if err != nil || off.AgentNetwork.Workspaces != nil {
		t.Fatalf("enabled = false kept workspaces: %+v %v", off.AgentNetwork, err)
	}
}

// TestAgentNetworkProjectMayOnlyDisable: a project config (writable by the
// agent) cannot add workspaces, peers or quotas, nor enable; it can disable.
func TestAgentNetworkProjectMayOnlyDisable(t *testing.T) {
	dir := t.TempDir()
	user := write(t, filepath.Join(dir, "u.toml"), agentNetUser)
	ws := filepath.Join(dir, "ws")
	project := filepath.Join(ws, ".vak", "config.toml")
	write(t, project, "version = 1\n[agent_network]\nenabled = true\n[[agent_network.workspace]]\npath = \"/work/evil\"\npeers = [\"/work/a\"]\nqueue_depth = 100000\n")
	cfg, err := Load(Options{UserFile: user, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.AgentNetwork.Workspaces) != 2 || cfg.AgentNetwork.ProjectDisabled {
		t.Fatalf("project config changed the network: %+v", cfg.AgentNetwork)
	}
	warn := strings.Join(cfg.Warnings, "\n")
	if !strings.Contains(warn, "ignoring agent_network.workspace") || !strings.Contains(warn, "agent_network.enabled = true") {
		t.Fatalf("warnings = %q", cfg.Warnings)
	}
	write(t, project, "version = 1\n[agent_network]\nenabled = false\n")
	cfg, err = Load(Options{UserFile: user, Workspace: ws})
	if err != nil || !cfg.AgentNetwork.ProjectDisabled || len(cfg.Warnings) != 0 {
		t.Fatalf("project could not disable: %+v %q %v", cfg.AgentNetwork, cfg.Warnings, err)
	}
	// Positive control: the same workspace entry in the trusted file is taken.
	if cfg, err := Parse("u.toml", []byte("version = 1\n[[agent_network.workspace]]\npath = \"/work/evil\"\npeers = [\"/work/a\"]\n")); err != nil || len(cfg.AgentNetwork.Workspaces) != 1 {
		t.Fatalf("trusted entry: %+v %v", cfg, err)
	}
}
