package sandboxtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"vak/internal/sandbox"
)

// The host-side escape classes: what vak itself does on the host around a
// command (the tripwire after it, the mounts before it) must never follow a
// link the command planted out of the workspace; .git (at any depth, as a
// directory, a gitdir file or a link) cannot be swapped, redirected or
// planted; the IDE and tool files that run code on the host are protected;
// and no setuid or setgid file survives a command.

// runHostSide runs the host-side classes against a backend.
func runHostSide(t *testing.T, b Backend) {
	t.Run("CleanupFollowsNoLink", func(t *testing.T) { testCleanupFollowsNoLink(t, b) })
	t.Run("PlantedLinkNotMounted", func(t *testing.T) { testPlantedLinkNotMounted(t, b) })
	t.Run("GitCannotBeSwapped", func(t *testing.T) { testGitSwap(t, b) })
	t.Run("GitCannotBeRedirected", func(t *testing.T) { testGitRedirect(t, b) })
	t.Run("NestedRepositories", func(t *testing.T) { testNestedRepositories(t, b) })
	t.Run("AutoRunFilesCreated", func(t *testing.T) { testAutoRunCreated(t, b) })
	t.Run("AutoRunFilesExisting", func(t *testing.T) { testAutoRunExisting(t, b) })
	t.Run("SetuidFiles", func(t *testing.T) { testSetuid(t, b) })
	t.Run("BackgroundJobPlants", func(t *testing.T) { testBackgroundPlants(t, b) })
}

// canaries plants host files outside the workspace that a host-side
// operation following a link would delete or expose: ~/.kube/config and a
// sibling project's .git (config and a hook).
type canaries struct {
	kube, otherGit string
	files          map[string]string
}

const canaryText = "CANARY-OUTSIDE"

func plantCanaries(t *testing.T, e *Env) *canaries {
	t.Helper()
	c := &canaries{kube: filepath.Join(e.Home, ".kube"), otherGit: filepath.Join(e.Outside, "other", ".git")}
	c.files = map[string]string{
		filepath.Join(c.kube, "config"):                  canaryText + " kube\n",
		filepath.Join(c.kube, "hooks", "x"):              canaryText + " kube hooks\n",
		filepath.Join(c.otherGit, "config"):              canaryText + " other config\n",
		filepath.Join(c.otherGit, "hooks", "pre-commit"): canaryText + " other hook\n",
	}
	for p, data := range c.files {
		writeHost(t, p, data)
	}
	return c
}

// intact fails the test if a canary was removed or changed.
func (c *canaries) intact(t *testing.T) {
	t.Helper()
	for p, want := range c.files {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Errorf("outside the workspace, %s is %q, %v (want it untouched)", p, got, err)
		}
	}
}

func writeHost(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// reported says whether the tripwire reported rel (alone or with a reason).
func reported(removed []string, rel string) bool {
	return slices.ContainsFunc(removed, func(r string) bool { return r == rel || strings.HasPrefix(r, rel+" ") })
}

// A command that only plants links where protected paths or .git would be
// makes the host-side cleanup remove the links, never what they point at.
func testCleanupFollowsNoLink(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	c := plantCanaries(t, e)
	s := e.Start(sandbox.WorkspaceWrite)
	rel, err := filepath.Rel(e.Workspace, c.otherGit)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, cmd, link, report string }{
		{"dot-git to a home directory", "ln -s '" + c.kube + "' .git", ".git", ".git"},
		{"dot-git to another project's .git", "ln -s '" + rel + "' .git", ".git", ".git"},
		// Made whole, then renamed into place: a session's workspace
		// watcher may remove a .git before a second step could fill it.
		{"hooks link in a new .git", "mkdir g && ln -s '" + filepath.Join(c.otherGit, "hooks") + "' g/hooks && mv g .git", ".git", ".git"},
		{"nested dot-git link", "mkdir -p sub && ln -s '" + c.otherGit + "' sub/.git", "sub/.git", "sub/.git"},
		{"protected directory link", "ln -s '" + c.kube + "' .vscode", ".vscode", ".vscode"},
		{"protected file link", "ln -s '" + filepath.Join(c.kube, "config") + "' .envrc", ".envrc", ".envrc"},
		{"parent component link", "ln -s '" + e.Home + "' .config", ".config", ".config/mise"},
		{"middle component link", "mkdir -p .config && ln -s '" + c.kube + "' .config/mise", ".config/mise", ".config/mise"},
	} {
		res := Sh(t, s, tc.cmd+" && echo PLANTED")
		if !strings.Contains(res.Stdout, "PLANTED") {
			t.Errorf("%s: the link was not even planted: %+v", tc.name, res)
			continue
		}
		if exists(filepath.Join(e.Workspace, tc.link)) {
			t.Errorf("%s: %s survived the command", tc.name, tc.link)
		}
		if !reported(res.ProtectedRemoved, tc.report) {
			t.Errorf("%s: not reported as %s: %q", tc.name, tc.report, res.ProtectedRemoved)
		}
		c.intact(t)
		os.RemoveAll(filepath.Join(e.Workspace, "sub"))
		os.RemoveAll(filepath.Join(e.Workspace, ".config"))
	}
	// Positive control: the same cleanup removes a real planted .git.
	res := Sh(t, s, `mkdir -p .git/hooks && printf '[core]\n\tfsmonitor = touch PWNED\n' > .git/config && echo x > .git/hooks/pre-commit`)
	if exists(filepath.Join(e.Workspace, ".git")) || !reported(res.ProtectedRemoved, ".git") {
		t.Errorf("control: a planted .git directory was not removed: %+v", res)
	}
}

