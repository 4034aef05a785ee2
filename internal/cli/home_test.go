package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"vak/internal/agenthome"
	"vak/internal/paths"
	"vak/internal/sandbox/docker"
	"vak/internal/testenv"
)

// homeWorld is a fake real home holding secrets, vak's state dir inside it
// (the default place, with a planted CA key), and a workspace below it.
type homeWorld struct {
	home, ws, canary, stateKey, marker, cfg string
}

func newHomeWorld(t *testing.T) *homeWorld {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &homeWorld{home: filepath.Join(base, "home"), marker: "VAK-HOME-CANARY-7f3a"}
	w.canary = filepath.Join(w.home, ".ssh", "id_ed25519")
	w.stateKey = filepath.Join(w.home, ".local", "state", "vak", "ca", "key.pem")
	for _, f := range []string{w.canary, w.stateKey} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(w.marker+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", w.home)
	// The state dir in its default place, inside the real home.
	t.Setenv(paths.EnvStateHome, "")
	os.Unsetenv(paths.EnvStateHome)
	w.ws = w.mkws(t, "src/proj")
	w.cfg = writeConfig(t, "version = 1\n")
	return w
}

func (w *homeWorld) mkws(t *testing.T, rel string) string {
	t.Helper()
	d := filepath.Join(w.home, rel)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	ws, err := paths.CanonicalWorkspace(d)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// run runs sh -c script in ws with extra flags and wants status 0.
func (w *homeWorld) run(t *testing.T, ws, script string, flags ...string) string {
	t.Helper()
	args := append([]string{"run", "-w", ws}, flags...)
	code, out, errs := vakMain(t, w.cfg, append(args, "--", "sh", "-c", script)...)
	if code != 0 {
		t.Fatalf("vak %q: exit %d: %s %s", args, code, out, errs)
	}
	return out
}

// noSecrets runs the canary search in the sandbox: neither the real home's
// secrets nor vak's state are reachable from HOME or anywhere else.
func (w *homeWorld) noSecrets(t *testing.T, ws string, flags ...string) {
	t.Helper()
	out := w.run(t, ws, `cat ~/.ssh/id_ed25519 '`+w.canary+`' '`+w.stateKey+`' 2>/dev/null; ls ~/.local/state/vak 2>/dev/null; grep -rs `+w.marker+` ~ /tmp '`+w.home+`' 2>/dev/null | head -3; true`, flags...)
	if strings.Contains(out, w.marker) || strings.Contains(out, "ca") {
		t.Errorf("the sandbox (%v) reached the real home or vak's state: %q", flags, out)
	}
}

// With --home workspace (the default) what a run writes in HOME is there in
// the next run of the same workspace, kept in vak's state dir and never in
// the real home; a fresh home starts empty and keeps nothing.
func TestRunHomeWorkspacePersists(t *testing.T) {
	testenv.RequireLandlock(t)
	w := newHomeWorld(t)
	out := w.run(t, w.ws, `echo "home=$HOME"; echo kept > ~/.agentrc; mkdir -p ~/.cache/tool && echo c > ~/.cache/tool/c`)
	if !strings.Contains(out, "home="+w.home+"\n") {
		t.Errorf("HOME in the sandbox: %q, want the home's own path %s", out, w.home)
	}
	if out := w.run(t, w.ws, `cat ~/.agentrc ~/.cache/tool/c`); out != "kept\nc\n" {
		t.Errorf("second run read %q, want what the first wrote", out)
	}
	dir, err := agenthome.Dir(agenthome.Choice{Kind: agenthome.Workspace}, w.ws)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, ".agentrc")); err != nil || string(b) != "kept\n" {
		t.Errorf("the home on the host (%s): %q %v", dir, b, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("home %s: %v %v, want mode 0700", dir, fi, err)
	}
	if _, err := os.Lstat(filepath.Join(w.home, ".agentrc")); !os.IsNotExist(err) {
		t.Errorf("the run wrote into the real home: %v", err)
	}
	out = w.run(t, w.ws, `cat ~/.agentrc 2>&1; echo x > ~/.fresh; ls -A ~ | grep -v '^src$' | wc -l`, "--home", "fresh")
	if !strings.Contains(out, "No such file") || !strings.HasSuffix(out, "1\n") {
		t.Errorf("a fresh home is not empty: %q", out)
	}
	if out := w.run(t, w.ws, `ls -A ~ | sort | tr '\n' ' '`); out != ".agentrc .cache src " {
		t.Errorf("workspace home after a fresh run: %q", out)
	}
	w.noSecrets(t, w.ws)
	w.noSecrets(t, w.ws, "--home", "fresh")
	w.noSecrets(t, w.ws, "--home", "profile:p")
	// A project config may narrow the home to fresh.
	os.MkdirAll(filepath.Join(w.ws, ".vak"), 0o755)
	os.WriteFile(filepath.Join(w.ws, ".vak", "config.toml"), []byte("version = 1\n[sandbox]\nhome = \"fresh\"\n"), 0o644)
	if out := w.run(t, w.ws, `cat ~/.agentrc 2>&1; true`); !strings.Contains(out, "No such file") {
		t.Errorf("project home = \"fresh\" ignored: %q", out)
	}
}

// A profile home is shared by the workspaces that name it, and by no other.
func TestRunHomeProfileShared(t *testing.T) {
	testenv.RequireLandlock(t)
	w := newHomeWorld(t)
	other := w.mkws(t, "work/other")
	w.run(t, w.ws, `echo from-a > ~/.shared`, "--home", "profile:team")
	if out := w.run(t, other, `cat ~/.shared`, "--home", "profile:team"); out != "from-a\n" {
		t.Errorf("profile home in another workspace: %q", out)
	}
	for _, flags := range [][]string{{"--home", "workspace"}, {"--home", "profile:solo"}, nil} {
		if out := w.run(t, other, `cat ~/.shared 2>&1; true`, flags...); !strings.Contains(out, "No such file") {
			t.Errorf("%v sees the profile's file: %q", flags, out)
		}
	}
	w.noSecrets(t, other, "--home", "profile:team")
}

// Links an agent leaves in its home never make the host act outside it:
// the next run's mount points are made without following them (a link
// where the workspace's parent goes is replaced, its target untouched),
// and gc removes the links, not their targets. Positive controls: the
// workspace still appears in the view, and gc does remove the home.
func TestRunHomeLinksNotFollowed(t *testing.T) {
	testenv.RequireLandlock(t)
	w := newHomeWorld(t)
	victim := filepath.Join(filepath.Dir(w.home), "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(w.ws, "in-ws"), []byte("ws\n"), 0o644)
	w.run(t, w.ws, `ln -s '`+w.canary+`' ~/key-link; ln -s '`+victim+`' ~/dir-link; ln -s / ~/root-link`)
	dir, _ := agenthome.Dir(agenthome.Choice{Kind: agenthome.Workspace}, w.ws)
	// What an earlier run (say on the docker backend, where ~/src is no
	// mount point) could leave: ~/src a link to a host directory.
	if err := os.RemoveAll(filepath.Join(dir, "src")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "src")); err != nil {
		t.Fatal(err)
	}
	if out := w.run(t, w.ws, `cat in-ws; test -L ~/src && echo LINK; cat ~/key-link 2>&1 | head -1`); !strings.HasPrefix(out, "ws\n") || strings.Contains(out, "LINK") || strings.Contains(out, w.marker) {
		t.Errorf("run after the planted link: %q", out)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("the run created %v in the link's target %s", ents, victim)
	}
	code, out, errs := vakMain(t, w.cfg, "gc", "--home", "workspace", "-w", w.ws)
	if code != 0 || !strings.Contains(out, "removed workspace "+w.ws+" ("+dir) {
		t.Fatalf("gc --home workspace: %d %q %q", code, out, errs)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the home survived gc: %v", err)
	}
	if b, err := os.ReadFile(w.canary); err != nil || string(b) != w.marker+"\n" {
		t.Errorf("the link's target %s: %q %v", w.canary, b, err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the linked directory: %v", err)
	}
}

// vak gc --homes lists and removes persistent homes (all, or one with
// --home), --dry-run removes nothing, and bad profile names are refused
// with the value named; doctor shows the home a run would get.
func TestGCHomes(t *testing.T) {
	w := newHomeWorld(t)
	code, out, errs := vakMain(t, w.cfg, "doctor", "-w", w.ws)
	dir, _ := agenthome.Dir(agenthome.Choice{Kind: agenthome.Workspace}, w.ws)
	if !strings.Contains(out, "home: workspace, kept in "+dir+" (not created yet") {
		t.Errorf("doctor before a run: %d %s %s", code, out, errs)
	}
	for _, c := range []string{"workspace", "profile:a", "profile:b"} {
		ch, _ := agenthome.Parse(c)
		d, err := agenthome.Ensure(ch, w.ws)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "f"), make([]byte, 8192), 0o600)
	}
	if _, out, _ := vakMain(t, w.cfg, "doctor", "-w", w.ws, "--home", "profile:a"); !strings.Contains(out, "home: profile:a, kept in ") || !strings.Contains(out, "KiB in 1 entries") {
		t.Errorf("doctor: %s", out)
	}
	if _, out, _ := vakMain(t, w.cfg, "doctor", "-w", w.ws, "--home", "fresh"); !strings.Contains(out, "home: fresh") {
		t.Errorf("doctor --home fresh: %s", out)
	}
	code, out, errs = vakMain(t, w.cfg, "gc", "--homes", "--dry-run")
	if code != 0 || strings.Count(out, "would remove ") != 3 || !strings.Contains(out, "would remove profile:a (") || !strings.Contains(out, "would remove workspace "+w.ws) {
		t.Fatalf("gc --homes --dry-run: %d %q %q", code, out, errs)
	}
	if hs, _ := agenthome.List(); len(hs) != 3 {
		t.Fatalf("--dry-run removed something: %v", hs)
	}
	code, out, _ = vakMain(t, w.cfg, "gc", "--home", "profile:a")
	if code != 0 || !strings.HasPrefix(out, "removed profile:a (") || strings.Count(out, "removed") != 1 {
		t.Fatalf("gc --home profile:a: %d %q", code, out)
	}
	for _, bad := range []string{"profile:../x", "profile:a/b", "profile:", "profile:a\x01"} {
		for _, args := range [][]string{{"gc", "--home", bad}, {"run", "-w", w.ws, "--home", bad, "--", "true"}, {"doctor", "--home", bad}} {
			code, _, errs := vakMain(t, w.cfg, args...)
			name := strings.TrimPrefix(bad, "profile:")
			if code != ExitUsage || !strings.Contains(errs, "--home") || !strings.Contains(errs, strings.Trim(fmtQ(name), `"`)) {
				t.Errorf("%q: exit %d %q, want %d naming %q", args, code, errs, ExitUsage, name)
			}
		}
	}
	code, out, _ = vakMain(t, w.cfg, "gc", "--homes")
	if code != 0 || strings.Count(out, "removed ") != 2 {
		t.Fatalf("gc --homes: %d %q", code, out)
	}
	if _, out, _ := vakMain(t, w.cfg, "gc", "--homes"); out != "no persistent homes\n" {
		t.Errorf("gc --homes with none: %q", out)
	}
	if code, _, _ := vakMain(t, w.cfg, "gc", "--dry-run"); code != ExitUsage {
		t.Errorf("gc --dry-run alone: exit %d", code)
	}
}

