package proxynet

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"vak/internal/testenv"
)

// The attack of issue 27 through nested Docker: a detached inner container
// of a --docker session writes the workspace after `vak session exec`
// returned (.envrc, which direnv runs on cd, and .vscode/tasks.json, which
// an editor runs on folder open), as root of the host: the nested engine
// has no user namespace, so the control file it writes with them belongs
// to uid 0, and a non-root user cannot remove a file root made in a
// directory root made. The session's workspace watcher removes the plants
// while the session runs (through a sweep as root where the user may not:
// this test runs as vak-ci too), clears the setuid bit of a root-owned
// copy of a shell, and logs each; the next exec does not adopt them. A
// second inner container plants in a loop until `vak session rm`, which
// stops the nested engine (and with it every inner container) before its
// final sweep: nothing is left, and no sweep container either.
func TestDockerSessionWatcher(t *testing.T) {
	testenv.CheckLeftovers(t)
	needSidecarImage(t)
	f := newNestedFixture(t, "")
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	id, all, err := f.run(append(append([]string{"session", "create"}, labels...), "-w", f.ws, "--task", "watch", "--network", "proxied", "--docker")...)
	if err != nil {
		t.Fatalf("session create --docker: %v\n%s", err, all)
	}
	id = strings.TrimSpace(id)
	removed := false
	f.cleanUp(t, labels, id, &removed)
	sexec := func(script string) string {
		t.Helper()
		out, errs, err := f.run("session", "exec", id, "--", "sh", "-c", script)
		if err != nil {
			t.Fatalf("exec %q: %v\n%s%s", script, err, out, errs)
		}
		return out + errs
	}
	if out := sexec("docker load -i inner.tar"); !strings.Contains(out, "Loaded image") {
		t.Fatalf("docker load through the guard: %s", out)
	}
	ws, base := f.ws, f.base
	sexec("docker run -d -v " + ws + ":/ws " + base + ` sh -c 'sleep 4; echo "echo pwn" > /ws/.envrc; mkdir -p /ws/.vscode; echo "{\"tasks\":[]}" > /ws/.vscode/tasks.json; cp /bin/sh /ws/suid; chmod 4755 /ws/suid; echo ok > /ws/inner-done'`)
	sexec("true") // exec returned; the inner container plants later
	in := func(rel string) string { return filepath.Join(ws, rel) }
	waitFor(t, "the inner container's own file", func() bool {
		_, err := os.Stat(in("inner-done"))
		return err == nil
	})
	var st syscall.Stat_t
	if err := syscall.Stat(in("inner-done"), &st); err != nil || st.Uid != 0 {
		t.Fatalf("the inner container's file is owned by uid %d (%v), want 0: the class this test covers is root-owned plants", st.Uid, err)
	}
	logf := filepath.Join(f.xdg, "vak", "sessions", "watch", id, "log")
	waitFor(t, "the watcher to remove and log the plants", func() bool {
		b, _ := os.ReadFile(logf)
		fi, err := os.Stat(in("suid"))
		return gone(in(".envrc")) && gone(in(".vscode")) && err == nil && fi.Mode()&os.ModeSetuid == 0 &&
			strings.Contains(string(b), "removed .envrc") && strings.Contains(string(b), "removed .vscode") && strings.Contains(string(b), "bits of suid")
	})
	if b, _ := os.ReadFile(logf); strings.Contains(string(b), "warning") {
		t.Errorf("the watcher warned:\n%s", b)
	}
	if out := sexec("test -e .envrc || test -e .vscode || echo clean"); !strings.Contains(out, "clean") {
		t.Fatalf("the next exec sees a plant: %s", out)
	}

	// Until rm: an inner container that plants again and again.
	sexec("docker run -d -v " + ws + ":/ws " + base + ` sh -c 'while :; do mkdir -p /ws/.idea; echo x > /ws/.idea/workspace.xml; sleep 0.05; done'`)
	waitFor(t, "the looping plant to be removed at least once", func() bool {
		b, _ := os.ReadFile(logf)
		return strings.Contains(string(b), "removed .idea")
	})
	_, out, err := f.run(append(append([]string{"session", "rm"}, labels...), id)...)
	if err != nil || !strings.Contains(out, "removed .vscode") {
		t.Fatalf("session rm: %v\n%s", err, out)
	}
	removed = true
	// rm removed the nested engine after its sweep: a plant made between
	// the sweep and that removal would be here now.
	if !gone(in(".idea")) {
		t.Error(".idea, planted in a loop by an inner container, survived vak session rm")
	}
	for _, kind := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}} {
		if o := testenv.Docker(t, append(kind, "--filter", "label=vak.session="+id)...); strings.TrimSpace(o) != "" {
			t.Errorf("session rm left docker %v: %s", kind, o)
		}
	}
	if b, err := os.ReadFile(in("inner-done")); err != nil || string(b) != "ok\n" {
		t.Errorf("the inner container's ordinary file: %q %v", b, err)
	}
}

// gone reports whether p does not exist (not following a link).
func gone(p string) bool {
	_, err := os.Lstat(p)
	return err != nil
}

// waitFor polls cond until it holds, failing the test after two minutes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