// Links left in the workspace before the session (say by an older vak) do
// not make the backend mount or expose what they point at.
func testPlantedLinkNotMounted(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	c := plantCanaries(t, e)
	for link, target := range map[string]string{".git": c.kube, ".vscode": c.otherGit, ".config": e.Home} {
		if err := os.Symlink(target, filepath.Join(e.Workspace, link)); err != nil {
			t.Fatal(err)
		}
	}
	// Control: through the links, the host reaches the canaries.
	if data, err := os.ReadFile(filepath.Join(e.Workspace, ".git", "config")); err != nil || !strings.Contains(string(data), canaryText) {
		t.Fatalf("control: the host does not reach the canary through the link: %q %v", data, err)
	}
	s := e.Start(sandbox.WorkspaceWrite)
	res := Sh(t, s, `cat .git/config .git/hooks/x .vscode/config .vscode/hooks/pre-commit .config/.kube/config 2>&1; echo evil > .git/config; echo evil > .vscode/hooks/pre-commit; echo DONE`)
	if !strings.Contains(res.Stdout, "DONE") {
		t.Fatalf("command did not run: %+v", res)
	}
	if strings.Contains(res.Stdout, canaryText) {
		t.Errorf("a file outside the workspace was exposed through a planted link: %q", res.Stdout)
	}
	c.intact(t)
}

// gitInit makes a minimal repository at dir (HEAD, config, hooks, objects, refs).
func gitInit(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"hooks", "objects", "refs/heads", "info"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	writeHost(t, filepath.Join(dir, "HEAD"), "ref: refs/heads/main\n")
	writeHost(t, filepath.Join(dir, "config"), "[core]\n\tbare = false\n")
	os.Chmod(dir, 0o777)
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return inodeOf(fi)
}

