package devcontainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"vak/internal/egress/sandcat"
)

// Sandcat is a converted sandcat project.
type Sandcat struct {
	// Files are the settings files read, lowest precedence first.
	Files []string
	// Result is the conversion of the merged settings (its TOML may hold
	// secret values: it belongs in the trusted user config only).
	Result *sandcat.Result
	// Env is sandcat's plain `env` (not secret by sandcat's design), which
	// the template gives the agent's container.
	Env map[string]string
	// Changes say what behaves differently in vak's template.
	Changes []string
}

// SandcatUserSettings is sandcat's user-level settings file
// ($XDG_CONFIG_HOME/sandcat/settings.json, else ~/.config/...).
func SandcatUserSettings() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "sandcat", "settings.json")
}

// FromSandcat reads a sandcat project's settings in sandcat's layers —
// user (userFile, skipped when "" or absent), DIR/.sandcat/settings.json,
// DIR/.sandcat/settings.local.json — merges them as sandcat does (env and
// secrets: the higher layer wins per name; network rules: highest layer
// first) and converts the result with the import-sandcat conversion, which
// never widens access.
func FromSandcat(dir, userFile string) (*Sandcat, error) {
	layers := []string{userFile, filepath.Join(dir, ".sandcat", "settings.json"), filepath.Join(dir, ".sandcat", "settings.local.json")}
	merged := map[string]json.RawMessage{}
	env := map[string]string{}
	secrets := map[string]json.RawMessage{}
	var rules [][]json.RawMessage
	out := &Sandcat{}
	for i, f := range layers {
		if f == "" {
			continue
		}
		data, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			if i == 1 {
				return nil, fmt.Errorf("devcontainer: %s: not a sandcat project (%w)", dir, err)
			}
			continue
		} else if err != nil {
			return nil, fmt.Errorf("devcontainer: %w", err)
		}
		out.Files = append(out.Files, f)
		var top map[string]json.RawMessage
		if err := json.Unmarshal(data, &top); err != nil {
			return nil, fmt.Errorf("devcontainer: %s: %w", f, err)
		}
		for k, v := range top {
			switch k {
			case "env":
				var m map[string]string
				if err := json.Unmarshal(v, &m); err != nil {
					return nil, fmt.Errorf("devcontainer: %s: env must map names to strings: %w", f, err)
				}
				maps.Copy(env, m)
			case "secrets":
				var m map[string]json.RawMessage
				if err := json.Unmarshal(v, &m); err != nil {
					return nil, fmt.Errorf("devcontainer: %s: secrets: %w", f, err)
				}
				maps.Copy(secrets, m)
			case "network":
				var r []json.RawMessage
				if err := json.Unmarshal(v, &r); err != nil {
					return nil, fmt.Errorf("devcontainer: %s: network must be a list of rules: %w", f, err)
				}
				rules = append(rules, r)
			default:
				merged[k] = v // reported by the conversion
			}
		}
	}
	var all []json.RawMessage
	for i := len(rules) - 1; i >= 0; i-- {
		all = append(all, rules[i]...)
	}
	if len(all) > 0 {
		merged["network"], _ = json.Marshal(all)
	}
	if len(secrets) > 0 {
		merged["secrets"], _ = json.Marshal(secrets)
	}
	data, _ := json.Marshal(merged)
	name := filepath.Join(dir, ".sandcat")
	res, err := sandcat.Convert(name, data)
	if err != nil {
		return nil, err
	}
	// Convert notes env as "not gateway configuration": the template
	// carries it into the agent's environment instead.
	res.Notes = slices.DeleteFunc(res.Notes, func(n string) bool { return len(n) > 4 && n[:4] == "env." })
	out.Result, out.Env = res, env
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !validName(k) {
			return nil, fmt.Errorf("devcontainer: sandcat env %q is not an environment variable name", k)
		}
	}
	out.Changes = []string{
		"traffic: sandcat tunnels everything through WireGuard to mitmproxy; vak's netclient redirects TCP and DNS to the gateway and drops the rest (UDP other than DNS, ICMP, IPv6)",
		"CA: sandcat's entrypoint (sandcat-init.sh) installed the mitmproxy CA into the system store; vak's template needs no entrypoint: SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, ... point at /etc/vak/trust",
		"placeholders: SANDCAT_PLACEHOLDER_<NAME> values become random vak placeholders in variables named after each secret",
		"app service: sandcat built .devcontainer/Dockerfile.app; vak's template runs --image (build your image first and pass it)",
		"settings: vak reads policy and secrets from the trusted user config only, never from the workspace (.sandcat/ is not read at run time)",
	}
	return out, nil
}