// On the docker backend the same home is bound at the container's HOME
// (/home/vak), owned by the invoking user.
func TestRunDockerHome(t *testing.T) {
	w := newHomeWorld(t)
	w.cfg = dockerConfig(t)
	out := w.run(t, w.ws, `echo "$HOME"; echo kept > ~/.agentrc; stat -c %u ~/.agentrc`)
	if out != docker.PersistentHome+"\n"+itoa(os.Getuid())+"\n" {
		t.Errorf("first docker run: %q", out)
	}
	if out := w.run(t, w.ws, `cat ~/.agentrc`); out != "kept\n" {
		t.Errorf("second docker run: %q", out)
	}
	if out := w.run(t, w.ws, `cat ~/.agentrc 2>&1; echo "$HOME"`, "--home", "fresh"); !strings.HasSuffix(out, "\n/tmp\n") || strings.Contains(out, "kept") {
		t.Errorf("fresh docker run: %q", out)
	}
	if out := w.run(t, w.ws, `cat ~/.agentrc`, "--mode", "read-only"); out != "kept\n" {
		t.Errorf("read-only docker run: %q", out)
	}
	w.noSecrets(t, w.ws)
	if l := leftovers(t, w.ws); l != "" {
		t.Errorf("containers left: %s", l)
	}
}

