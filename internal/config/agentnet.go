package config

import (
	"fmt"
)

// AgentNetwork is the validated [agent_network] section: the policies of
// the brokered workspace network (internal/agentnet). Only the trusted
// user config declares workspaces and peers; a project config may only set
// agent_network.enabled = false, which disables its workspace.
type AgentNetwork struct {
	// Workspaces are the per-workspace policies, paths canonical
	// ("~/" expanded, cleaned; symlinks are resolved by the broker).
	Workspaces []AgentNetworkWorkspace
	// ProjectDisabled is set when the project config of the loaded
	// workspace disabled the network for it.
	ProjectDisabled bool
}

// AgentNetworkWorkspace is one [[agent_network.workspace]] entry.
type AgentNetworkWorkspace struct {
	Path    string
	Enabled bool
	Peers   []string
	// Quota bounds every edge of this workspace (the narrower of the two
	// ends applies); zero means the broker default.
	MessagesPerMinute int
	MaxMessageBytes   int
	QueueDepth        int
}

// agentNetworkWire is [agent_network].
type agentNetworkWire struct {
	// Enabled in a project config may only be false (disable).
	Enabled    *bool                   `toml:"enabled"`
	Workspaces []agentNetWorkspaceWire `toml:"workspace"`
}

type agentNetWorkspaceWire struct {
	Path              *string  `toml:"path"`
	Enabled           *bool    `toml:"enabled"`
	Peers             []string `toml:"peers"`
	MessagesPerMinute *int64   `toml:"messages_per_minute"`
	MaxMessageBytes   *string  `toml:"max_message_bytes"`
	QueueDepth        *int64   `toml:"queue_depth"`
}

// Bounds of the quota keys.
const (
	maxPerMinute   = 100000
	maxMessageSize = 16 << 20
	maxQueueDepth  = 100000
)

// applyAgentNetwork validates [agent_network]. A trusted file declares the
// workspaces; an untrusted one (already stripped to agent_network.enabled)
// may only disable.
func (c *Config) applyAgentNetwork(file string, w *agentNetworkWire, trusted bool) error {
	errf := keyErrorf(file)
	if !trusted {
		if w.Enabled != nil && !*w.Enabled {
			c.AgentNetwork.ProjectDisabled = true
		} else if w.Enabled != nil {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: ignoring agent_network.enabled = true: a project config may only disable the agent network", file))
		}
		return nil
	}
	if w.Enabled != nil && !*w.Enabled {
		// The whole network is off: no workspace has a policy.
		c.AgentNetwork.Workspaces = nil
		return nil
	}
	seen := map[string]bool{}
	for i, ws := range w.Workspaces {
		key := fmt.Sprintf("agent_network.workspace[%d]", i)
		if ws.Path == nil {
			return errf(key+".path", "missing: name the workspace directory")
		}
		p, err := hostPath(*ws.Path)
		if err != nil {
			return errf(key+".path", "%v", err)
		}
		if seen[p] {
			return errf(key+".path", "workspace %s has two entries", p)
		}
		seen[p] = true
		out := AgentNetworkWorkspace{Path: p, Enabled: ws.Enabled == nil || *ws.Enabled}
		for j, peer := range ws.Peers {
			pp, err := hostPath(peer)
			if err != nil {
				return errf(fmt.Sprintf("%s.peers[%d]", key, j), "%v", err)
			}
			if pp == p {
				return errf(fmt.Sprintf("%s.peers[%d]", key, j), "a workspace cannot be its own peer")
			}
			out.Peers = append(out.Peers, pp)
		}
		if v := ws.MessagesPerMinute; v != nil {
			if *v < 1 || *v > maxPerMinute {
				return errf(key+".messages_per_minute", "%d is outside 1..%d", *v, maxPerMinute)
			}
			out.MessagesPerMinute = int(*v)
		}
		if v := ws.MaxMessageBytes; v != nil {
			n, err := ParseSize(*v)
			if err != nil || n < 1 || n > maxMessageSize {
				return errf(key+".max_message_bytes", "%q must be a size in 1..16m", *v)
			}
			out.MaxMessageBytes = int(n)
		}
		if v := ws.QueueDepth; v != nil {
			if *v < 1 || *v > maxQueueDepth {
				return errf(key+".queue_depth", "%d is outside 1..%d", *v, maxQueueDepth)
			}
			out.QueueDepth = int(*v)
		}
		c.AgentNetwork.Workspaces = append(c.AgentNetwork.Workspaces, out)
	}
	return nil
}
