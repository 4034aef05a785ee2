package agentnet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"vak/internal/receipts"
)

// TestRegisterNeedsPolicy: the broker registers only a workspace an
// enabled policy names. A workspace without one (an existing directory,
// or a path that does not exist) and one whose policy is disabled are
// refused with ErrRegister, an error naming the workspace and the
// [[agent_network.workspace]] entry to add, and a deny receipt; they get
// no token and no kept identity. The named workspace (the control)
// registers.
func TestRegisterNeedsPolicy(t *testing.T) {
	e := newEnv(t, "named", "unnamed", "off")
	if err := e.b.SetPolicies([]Policy{e.policy("named", true, Quota{}), e.policy("off", false, Quota{})}); err != nil {
		t.Fatal(err)
	}
	refused := []struct{ name, ws, want string }{
		{"no policy", e.ws["unnamed"], "has no [agent_network] policy"},
		{"does not exist", "/nonexistent/x", "has no [agent_network] policy"},
		{"disabled", e.ws["off"], "disabled"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			tok, id, err := e.b.Register(tc.ws, 1000)
			if !errors.Is(err, ErrRegister) || tok != "" || id.ID != "" {
				t.Fatalf("Register(%s) = %q, %+v, %v; want ErrRegister", tc.ws, tok, id, err)
			}
			for _, want := range []string{tc.want, tc.ws, "[[agent_network.workspace]]", "path = "} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
		})
	}
	_, id := e.register(t, "named") // the control
	data, err := os.ReadFile(e.b.identFile())
	if err != nil || !strings.Contains(string(data), id.ID) {
		t.Fatalf("the registered workspace's identity is not kept: %v %s", err, data)
	}
	rs := e.records(t)
	for _, tc := range refused {
		if strings.Contains(string(data), tc.ws) {
			t.Errorf("an identity was kept for %s: %s", tc.ws, data)
		}
		if !hasRecord(rs, "register", receipts.Deny, tc.ws) {
			t.Errorf("no deny receipt for %s", tc.ws)
		}
	}
}

// TestDaemonRegisterNeedsPolicy: the real broker process refuses to
// register a workspace its policies do not name, over its socket, and
// registers one they name (the control).
func TestDaemonRegisterNeedsPolicy(t *testing.T) {
	dir := brokerDir(t)
	named, err := Canonical(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	if _, err := Ensure(context.Background(), dir, brokerCommand(dir, &n, named)); err != nil {
		t.Fatal(err)
	}
	c := NewClient(dir)
	defer c.Close()
	ctx := context.Background()
	if tok, _, err := c.Register(ctx, "/nonexistent/x"); !errors.Is(err, ErrRegister) || tok != "" || !strings.Contains(err.Error(), "[[agent_network.workspace]]") {
		t.Fatalf("Register(/nonexistent/x) = %q, %v; want ErrRegister naming the config to add", tok, err)
	}
	tok, id, err := c.Register(ctx, named)
	if err != nil || tok == "" || id.Workspace != named {
		t.Fatalf("control: Register(%s) = %+v, %v", named, id, err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "identities.json"))
	if strings.Contains(string(data), "/nonexistent/x") || !strings.Contains(string(data), id.ID) {
		t.Fatalf("identities: %s", data)
	}
}

// pingLine is a ping request line of exactly size bytes (without its
// newline), padded in a field the broker ignores for pings.
func pingLine(t *testing.T, size int) []byte {
	t.Helper()
	head, tail := `{"op":"ping","topic":"`, `"}`
	n := size - len(head) - len(tail)
	if n < 0 {
		t.Fatalf("a ping cannot be %d bytes", size)
	}
	return []byte(head + strings.Repeat("p", n) + tail + "\n")
}

// TestDaemonRequestLineLimit sends request lines one byte below, at and
// one byte above the broker's line limit (32 MiB), and far above it, to
// the real broker process on a raw connection. Up to the limit the
// request is served and the connection goes on; above it the broker
// answers with an error line that names the limit before it closes the
// connection (no broken pipe without an answer). The Client refuses such a
// request itself with the same limit, and goes on working.
func TestDaemonRequestLineLimit(t *testing.T) {
	dir := brokerDir(t)
	var n atomic.Int32
	if _, err := Ensure(context.Background(), dir, brokerCommand(dir, &n)); err != nil {
		t.Fatal(err)
	}
	const limit = 32 << 20
	for _, tc := range []struct {
		name    string
		size    int
		refused bool
	}{
		{"limit-1", limit - 1, false},
		{"limit", limit, false},
		{"limit+1", limit + 1, true},
		{"40 MiB", 40 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("unix", filepath.Join(dir, SocketName))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The broker may stop reading (and close) before the whole
			// line is written: the write's error does not matter, the
			// answer does.
			go conn.Write(pingLine(t, tc.size))
			br := bufio.NewReader(conn)
			line, err := br.ReadBytes('\n')
			if err != nil {
				t.Fatalf("a line of %d bytes: no answer (%v)", tc.size, err)
			}
			var resp response
			if err := json.Unmarshal(line, &resp); err != nil {
				t.Fatalf("answer %q: %v", line, err)
			}
			if !tc.refused {
				if resp.Error != "" || resp.Instance == "" {
					t.Fatalf("a line of %d bytes: %+v, want a ping answer", tc.size, resp)
				}
				if _, err := conn.Write(pingLine(t, 100)); err != nil {
					t.Fatal(err)
				}
				if line, err := br.ReadBytes('\n'); err != nil || !strings.Contains(string(line), "instance") {
					t.Fatalf("the connection did not go on: %q %v", line, err)
				}
				return
			}
			if !strings.Contains(resp.Error, fmt.Sprint(limit)) || !strings.Contains(resp.Error, "32 MiB") || resp.Kind == "" {
				t.Fatalf("a line of %d bytes: %+v, want an error naming the limit", tc.size, resp)
			}
			// Closed: an end of file, or a reset when the broker left
			// part of the line unread.
			if rest, err := br.ReadBytes('\n'); (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) || len(rest) > 0 {
				t.Fatalf("after the error: %q %v, want the connection closed", rest, err)
			}
		})
	}
	c := NewClient(dir)
	defer c.Close()
	_, err := c.Send(context.Background(), "vakan1.x.y", "ws-x", "t", make([]byte, 40<<20))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
		t.Fatalf("Send of 40 MiB: %v, want an error naming the limit", err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("control: ping after it: %v", err)
	}
}
