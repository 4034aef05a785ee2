package agentnet

import "vak/internal/config"

// PoliciesFromConfig turns the trusted user config's [agent_network]
// section into broker policies.
func PoliciesFromConfig(c config.AgentNetwork) []Policy {
	out := make([]Policy, 0, len(c.Workspaces))
	for _, w := range c.Workspaces {
		out = append(out, Policy{
			Workspace: w.Path, Enabled: w.Enabled, Peers: w.Peers,
			Quota: Quota{PerMinute: w.MessagesPerMinute, MaxBytes: w.MaxMessageBytes, QueueDepth: w.QueueDepth},
		})
	}
	return out
}