// .git cannot be renamed, removed or replaced, and its config and hooks
// cannot be replaced through a rename: the attack of issue 9 and variants.
func testGitSwap(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	git := filepath.Join(e.Workspace, ".git")
	gitInit(t, git)
	ino, hooksIno := inode(t, git), inode(t, filepath.Join(git, "hooks"))
	s := e.Start(sandbox.WorkspaceWrite)
	for _, cmd := range []string{
		// The exact sequence.
		`mv .git .git-x && mkdir -p .git/objects .git/refs .git/hooks && echo 'ref: refs/heads/main' > .git/HEAD && printf '[core]\n\tfsmonitor = touch PWNED\n' > .git/config && printf '#!/bin/sh\ntouch PWNED\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit`,
		`rm -rf .git; mkdir -p .git/hooks; printf '[core]\n\tfsmonitor = touch PWNED\n' > .git/config; echo x > .git/hooks/pre-commit`,
		`rm -rf .git; echo 'gitdir: evil' > .git`,
		`rm -rf .git; ln -s evil .git`,
		`mv .git/hooks .git/hooks-x; mkdir -p .git/hooks-new && echo x > .git/hooks-new/pre-commit && mv .git/hooks-new .git/hooks`,
		`mv .git/config .git/config-x; printf '[core]\n\tfsmonitor = x\n' > .git/config2 && mv -f .git/config2 .git/config`,
		`mkdir -p .git/info && printf '* filter=evil\n' > .git/info/attributes`,
	} {
		Sh(t, s, cmd)
		if !exists(git) || inode(t, git) != ino {
			t.Fatalf("after %q, .git is not the original directory", cmd)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(git, "config")); string(data) != "[core]\n\tbare = false\n" {
		t.Errorf(".git/config was changed: %q", data)
	}
	if inode(t, filepath.Join(git, "hooks")) != hooksIno || exists(filepath.Join(git, "hooks", "pre-commit")) {
		t.Error(".git/hooks was replaced or a hook planted")
	}
	for _, p := range []string{".git-x", ".git/info/attributes", "PWNED"} {
		if exists(filepath.Join(e.Workspace, p)) {
			t.Errorf("%s exists after the attempts", p)
		}
	}
	// Positive control: the repository stays usable (objects, refs, HEAD).
	res := Sh(t, s, `echo desc > .git/description && mkdir -p .git/refs/heads && echo 0123 > .git/refs/heads/topic && mkdir -p .git/objects/ab && echo ok > .git/objects/ab/cd && echo CONTROL-OK`)
	if !strings.Contains(res.Stdout, "CONTROL-OK") || !exists(filepath.Join(git, "objects", "ab", "cd")) {
		t.Fatalf("control: ordinary writes into .git failed: %+v", res)
	}
}

// In a workspace without .git, a command cannot make one: not a directory,
// not a gitdir file, not a link, at any depth.
func testGitRedirect(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	evil := `mkdir -p evil/hooks evil/objects evil/refs && echo 'ref: refs/heads/main' > evil/HEAD && printf '[core]\n\tfsmonitor = touch PWNED\n' > evil/config && printf '#!/bin/sh\ntouch PWNED\n' > evil/hooks/pre-commit`
	for _, tc := range []struct{ cmd, planted string }{
		{evil + ` && echo 'gitdir: evil' > .git`, ".git"},
		{evil + ` && ln -s evil .git`, ".git"},
		{evil + ` && mkdir -p sub && echo 'gitdir: ../evil' > sub/.git`, "sub/.git"},
		{`mkdir -p deep/a/b/.git/hooks && printf '[core]\n\tfsmonitor = x\n' > deep/a/b/.git/config`, "deep/a/b/.git"},
		{`mkdir -p up && cp -r evil up/.GIT 2>/dev/null || (mkdir -p up/.GIT && echo x > up/.GIT/config)`, "up/.GIT"},
	} {
		res := Sh(t, s, tc.cmd)
		if exists(filepath.Join(e.Workspace, tc.planted)) {
			t.Errorf("after %q, %s exists on the host", tc.cmd, tc.planted)
		}
		if !reported(res.ProtectedRemoved, tc.planted) {
			t.Errorf("after %q, %s was not reported: %q", tc.cmd, tc.planted, res.ProtectedRemoved)
		}
	}
	// Positive control: the rest of what the command wrote is there.
	if !exists(filepath.Join(e.Workspace, "evil", "config")) {
		t.Error("control: ordinary files the command wrote are missing")
	}
}

// Nested repositories and submodules get the same protection as the top
// level one: their .git is pinned, their config and hooks read-only, and a
// gitdir file cannot be rewritten or renamed.
func testNestedRepositories(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	gitInit(t, filepath.Join(e.Workspace, ".git"))
	gitInit(t, filepath.Join(e.Workspace, "sub", ".git"))
	os.Chmod(filepath.Join(e.Workspace, "sub"), 0o777)
	gitInit(t, filepath.Join(e.Workspace, ".git", "modules", "mod"))
	writeHost(t, filepath.Join(e.Workspace, "mod", ".git"), "gitdir: ../.git/modules/mod\n")
	os.Chmod(filepath.Join(e.Workspace, "mod"), 0o777)
	subIno := inode(t, filepath.Join(e.Workspace, "sub", ".git"))
	s := e.Start(sandbox.WorkspaceWrite)
	for _, cmd := range []string{
		`echo x > sub/.git/hooks/pre-commit`,
		`printf '[core]\n\tfsmonitor = x\n' >> sub/.git/config`,
		`mv sub/.git sub/.git-x && mkdir -p sub/.git/hooks && echo x > sub/.git/hooks/pre-commit`,
		`mv sub sub-x && mkdir -p sub/.git/hooks && echo x > sub/.git/hooks/pre-commit`,
		`mkdir -p sub/.git/info && echo '* filter=evil' > sub/.git/info/attributes`,
		`echo 'gitdir: ../evil' > mod/.git`,
		`mv mod/.git mod/.git-x; echo 'gitdir: ../evil' > mod/.git`,
		`mv mod mod-x`,
		`echo x > .git/modules/mod/hooks/pre-commit; echo x >> .git/modules/mod/config`,
	} {
		Sh(t, s, cmd)
	}
	if !exists(filepath.Join(e.Workspace, "sub", ".git")) || inode(t, filepath.Join(e.Workspace, "sub", ".git")) != subIno {
		t.Error("sub/.git was replaced")
	}
	if data, _ := os.ReadFile(filepath.Join(e.Workspace, "sub", ".git", "config")); string(data) != "[core]\n\tbare = false\n" {
		t.Errorf("sub/.git/config was changed: %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(e.Workspace, "mod", ".git")); string(data) != "gitdir: ../.git/modules/mod\n" {
		t.Errorf("mod/.git was changed: %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(e.Workspace, ".git", "modules", "mod", "config")); string(data) != "[core]\n\tbare = false\n" {
		t.Errorf("the submodule's config was changed: %q", data)
	}
	for _, p := range []string{"sub/.git/hooks/pre-commit", "sub/.git/info/attributes", "sub/.git-x", "sub-x", "mod/.git-x", "mod-x", ".git/modules/mod/hooks/pre-commit"} {
		if exists(filepath.Join(e.Workspace, p)) {
			t.Errorf("%s exists after the attempts", p)
		}
	}
	// Positive control: the nested repository stays usable.
	res := Sh(t, s, `echo d > sub/.git/description && echo f > sub/file && echo CONTROL-OK`)
	if !strings.Contains(res.Stdout, "CONTROL-OK") {
		t.Fatalf("control: ordinary writes in a nested repository failed: %+v", res)
	}
}

// autoRunDirs are the default protected entries that are directories.
var autoRunDirs = []string{".vscode", ".devcontainer", ".idea", ".mise", ".config/mise", ".vak"}

// autoRunEntries are the default protected entries outside .git.
func autoRunEntries() []string {
	var out []string
	for _, p := range sandbox.DefaultProtected {
		if !strings.HasPrefix(p, ".git/") {
			out = append(out, p)
		}
	}
	return out
}

// Every default protected IDE and tool file is removed when a command
// creates it.
func testAutoRunCreated(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	var cmd strings.Builder
	for _, p := range autoRunEntries() {
		if slices.Contains(autoRunDirs, p) {
			cmd.WriteString("mkdir -p " + p + " && echo evil > " + p + "/tasks.json\n")
		} else {
			cmd.WriteString("mkdir -p $(dirname " + p + ") && echo evil > " + p + "\n")
		}
	}
	cmd.WriteString("echo ok > control.txt && echo CONTROL-OK\n")
	res := Sh(t, s, cmd.String())
	if !strings.Contains(res.Stdout, "CONTROL-OK") {
		t.Fatalf("control write failed: %+v", res)
	}
	for _, p := range autoRunEntries() {
		if exists(filepath.Join(e.Workspace, p)) {
			t.Errorf("%s created by the command survived it", p)
		}
		if !reported(res.ProtectedRemoved, p) {
			t.Errorf("%s was not reported as removed: %q", p, res.ProtectedRemoved)
		}
	}
}

// Every default protected IDE and tool file that exists cannot be
// modified, renamed, renamed over, or moved away with its parent.
func testAutoRunExisting(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	const orig = "ORIGINAL\n"
	for _, p := range autoRunEntries() {
		f := filepath.Join(e.Workspace, p)
		if slices.Contains(autoRunDirs, p) {
			f = filepath.Join(f, "tasks.json")
		}
		writeHost(t, f, orig)
	}
	os.Chmod(filepath.Join(e.Workspace, ".config"), 0o777)
	s := e.Start(sandbox.WorkspaceWrite)
	var cmd strings.Builder
	for _, p := range autoRunEntries() {
		if slices.Contains(autoRunDirs, p) {
			cmd.WriteString("echo evil > " + p + "/tasks.json; echo evil > " + p + "/new.json; mv " + p + " " + p + "-x\n")
			cmd.WriteString("mkdir -p repl && echo evil > repl/tasks.json && mv repl " + p + "; rm -rf repl\n")
		} else {
			cmd.WriteString("echo evil > " + p + "; echo evil > repl && mv -f repl " + p + "; rm -f repl; mv " + p + " " + p + "-x\n")
		}
	}
	cmd.WriteString("mv .config .config-x && mkdir -p .config/mise && echo evil > .config/mise/config.toml\n")
	cmd.WriteString("echo ok > control.txt && echo CONTROL-OK\n")
	res := Sh(t, s, cmd.String())
	if !strings.Contains(res.Stdout, "CONTROL-OK") {
		t.Fatalf("control write failed: %+v", res)
	}
	for _, p := range autoRunEntries() {
		f := filepath.Join(e.Workspace, p)
		if slices.Contains(autoRunDirs, p) {
			if exists(filepath.Join(f, "new.json")) || exists(filepath.Join(f, "repl")) {
				t.Errorf("a file was added to %s", p)
			}
			f = filepath.Join(f, "tasks.json")
		}
		if data, err := os.ReadFile(f); err != nil || string(data) != orig {
			t.Errorf("%s is %q, %v; want it unchanged", p, data, err)
		}
		if exists(filepath.Join(e.Workspace, p+"-x")) {
			t.Errorf("%s was renamed", p)
		}
	}
	if exists(filepath.Join(e.Workspace, ".config-x")) {
		t.Error(".config, the parent of .config/mise, was renamed")
	}
}

// No setuid or setgid file is left in the workspace after a command: mode
// changes that set them fail or are undone, and the host-side check clears
// them (positive control: a setuid file planted before the command is
// cleared and reported).
func testSetuid(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	planted := filepath.Join(e.Workspace, "planted-suid")
	copyFile(t, e.Probe, planted)
	if err := os.Chmod(planted, os.ModeSetuid|os.ModeSetgid|0o755); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(planted); fi.Mode()&os.ModeSetuid == 0 {
		t.Fatal("control: the host cannot make a setuid file here")
	}
	s := e.Start(sandbox.WorkspaceWrite)
	res := Sh(t, s, `cp ./probe ./suid-copy; chmod 4755 suid-copy; chmod u+s suid-copy; chmod 2755 suid-copy; chmod g+s suid-copy
cp ./probe ./ctl && chmod 700 ctl && chmod 755 ctl && echo CHMOD-OK`)
	if !strings.Contains(res.Stdout, "CHMOD-OK") {
		t.Fatalf("control: an ordinary chmod failed: %+v", res)
	}
	for _, p := range []string{"suid-copy", "planted-suid"} {
		fi, err := os.Stat(filepath.Join(e.Workspace, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s is %v after the command", p, fi.Mode())
		}
	}
	if fi, _ := os.Stat(filepath.Join(e.Workspace, "ctl")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("control: ctl mode %v, want 0755", fi)
	}
	if !slices.ContainsFunc(res.SetuidCleared, func(s string) bool { return strings.HasPrefix(s, "planted-suid ") }) {
		t.Errorf("the planted setuid file was not reported: %q", res.SetuidCleared)
	}
}

// A background job that keeps planting .git, a gitdir redirect and a
// protected file after its command returned (past the command's own check)
// leaves nothing behind once the session has ended. Where the backend lets
// background jobs outlive their command (landlock), the test first waits
// until a plant reappears on the host, so the attempt is proven real there.
func testBackgroundPlants(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	res := Sh(t, s, `mkdir -p evil/hooks && printf '[core]\n\tfsmonitor = touch PWNED\n' > evil/config
(while :; do echo 'gitdir: evil' > .git; mkdir -p sub && echo 'gitdir: ../evil' > sub/.git; echo evil > .envrc; done) >/dev/null 2>&1 &
sleep 0.2; echo STARTED`)
	if !strings.Contains(res.Stdout, "STARTED") {
		t.Fatalf("command did not run: %+v", res)
	}
	// Bounded wait for a plant to reappear on the host after the
	// command's own check; not reappearing (the backend killed the job
	// with its command, as a command-scoped one does) is fine. The bound
	// is the least the wait used to take (50 commands of sleep 0.1), which
	// on a command-scoped backend were 50 container starts, a minute or
	// more, every one of them waited out.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	waitUntil(ctx, func() bool { return exists(filepath.Join(e.Workspace, ".git")) })
	cancel()
	if err := s.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	for _, p := range []string{".git", "sub/.git", ".envrc"} {
		if exists(filepath.Join(e.Workspace, p)) {
			t.Errorf("%s planted by a background job survived the session", p)
		}
	}
	if !exists(filepath.Join(e.Workspace, "evil", "config")) {
		t.Error("control: ordinary files the command wrote are missing")
	}
}
