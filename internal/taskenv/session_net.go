package taskenv

import (
	"vak/internal/hostenv"
	"vak/internal/sandbox"
)

// withNetworkEnv returns a session's command environment with what its
// network attachment gives commands: the CA trust variables and the secret
// placeholders of a proxied network (never real values). The worker starts
// every command with exactly the spec's environment, not the container's,
// so without this `vak session exec` would see neither (issue 11, item 8).
// The attachment's values win over the image's and the host's.
func withNetworkEnv(env []string, att *sandbox.NetworkAttachment) []string {
	if att == nil {
		return env
	}
	for _, kv := range att.Env {
		env = hostenv.Set(env, kv)
	}
	return env
}
