package proxynet

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/netfence"
	"vak/internal/paths"
	"vak/internal/testenv"
)

// TestNestedTopology: a caller asking for nested mode gets a netclient
// running `--nested-pool` whose health check verifies the nested rules; a
// running plain topology is rebuilt for it (refused while a sandbox uses
// it); a plain caller reuses the nested topology; a pool overlapping the
// topology's networks is refused naming the network.
func TestNestedTopology(t *testing.T) {
	testenv.CheckLeftovers(t)
	img := testenv.Image(t)
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base, _ := filepath.EvalSymlinks(t.TempDir())
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, []byte("version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nname = \"x\"\naction = \"allow\"\nhosts = [\"example.com\"]\n"), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, "ws")))
	if err != nil {
		t.Fatal(err)
	}
	state := mkdir(t, filepath.Join(base, "state"))
	labels := map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: testenv.TestID(t)}
	plain := Options{Engine: cli, Workspace: ws, Binary: testenv.Vak(t), Sections: sectionsOf(t, cfg), ConfigFile: cfg, StateDir: state, Labels: labels}
	nested := plain
	nested.NestedPool = netfence.DefaultNestedPool

	n, err := Ensure(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	defer Teardown(context.Background(), cli, state, ws, true)
	poolOf := func(name string) netip.Prefix {
		t.Helper()
		ins, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return NestedPoolOf(ins.Container.Config)
	}
	if p := poolOf(n.Netclient); p.IsValid() {
		t.Fatalf("plain topology runs with nested pool %v", p)
	}

	// In use by a sandbox: a nested caller is refused, the plain fence stays.
	att := n.Attachment()
	user := testenv.Docker(t, append(append([]string{"run", "-d", "--network", att.Mode, "--label", LabelClientOf + "=" + n.Key}, testenv.LabelArgs(t)...), img, "sleep", "600")...)
	n.Release() // its container keeps it
	if _, err := Ensure(ctx, nested); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "nested pool") {
		t.Fatalf("nested Ensure over a plain topology in use = %v, want ErrInUse naming the nested pool", err)
	}
	if !healthy(ctx, cli, n.Netclient) || poolOf(n.Netclient).IsValid() {
		t.Fatal("the refused nested Ensure changed the running netclient")
	}
	testenv.Docker(t, "rm", "-f", user)

	// Held by a command that has not started its sandbox yet (its lease):
	// not rebuilt under it either; the nested caller waits for it to let
	// go (here until its context ends).
	holder, err := Ensure(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = Ensure(short, nested)
	cancel()
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "other vak commands still use it") {
		t.Fatalf("nested Ensure over a plain topology a command holds = %v, want ErrInUse", err)
	}
	if !healthy(ctx, cli, n.Netclient) || poolOf(n.Netclient).IsValid() {
		t.Fatal("the nested Ensure changed the netclient a command holds")
	}
	holder.Release()

	// Unused: rebuilt in nested mode.
	nn, err := Ensure(ctx, nested)
	if err != nil {
		t.Fatal(err)
	}
	if p := poolOf(nn.Netclient); p != netfence.DefaultNestedPool {
		t.Fatalf("nested netclient pool = %v, want %v", p, netfence.DefaultNestedPool)
	}
	if nn.NetclientID == n.NetclientID {
		t.Fatal("the plain netclient was reused for a nested caller")
	}
	gw := nn.GatewayIP.String()
	// The nested rules are verified (the health check's command), and the
	// plain check rejects the widened namespace (the check can fail).
	if out, err := dockerOut("exec", nn.Netclient, "/vak", "netclient", "--check", "--gateway", gw, "--nested-pool", netfence.DefaultNestedPool.String()); err != nil {
		t.Fatalf("nested --check: %v\n%s", err, out)
	}
	if out, err := dockerOut("exec", nn.Netclient, "/vak", "netclient", "--check", "--gateway", gw); err == nil {
		t.Fatalf("plain --check passed a nested-mode namespace:\n%s", out)
	}
	// A plain caller reuses the nested topology.
	if n3, err := Ensure(ctx, plain); err != nil || n3.NetclientID != nn.NetclientID {
		t.Fatalf("plain Ensure did not reuse the nested topology: %+v %v", n3, err)
	} else {
		n3.Release()
	}
	nn.Release()

	// A pool overlapping the sandbox network is refused, naming it.
	_, sandboxNet, _, _, _ := names(nn.Key)
	ins, err := cli.NetworkInspect(ctx, sandboxNet, client.NetworkInspectOptions{})
	if err != nil || len(ins.Network.IPAM.Config) == 0 {
		t.Fatalf("inspect %s: %v", sandboxNet, err)
	}
	sub := ins.Network.IPAM.Config[0].Subnet
	bad := nested
	bad.NestedPool = netip.PrefixFrom(sub.Addr(), min(sub.Bits(), 24)).Masked()
	if err := bad.checkPool(ctx, sandboxNet); err == nil || !strings.Contains(err.Error(), sandboxNet) {
		t.Fatalf("checkPool(%v) over %s (%v) = %v, want an error naming the network", bad.NestedPool, sandboxNet, sub, err)
	}
	if err := nested.checkPool(ctx, sandboxNet); err != nil {
		t.Fatalf("control: checkPool(%v) = %v", nested.NestedPool, err)
	}
}
