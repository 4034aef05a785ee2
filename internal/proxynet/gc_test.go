package proxynet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"vak/internal/paths"
	"vak/internal/sandbox/docker"
	"vak/internal/taskenv"
	"vak/internal/testenv"
)

// A broker killed mid-session leaves a labelled topology behind; GC removes
// it once no sandbox uses it, and never while one does.
func TestGCRemovesOnlyUnusedTopologies(t *testing.T) {
	testenv.CheckLeftovers(t)
	img := testenv.Image(t)
	cli, err := taskenv.NewEngine()
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

	// In use: a sandbox container joined to it.
	att := n.Attachment()
	user := testenv.Docker(t, append(append([]string{"run", "-d", "--network", att.Mode, "--label", LabelClientOf + "=" + n.Key}, testenv.LabelArgs(t)...), img, "sleep", "600")...)
	removed, err := GC(ctx, cli, state, labels, 0)
	if err != nil || len(removed) != 0 {
		t.Fatalf("GC removed a topology in use: %v %v", removed, err)
	}
	if !healthy(ctx, cli, n.Gateway) {
		t.Fatal("the gateway of a topology in use is gone")
	}
	// The user goes (as when a killed broker's container is removed).
	testenv.Docker(t, "rm", "-f", user)
	// Unused but just created (a run between bringing the network up and
	// starting its container): kept within the grace.
	if removed, err := GC(ctx, cli, state, labels, time.Hour); err != nil || len(removed) != 0 {
		t.Fatalf("GC removed a topology younger than its grace: %v %v", removed, err)
	}
	removed, err = GC(ctx, cli, state, labels, 0)
	if err != nil || len(removed) != 1 || removed[0] != n.Key {
		t.Fatalf("GC = %v, %v; want [%s]", removed, err, n.Key)
	}
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		if out := testenv.Docker(t, append(kind, "--filter", "label="+LabelKey+"="+n.Key)...); strings.TrimSpace(out) != "" {
			t.Errorf("GC left docker %v: %s", kind, out)
		}
	}
	// Another user's unused topology (here: its network, owned by another
	// uid) is never removed, and its receipts are not taken.
	foreign := testenv.UniqueName("foreign")
	testenv.Docker(t, append([]string{"network", "create", "--label", LabelKind + "=" + KindProxynet, "--label", LabelKey + "=f0f0f0f0f0f0",
		"--label", docker.LabelOwner + "=" + strconv.Itoa(os.Getuid()+4242)}, append(testenv.LabelArgs(t), foreign)...)...)
	defer exec.Command("docker", "network", "rm", foreign).Run()
	if removed, err := GC(ctx, cli, state, labels, 0); err != nil || len(removed) != 0 {
		t.Fatalf("GC removed another user's topology: %v %v", removed, err)
	}
	if out := testenv.Docker(t, "network", "ls", "-q", "--filter", "name="+foreign); out == "" {
		t.Fatal("another user's topology network is gone")
	}
	// GC never touches what does not carry the caller's labels.
	if removed, err := GC(ctx, cli, state, map[string]string{"vak.test.id": "someone-else"}, 0); err != nil || len(removed) != 0 {
		t.Fatalf("GC with foreign labels: %v %v", removed, err)
	}
}