func fmtQ(s string) string { return strconv.Quote(s) }

func itoa(n int) string { return strconv.Itoa(n) }

// HOME=/tmp (a service account, some CI containers) cannot hold a
// persistent home on the native backend, where the sandbox has its own
// /tmp: the default home falls back to a fresh one (and doctor says so); a
// home chosen explicitly fails closed, naming HOME and the way out.
func TestRunHomeOnSandboxDir(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	t.Setenv("HOME", "/tmp")
	for i := 0; i < 2; i++ {
		code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--", "sh", "-c", `echo "$HOME"; cat ~/.kept 2>/dev/null; echo x > ~/.kept`)
		if code != 0 || out != "/tmp\n" {
			t.Fatalf("default home with HOME=/tmp, run %d: exit %d: %q %q", i, code, out, errs)
		}
	}
	if _, out, _ := vakMain(t, cfg, "doctor", "-w", ws); !strings.Contains(out, `home: fresh (the default workspace home cannot be placed: HOME is "/tmp"`) {
		t.Errorf("doctor: %s", out)
	}
	for _, h := range []string{"workspace", "profile:p"} {
		code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--home", h, "--", "sh", "-c", "echo ran > ran")
		if code != ExitUnavailable || !strings.Contains(errs, `HOME is "/tmp"`) || !strings.Contains(errs, "--home fresh") || !strings.Contains(errs, "nothing was run") {
			t.Fatalf("--home %s: exit %d: %q %q", h, code, out, errs)
		}
		if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
			t.Fatalf("--home %s: the command ran", h)
		}
	}
}
