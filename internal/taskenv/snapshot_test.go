package taskenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/worker"
)

func TestSnapshotKey(t *testing.T) {
	base, gen := "sha256:aaaa", "1/abcd"
	m := Manifest{"step": "deps", "lock": "sha256:1234"}
	k := SnapshotKey(base, m, gen)
	if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Fatalf("key %q", k)
	}
	// Stable: same inputs, map order irrelevant, nil and empty manifests alike.
	for i := 0; i < 20; i++ {
		if SnapshotKey(base, Manifest{"lock": "sha256:1234", "step": "deps"}, gen) != k {
			t.Fatal("key not stable")
		}
	}
	if SnapshotKey(base, nil, gen) != SnapshotKey(base, Manifest{}, gen) {
		t.Fatal("nil and empty manifests differ")
	}
	// Each input changes it.
	for name, other := range map[string]string{
		"base":     SnapshotKey("sha256:bbbb", m, gen),
		"manifest": SnapshotKey(base, Manifest{"step": "deps", "lock": "sha256:1235"}, gen),
		"entry":    SnapshotKey(base, Manifest{"step": "deps"}, gen),
		"policy":   SnapshotKey(base, m, "2/abcd"),
	} {
		if other == k {
			t.Errorf("changing the %s kept the key", name)
		}
	}
	// No ambiguity between fields (length-prefixed).
	if SnapshotKey("ab", nil, "c") == SnapshotKey("a", nil, "bc") {
		t.Fatal("fields are not separated")
	}
	if _, err := SnapshotRef("nope"); !errors.Is(err, ErrNoSnapshot) {
		t.Fatal("bad key accepted")
	}
	if r, err := SnapshotRef(k); err != nil || r != SnapshotRepo+":"+k {
		t.Fatalf("ref %q %v", r, err)
	}
}

// Live: a snapshot is keyed by base, manifest and policy generation; the
// same triple is a cache hit that commits nothing; a session created from
// the key starts with the snapshotted environment; the snapshot's image
// configuration is the base's (no worker entrypoint or spec).
func TestSessionSnapshot(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ws := f.workspace()
	s := f.create(f.spec(ws))
	sh(t, s, `echo installed > "$HOME/pkg"; echo scratch > /tmp/scratch; echo ws > in-workspace`)
	m1 := Manifest{"setup": "echo installed > $HOME/pkg"}
	r1, err := f.m.Snapshot(ctx, s.ID(), m1)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Cached || r1.Base != s.Image() || r1.Key != SnapshotKey(s.Image(), m1, f.m.policyGeneration(policyOf(t, f, s))) {
		t.Fatalf("first snapshot: %+v", r1)
	}
	// Cache hit: same triple, same image, nothing new committed.
	before := f.images(r1.Key)
	start := time.Now()
	r2, err := f.m.Snapshot(ctx, s.ID(), Manifest{"setup": "echo installed > $HOME/pkg"})
	if err != nil || !r2.Cached || r2.Key != r1.Key || r2.ID != r1.ID {
		t.Fatalf("cache hit: %+v %v", r2, err)
	}
	t.Logf("cache hit in %v", time.Since(start))
	if after := f.images(r1.Key); after != before || after != 1 {
		t.Fatalf("a cache hit created images of its key: %d -> %d", before, after)
	}
	// Changing the manifest or the policy generation makes a new one.
	r3, err := f.m.Snapshot(ctx, s.ID(), Manifest{"setup": "other"})
	if err != nil || r3.Cached || r3.Key == r1.Key {
		t.Fatalf("new manifest: %+v %v", r3, err)
	}
	f.m.PolicyGeneration = "2"
	r4, err := f.m.Snapshot(ctx, s.ID(), m1)
	f.m.PolicyGeneration = ""
	if err != nil || r4.Cached || r4.Key == r1.Key || r4.Key == r3.Key {
		t.Fatalf("new policy generation: %+v %v", r4, err)
	}
	// The image: the base's configuration, vak's labels, no session labels.
	ii, err := f.cli.ImageInspect(ctx, r1.Ref)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ii.Config
	if len(cfg.Entrypoint) != 0 || strings.Join(cfg.Cmd, " ") != "/bin/sh" || cfg.User != "0" ||
		cfg.Labels[engine.LabelKind] != KindSnapshot || cfg.Labels[LabelSnapshot] != r1.Key || cfg.Labels[LabelSession] != "" || cfg.Labels[engine.LabelWorkspace] != "" {
		t.Fatalf("snapshot config: entrypoint %q cmd %q user %q labels %v", cfg.Entrypoint, cfg.Cmd, cfg.User, cfg.Labels)
	}
	for _, kv := range cfg.Env {
		if strings.HasPrefix(kv, worker.SpecEnv+"=") && kv != worker.SpecEnv+"=" {
			t.Fatalf("the worker spec leaked into the image: %q", kv)
		}
	}
	// From the key: the install is there; /tmp and the workspace are not
	// part of a snapshot (mounts).
	ref, err := SnapshotRef(r1.Key)
	if err != nil {
		t.Fatal(err)
	}
	ws2 := f.workspace()
	s2 := f.create(Spec{Task: "from-snapshot", Workspace: ws2, BaseImage: ref})
	if s2.Image() != r1.ID {
		t.Fatalf("from-key session pinned %s, want %s", s2.Image(), r1.ID)
	}
	r := sh(t, s2, `cat "$HOME/pkg"; cat /tmp/scratch 2>/dev/null || echo no-scratch; ls`)
	if r.Stdout != "installed\nno-scratch\n" {
		t.Fatalf("snapshot content: %q", r.Stdout)
	}
	// Its own snapshot has a new base, hence a new key.
	r5, err := f.m.Snapshot(ctx, s2.ID(), m1)
	if err != nil || r5.Key == r1.Key || r5.Base != r1.ID {
		t.Fatalf("snapshot of a snapshot: %+v %v", r5, err)
	}
	for _, k := range []string{r1.Key, r3.Key, r4.Key, r5.Key} {
		if err := f.m.RemoveSnapshot(ctx, k); err != nil && !strings.Contains(err.Error(), "conflict") {
			t.Errorf("remove %s: %v", k, err)
		}
	}
}

