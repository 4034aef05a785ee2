package proxynet

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/receipts"
	"vak/internal/testenv"
)

// A topology proves its fence when it comes up, and again when its gateway
// has restarted: a fence whose rules were flushed (as a process that gained
// NET_ADMIN would) fails the self-test, which tears the topology down and
// says why. Every self-test leaves a receipt.
func TestFenceSelfTest(t *testing.T) {
	testenv.CheckLeftovers(t)
	testenv.Image(t)
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base, _ := filepath.EvalSymlinks(t.TempDir())
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, []byte("version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nname = \"x\"\nhosts = [\"example.com\"]\n[secrets.OLD]\nvalue = \"old-secret-value\"\nhosts = [\"example.com\"]\n"), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, "ws")))
	if err != nil {
		t.Fatal(err)
	}
	state := mkdir(t, filepath.Join(base, "state"))
	labels := map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: testenv.TestID(t)}
	// The netclient would exit on the flush by itself (tested in netfence);
	// here it re-verifies slowly so that the self-test is what catches it.
	o := Options{Engine: cli, Workspace: ws, Binary: testenv.Vak(t), Sections: sectionsOf(t, cfg), ConfigFile: cfg, StateDir: state, Labels: labels, VerifyInterval: 10 * time.Minute}
	n, err := Ensure(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer Teardown(context.Background(), cli, state, ws, true)
	records := func() []receipts.Record {
		t.Helper()
		data, err := os.ReadFile(SelfTestLog(state, n.Key))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receipts.VerifyFile(SelfTestLog(state, n.Key)); err != nil {
			t.Fatal(err)
		}
		var out []receipts.Record
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			r, err := parseRecord(l)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	if rs := records(); len(rs) != 1 || rs[0].Decision != receipts.Allow || !strings.Contains(rs[0].Reason, "nftables rules verify") {
		t.Fatalf("self-test receipt at creation: %+v", rs)
	}
	// Reuse of the same gateway start: no new self-test.
	if _, err := Ensure(ctx, o); err != nil {
		t.Fatal(err)
	}
	if rs := records(); len(rs) != 1 {
		t.Fatalf("a reuse without a restart tested again: %d receipts", len(rs))
	}

	// A config change: the reuse reloads the running gateway (same
	// container; the old secret keeps its placeholder, the new one gets
	// one) and proves the fence again.
	os.WriteFile(cfg, []byte("version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nname = \"x\"\nhosts = [\"example.com\", \"example.org\"]\n"+
		"[secrets.OLD]\nvalue = \"old-secret-value\"\nhosts = [\"example.com\"]\n[secrets.NEW]\nvalue = \"new-secret-value\"\nhosts = [\"example.org\"]\n"), 0o600)
	o.Sections = sectionsOf(t, cfg) // what the CLI decodes from the changed file
	nr, err := Ensure(ctx, o)
	if err != nil {
		out1, _ := dockerOut("logs", "--tail", "20", n.Netclient)
		out2, _ := dockerOut("logs", "--tail", "20", n.Gateway)
		t.Fatalf("%v\nnetclient:\n%s\ngateway:\n%s", err, out1, out2)
	}
	if nr.NetclientID != n.NetclientID || nr.Placeholders["OLD"] != n.Placeholders["OLD"] || !strings.HasPrefix(nr.Placeholders["NEW"], "vakph_") {
		t.Fatalf("config change: reused %v, placeholders %v then %v", nr.NetclientID == n.NetclientID, n.Placeholders, nr.Placeholders)
	}
	if rs := records(); len(rs) != 2 || rs[1].Decision != receipts.Allow {
		t.Fatalf("no self-test after the reload: %+v", rs)
	}
	n = nr

	// A gateway restart: the next reuse proves the fence again.
	testenv.Docker(t, "restart", "-t", "1", n.Gateway)
	deadline := time.Now().Add(DefaultReadyTimeout)
	for !healthy(ctx, cli, n.Gateway) {
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not come back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	n2, err := Ensure(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if n2.Gateway != n.Gateway {
		t.Fatalf("the restarted topology was rebuilt, not reused")
	}
	if rs := records(); len(rs) != 3 || rs[2].Decision != receipts.Allow {
		t.Fatalf("no self-test after the gateway restart: %+v", rs)
	}

	// The attack: flush the fence as a process with NET_ADMIN in the
	// namespace would. (The netclient's health check sees it too and a
	// later Ensure rebuilds; the self-test must catch it on its own.)
	if out, code := testenv.Exec(t, n.Netclient, "/vak", "netclient", "unfence"); code != 0 {
		t.Fatalf("unfence: %s", out)
	}
	sections, err := gatewaySections(cfg, sectionsOf(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	err = o.selfTest(ctx, n.Key, n.GatewayIP, sections)
	if !errors.Is(err, ErrFenceSelfTest) {
		t.Fatalf("self-test with the rules flushed: %v, want ErrFenceSelfTest", err)
	}
	// Two independent witnesses: the rules do not verify, and the canary
	// received the self-test's direct connection.
	if !strings.Contains(err.Error(), "nftables rules verify") || !strings.Contains(err.Error(), "reached the canary directly") {
		t.Errorf("the failure does not say why: %v", err)
	}
	if rs := records(); len(rs) != 4 || rs[3].Decision != receipts.Deny || !strings.Contains(rs[3].Reason, "FAILED") {
		t.Errorf("self-test receipts: %+v", rs)
	}
}

func parseRecord(line string) (receipts.Record, error) {
	var r receipts.Record
	err := json.Unmarshal([]byte(line), &r)
	return r, err
}
