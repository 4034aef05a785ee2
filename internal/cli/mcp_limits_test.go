package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/worker/wire"
)

// lineMeter passes bytes through and records the length of every line
// (without its newline) that crossed it.
type lineMeter struct {
	mu    sync.Mutex
	cur   int
	lines []int
}

func (m *lineMeter) count(p []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			m.cur += len(p)
			return
		}
		m.lines = append(m.lines, m.cur+i)
		m.cur, p = 0, p[i+1:]
	}
}

// since returns the lengths of the lines completed after the first n.
func (m *lineMeter) since(n int) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int(nil), m.lines[n:]...)
}

func (m *lineMeter) n() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.lines)
}

type meteredWriter struct {
	io.WriteCloser
	m *lineMeter
}

func (w meteredWriter) Write(p []byte) (int, error) {
	n, err := w.WriteCloser.Write(p)
	w.m.count(p[:n])
	return n, err
}

type meteredReader struct {
	io.ReadCloser
	m *lineMeter
}

func (r meteredReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.m.count(p[:n])
	return n, err
}

// meteredMCP starts `vak ARGS...` as an MCP server on stdio and connects
// the SDK's client through meters of the lines it sends (out) and
// receives (in).
func meteredMCP(t *testing.T, args ...string) (cs *sdk.ClientSession, out, in *lineMeter, stderr *wire.TailBuffer) {
	t.Helper()
	stderr = wire.NewTailBuffer(64 << 10)
	cmd := exec.Command(workerExecutable, args...)
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	out, in = &lineMeter{}, &lineMeter{}
	// The client reads whatever the server sends, however long: the
	// tests measure it rather than have the client cut it.
	tr := &sdk.IOTransport{Reader: meteredReader{stdout, in}, Writer: meteredWriter{stdin, out}, MaxLineLength: -1}
	cs, err = sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("connect: %v\nstderr: %s", err, stderr.String())
	}
	t.Cleanup(func() { cs.Close() })
	return cs, out, in, stderr
}

// writeLine calls write_file with content n bytes long and returns the
// length of the line the client sent, the result and the protocol error.
func writeLine(ctx context.Context, cs *sdk.ClientSession, out *lineMeter, path string, n int) (int, *sdk.CallToolResult, error) {
	before := out.n()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": path, "content": strings.Repeat("a", n)}})
	sent := out.since(before)
	if len(sent) == 0 {
		return -1, res, err
	}
	return sent[0], res, err
}

// TestMCPStdioRequestLimits sends write_file calls whose JSON-RPC line is
// one byte below, at and one byte above vak's request limit
// (wire.MaxRequestBytes), the sizes of issue 27 (16,000,000 and
// 17,000,000 bytes of content) and far above it (40 MiB), through `vak
// mcp` on stdio with the SDK's client. Every call gets an answer: up to
// the limit the worker's (file_too_large: the content is over the write
// cap), above it request_too_large naming the limit. After each, a small
// write and a read work (the server kept serving).
func TestMCPStdioRequestLimits(t *testing.T) {
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	cs, out, _, stderr := meteredMCP(t, "--config", cfg, "mcp", "--workspace", ws)
	limit := wire.MaxRequestBytes
	const big = "big.txt"
	for _, tc := range []struct {
		name string
		// line is the JSON-RPC line's length, or content the content's.
		line, content int
		refused       bool
	}{
		{name: "limit-1", line: limit - 1},
		{name: "limit", line: limit},
		{name: "limit+1", line: limit + 1, refused: true},
		{name: "16,000,000 bytes", content: 16_000_000},
		{name: "17,000,000 bytes", content: 17_000_000, refused: true},
		{name: "40 MiB", content: 40 << 20, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			n := tc.content
			if tc.line > 0 {
				// The line without content, measured with the next id's
				// width (ids count up; this one is followed by one more),
				// on a path as long as big's.
				empty, _, _ := writeLine(ctx, cs, out, "nil.txt", 0)
				n = tc.line - empty
			}
			sent, res, err := writeLine(ctx, cs, out, big, n)
			if tc.line > 0 && sent != tc.line {
				t.Fatalf("the client sent a line of %d bytes, want %d", sent, tc.line)
			}
			switch {
			case ctx.Err() != nil:
				t.Fatalf("no answer to a write_file line of %d bytes: %v\nstderr: %s", sent, err, stderr.String())
			case tc.refused:
				if err == nil || !strings.Contains(err.Error(), wire.CodeTooLarge) || !strings.Contains(err.Error(), "16777216") || !strings.Contains(err.Error(), "16 MiB") {
					t.Fatalf("a line of %d bytes: err %v, result %+v; want request_too_large naming the limit", sent, err, res)
				}
			default:
				if err != nil || !res.IsError || !strings.Contains(limitText(res), "file_too_large") {
					t.Fatalf("a line of %d bytes: err %v, result %s; want the worker's file_too_large", sent, err, limitText(res))
				}
			}
			if _, err := os.Stat(filepath.Join(ws, big)); err == nil {
				t.Fatalf("a write of %d bytes was carried out", n)
			}
			// Control: the server still serves.
			if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "small.txt", "content": tc.name}}); err != nil || res.IsError {
				t.Fatalf("a small write after it: %v %s", err, limitText(res))
			}
			if got, _ := os.ReadFile(filepath.Join(ws, "small.txt")); string(got) != tc.name {
				t.Fatalf("small.txt = %q", got)
			}
		})
	}
}

func limitText(res *sdk.CallToolResult) string {
	if res == nil {
		return "<nil>"
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
