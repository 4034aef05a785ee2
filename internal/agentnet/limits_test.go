package agentnet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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
