package mcp

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Clients are the MCP clients ClientConfig knows.
var Clients = []string{"claude", "codex", "cursor", "gemini"}

// ClientConfig is the snippet that registers a vak MCP server, started as
// exe with args, in client (one of Clients): where says which file it goes
// in (a comment line), snippet is its content.
func ClientConfig(client, exe string, args []string) (where, snippet string, err error) {
	switch client {
	case "codex":
		// ~/.codex/config.toml; TOML basic strings use JSON's escapes.
		q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		qs := make([]string, len(args))
		for i, s := range args {
			qs[i] = q(s)
		}
		return "", fmt.Sprintf("# ~/.codex/config.toml\n[mcp_servers.vak]\ncommand = %s\nargs = [%s]\n", q(exe), strings.Join(qs, ", ")), nil
	case "claude", "cursor", "gemini":
		where := map[string]string{
			"claude": "# .mcp.json in the project (or: claude mcp add-json vak '<the vak object>')",
			"cursor": "# .cursor/mcp.json in the project (or ~/.cursor/mcp.json)",
			"gemini": "# .gemini/settings.json in the project (or ~/.gemini/settings.json)",
		}[client]
		server := map[string]any{"command": exe, "args": args}
		if client == "claude" {
			server["type"] = "stdio"
		}
		data, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"vak": server}}, "", "  ")
		return where, string(data) + "\n", nil
	default:
		return "", "", fmt.Errorf("--print-config %q: want one of %s", client, strings.Join(Clients, ", "))
	}
}

// ServeArgs are the arguments of `vak mcp` that serve workspace ws with
// the flags a client's registration repeats: --config userConfig when
// set, each NAME VALUE pair of flags whose value is set, in order, then
// --session-new when set.
func ServeArgs(userConfig, ws string, sessionNew bool, flags ...string) []string {
	args := []string{"mcp", "--workspace", ws}
	if userConfig != "" {
		args = append([]string{"--config", userConfig}, args...)
	}
	for i := 0; i+1 < len(flags); i += 2 {
		if flags[i+1] != "" {
			args = append(args, flags[i], flags[i+1])
		}
	}
	if sessionNew {
		args = append(args, "--session-new")
	}
	return args
}
