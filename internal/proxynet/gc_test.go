package proxynet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/testenv"
)

// A broker killed mid-session leaves a labelled topology behind; GC removes
// it once no sandbox uses it, and never while one does.
func TestGCRemovesOnlyUnusedTopologies(t *testing.T) {
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
	n, err := Ensure(ctx, Options{Engine: cli, Workspace: ws, Binary: testenv.Vak(t), Sections: sectionsOf(t, cfg), ConfigFile: cfg, StateDir: state, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	defer Teardown(context.Background(), cli, state, ws, true)

	// In use: a sandbox container joined to it (after the lease is let go:
	// the container keeps it).
	att := n.Attachment()
	user := testenv.Docker(t, append(append([]string{"run", "-d", "--network", att.Mode, "--label", LabelClientOf + "=" + n.Key}, testenv.LabelArgs(t)...), img, "sleep", "600")...)
	n.Release()
	rep, err := GC(ctx, cli, state, labels)
	if err != nil || len(rep.Removed)+len(rep.Skipped) != 0 {
		t.Fatalf("GC removed or skipped a topology in use: %+v %v", rep, err)
	}
	if !healthy(ctx, cli, n.Gateway) {
		t.Fatal("the gateway of a topology in use is gone")
	}
	// The user goes (as when a killed broker's container is removed).
	testenv.Docker(t, "rm", "-f", user)
	rep, err = GC(ctx, cli, state, labels)
	if err != nil || !slices.Equal(rep.Removed, []string{n.Key}) || len(rep.Skipped) != 0 {
		t.Fatalf("GC = %+v, %v; want [%s] removed", rep, err, n.Key)
	}
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		if out := testenv.Docker(t, append(kind, "--filter", "label="+LabelKey+"="+n.Key)...); strings.TrimSpace(out) != "" {
			t.Errorf("GC left docker %v: %s", kind, out)
		}
	}
	// Another user's unused topology (here: its network, owned by another
	// uid) is never removed, and its receipts are not taken.
	foreign := testenv.UniqueName("foreign")
	testenv.Docker(t, append([]string{"network", "create", "--label", engine.LabelKind + "=" + KindProxynet, "--label", LabelKey + "=f0f0f0f0f0f0",
		"--label", engine.LabelOwner + "=" + strconv.Itoa(os.Getuid()+4242)}, append(testenv.LabelArgs(t), foreign)...)...)
	defer exec.Command("docker", "network", "rm", foreign).Run()
	if rep, err := GC(ctx, cli, state, labels); err != nil || len(rep.Removed)+len(rep.Skipped) != 0 {
		t.Fatalf("GC removed another user's topology: %+v %v", rep, err)
	}
	if out := testenv.Docker(t, "network", "ls", "-q", "--filter", "name="+foreign); out == "" {
		t.Fatal("another user's topology network is gone")
	}
	// GC never touches what does not carry the caller's labels.
	if rep, err := GC(ctx, cli, state, map[string]string{"vak.test.id": "someone-else"}); err != nil || len(rep.Removed)+len(rep.Skipped) != 0 {
		t.Fatalf("GC with foreign labels: %+v %v", rep, err)
	}
}

// A part of an unused topology that the daemon will not remove because
// something outside vak uses it (here: a container connected to its egress
// network) is skipped by `vak gc`, which exits 0 and names it; once that
// container is gone, `vak gc` removes the rest (the control).
func TestGCSkipsTopologyInUse(t *testing.T) {
	f := newLeaseFixture(t)
	img := testenv.Image(t)
	n, err := Ensure(context.Background(), f.options(t))
	if err != nil {
		t.Fatal(err)
	}
	n.Release()
	// Its warm time is over, as after a warm run.
	if err := KeepWarm(f.state, f.ws, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	egress, _, _, _, _ := names(n.Key)
	other := testenv.Docker(t, append(append([]string{"run", "-d", "--network", egress}, testenv.LabelArgs(t)...), img, "sleep", "600")...)
	t.Cleanup(func() { dockerOut("rm", "-f", other) })
	if o := f.gc(t); !strings.Contains(o, "skipped proxied network "+n.Key+": remove network "+egress+": in use") {
		t.Fatalf("vak gc did not report the network in use:\n%s", o)
	}
	if _, err := dockerOut("network", "inspect", egress); err != nil {
		t.Fatalf("the network in use is gone: %v", err)
	}
	testenv.Docker(t, "rm", "-f", other)
	if o := f.gc(t); !strings.Contains(o, "removed proxied network "+n.Key) {
		t.Fatalf("vak gc did not remove the topology once unused:\n%s", o)
	}
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		if out := testenv.Docker(t, append(kind, "--filter", "label="+LabelKey+"="+n.Key)...); strings.TrimSpace(out) != "" {
			t.Errorf("vak gc left docker %v: %s", kind, out)
		}
	}
}
