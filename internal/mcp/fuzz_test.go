package mcp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/sandbox"
)

// FuzzToolArguments feeds arbitrary arguments (what a model controls) to
// every tool of a server on a real sandbox: each call gets a result or a
// protocol error, never a crashed server, and nothing appears outside the
// workspace.
func FuzzToolArguments(f *testing.F) {
	for _, seed := range []string{
		`{"command":"true"}`, `{"command":5}`, `{}`, `null`, `[]`, `"x"`,
		`{"path":"../x","content":"y"}`, `{"path":"a","offset":-1,"limit":9223372036854775807}`,
		`{"pattern":"**/{a,b,c}*","max":-3}`, `{"pattern":"(","path":"/"}`,
		`{"path":"a","old_string":"","new_string":"x","replace_all":true}`,
		`{"command":"true","timeout":9223372036854775807,"stdin":"\u0000"}`,
		`{"path":"\u0000"}`, `{"command":"true","cwd":"/proc/self/root"}`,
	} {
		for tool := range 6 {
			f.Add(uint8(tool), seed)
		}
	}
	fx := newFixture(f, sandbox.WorkspaceWrite, nil)
	outside := filepath.Dir(fx.ws)
	f.Fuzz(func(t *testing.T, tool uint8, args string) {
		names := []string{"bash", "read_file", "write_file", "edit_file", "glob", "grep"}
		name := names[int(tool)%len(names)]
		if name == "bash" {
			// Commands are sandboxed, but keep the fuzzer from burning the
			// machine's CPU with long loops: only schema fuzzing for bash.
			var m map[string]any
			if json.Unmarshal([]byte(args), &m) == nil && m != nil {
				m["command"] = "true"
				m["timeout"] = 5
				data, _ := json.Marshal(m)
				args = string(data)
			}
		}
		before, _ := os.ReadDir(outside)
		_, err := fx.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		_ = err // a protocol error for malformed JSON is a fine answer
		if perr := fx.cs.Ping(context.Background(), nil); perr != nil {
			t.Fatalf("%s %s: the server stopped answering: %v", name, args, perr)
		}
		after, _ := os.ReadDir(outside)
		if len(after) != len(before) {
			t.Fatalf("%s %s: entries next to the workspace changed: %d -> %d", name, args, len(before), len(after))
		}
	})
}