// images counts the images committed for the snapshot key (not all images:
// other tests build and commit theirs meanwhile).
func (f *fixture) images(key string) int {
	res, err := f.cli.ImageList(context.Background(), client.ImageListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelSnapshot+"="+key)})
	if err != nil {
		f.t.Fatal(err)
	}
	return len(res.Items)
}

func policyOf(t *testing.T, f *fixture, s *Session) string {
	ci, err := f.cli.ContainerInspect(context.Background(), s.Container(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ci.Container.Config.Labels[LabelPolicy]
}

// Live: a snapshot key is never given to different content. Two sessions
// snapshotted with the same manifest but different files (the marker "B"
// must not come back as "A"): the second is refused. A third session with
// the same content, in another workspace, is a cache hit.
func TestSnapshotContentVerified(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	man := Manifest{"step": "marker"}
	snap := func(marker string) (*ImageRef, error) {
		t.Helper()
		s := f.create(Spec{Task: "content-" + marker + "-" + randomHex(3), Workspace: f.workspace(), BaseImage: f.image})
		sh(t, s, `echo `+marker+` > "$HOME/marker"; mkdir -p "$HOME/d"; ln -sf marker "$HOME/link"`)
		defer f.m.Discard(ctx, s.ID())
		return f.m.Snapshot(ctx, s.ID(), man)
	}
	a, err := snap("A")
	if err != nil || a.Cached {
		t.Fatalf("first snapshot: %+v %v", a, err)
	}
	defer f.m.RemoveSnapshot(ctx, a.Key)
	if _, err := snap("B"); !errors.Is(err, ErrSnapshotMismatch) {
		t.Fatalf("a different content under the same key: %v, want ErrSnapshotMismatch", err)
	}
	// Control: the same content (another workspace, other mtimes) hits.
	again, err := snap("A")
	if err != nil || !again.Cached || again.ID != a.ID {
		t.Fatalf("same content: %+v %v", again, err)
	}
	// What is in the image is still "A".
	ref, _ := SnapshotRef(a.Key)
	s := f.create(Spec{Task: "check-" + randomHex(3), Workspace: f.workspace(), BaseImage: ref})
	if r := sh(t, s, `cat "$HOME/marker"`); r.Stdout != "A\n" {
		t.Fatalf("the snapshot holds %q", r.Stdout)
	}
	f.m.Discard(ctx, s.ID())
}

func TestHashFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	os.Chmod(filepath.Join(dir, "f"), 0o640) // not the umask's
	os.Chmod(dir, 0o750)
	os.Symlink("f", filepath.Join(dir, "l"))
	var out strings.Builder
	in := strings.Join([]string{dir, filepath.Join(dir, "f"), filepath.Join(dir, "l"), filepath.Join(dir, "gone")}, "\x00")
	if err := HashFiles(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	q := strconv.Quote
	want := q(dir) + "\tdir\tdrwxr-x---\t-\n" +
		q(filepath.Join(dir, "f")) + "\tfile\t-rw-r-----\t2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881\n" +
		q(filepath.Join(dir, "l")) + "\tsymlink\tLrwxrwxrwx\t252f10c83610ebca1a059c0bae8255eba2f95be4d1d7bcfa89d7248a82d9f111\n" +
		q(filepath.Join(dir, "gone")) + "\tmissing\t-\t-\n"
	if out.String() != want {
		t.Fatalf("HashFiles:\n%s\nwant\n%s", out.String(), want)
	}
}
