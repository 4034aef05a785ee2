package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/worker/wire"
)

// TestMCPReadFileSentOnce reads a 10 MiB file of control characters (valid
// UTF-8, so once sent as JSON text escaped to six bytes a byte, and the
// result twice: structured and as text) through `vak mcp` on stdio, and
// measures the response line: under twice the file's base64 size. The
// content read back is the file's; a text file (the control) comes back
// as text.
func TestMCPReadFileSentOnce(t *testing.T) {
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	data := make([]byte, 10<<20)
	for i := range data {
		data[i] = byte(1 + i%31) // \x01 .. \x1f
	}
	if err := os.WriteFile(filepath.Join(ws, "ctl.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	src := strings.Repeat("func main() {\n\tfmt.Println(\"<hello>\")\n}\n", 1000)
	if err := os.WriteFile(filepath.Join(ws, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, _, in, _ := meteredMCP(t, "--config", cfg, "mcp", "--workspace", ws)
	ctx := context.Background()
	for _, tc := range []struct {
		path string
		want []byte
	}{{"ctl.bin", data}, {"main.go", []byte(src)}} {
		before := in.n()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": tc.path, "limit": len(tc.want)}})
		if err != nil || res.IsError {
			t.Fatalf("read_file %s: %v %s", tc.path, err, limitText(res))
		}
		line := 0
		for _, l := range in.since(before) {
			line = max(line, l)
		}
		b64 := base64.StdEncoding.EncodedLen(len(tc.want))
		t.Logf("read_file %s (%d bytes): response line %d bytes, %.2fx its base64 size", tc.path, len(tc.want), line, float64(line)/float64(b64))
		if line >= 2*b64 {
			t.Errorf("read_file %s: the response line is %d bytes, over twice the file's base64 size (%d)", tc.path, line, b64)
		}
		r := readOutput(t, res)
		got := []byte(r.Content)
		if r.Encoding == wire.EncodingBase64 {
			if got, err = base64.StdEncoding.DecodeString(r.Content); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, tc.want) || r.Truncated || r.Size != int64(len(tc.want)) {
			t.Fatalf("read_file %s: %d bytes (encoding %q, size %d, truncated %v) differ from the file's %d", tc.path, len(got), r.Encoding, r.Size, r.Truncated, len(tc.want))
		}
		if tc.path == "main.go" && r.Encoding != "" {
			t.Errorf("control: the text file came back as %q, not as text", r.Encoding)
		}
	}
}

// readOutput decodes read_file's result: its structured content, or the
// JSON object of its one text block.
func readOutput(t *testing.T, res *sdk.CallToolResult) (r struct {
	Content   string `json:"content"`
	Encoding  string `json:"encoding"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated"`
}) {
	t.Helper()
	data, _ := json.Marshal(res.StructuredContent)
	if res.StructuredContent == nil {
		data = []byte(limitText(res))
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("read_file result: %v", err)
	}
	return r
}
