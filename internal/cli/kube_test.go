//go:build kubernetes

package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/kubesession"
	"vak/internal/testenv"
	"vak/internal/testenv/kubetest"
)

// TestKubernetesSessionCLI drives a kubernetes session through vak's own
// commands on the real test cluster: create (the workspace uploaded),
// exec, ls, pull (changes back, an absolute link refused), rm, and exec of
// the removed session. scripts/test-nonroot runs it as an unprivileged
// user too.
func TestKubernetesSessionCLI(t *testing.T) {
	env := kubetest.Cluster(t)
	vak := testenv.Vak(t)
	ref := kubetest.LoadArchive(t, func(w io.Writer) (string, error) { return kubesession.WriteWorkerImage(w, vak) })
	cfg := writeConfig(t, kubeConfig(env, ref))
	ws := tempWorkspace(t)
	os.WriteFile(filepath.Join(ws, "f.txt"), []byte("from the host\n"), 0o644)
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}

	code, out, errs := vakMain(t, cfg, append([]string{"session", "create", "-w", ws, "--task", "cli"}, labels...)...)
	if code != 0 {
		t.Fatalf("create: exit %d: %s %s", code, out, errs)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { vakMain(t, cfg, "session", "rm", id) })
	if !strings.Contains(errs, "vak: cluster: server v") || !strings.Contains(errs, "workspace uploaded") {
		t.Errorf("create's progress: %s", errs)
	}

	code, out, errs = vakMain(t, cfg, "session", "exec", id, "--", "sh", "-c", "cat f.txt; echo changed > f.txt; echo new > n.txt; ln -s /etc/passwd lnk; id -u")
	if code != 0 || out != "from the host\n1000\n" {
		t.Fatalf("exec: exit %d: %q %s", code, out, errs)
	}
	code, out, _ = vakMain(t, cfg, append([]string{"session", "ls"}, labels...)...)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "kubernetes") {
		t.Errorf("ls: exit %d: %s", code, out)
	}
	// Exit status passes through.
	if code, _, _ := vakMain(t, cfg, "session", "exec", id, "--", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit status %d, want 7", code)
	}

	code, out, errs = vakMain(t, cfg, "session", "pull", id)
	if code != 1 || !strings.Contains(errs, "refused lnk: symbolic link to an absolute path") {
		t.Fatalf("pull: exit %d, want 1 (a link refused): %s %s", code, out, errs)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "f.txt")); string(data) != "changed\n" {
		t.Errorf("f.txt on the host: %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "n.txt")); string(data) != "new\n" {
		t.Errorf("n.txt on the host: %q", data)
	}
	if _, err := os.Lstat(filepath.Join(ws, "lnk")); err == nil {
		t.Error("the refused link reached the host")
	}

	if code, _, errs := vakMain(t, cfg, "session", "rm", id); code != 0 {
		t.Fatalf("rm: exit %d: %s", code, errs)
	}
	// Gone: no kubernetes record, so the Docker path answers: an unknown
	// session, or (a user without Docker access) the daemon's refusal.
	if code, _, errs := vakMain(t, cfg, "session", "exec", id, "--", "true"); code != ExitUsage && code != ExitUnavailable {
		t.Errorf("exec after rm: exit %d, want %d or %d: %s", code, ExitUsage, ExitUnavailable, errs)
	}
}

// kubeConfig is the config of a kubernetes session in env's namespace on
// the busybox image with the worker image ref; tests append sections.
func kubeConfig(env *kubetest.Env, ref string) string {
	return `version = 1
[sandbox]
image = "` + kubetest.BusyboxImage + `"
[session]
backend = "kubernetes"
[kubernetes]
kubeconfig = "` + os.Getenv(kubetest.EnvKubeconfig) + `"
namespace = "` + env.Namespace + `"
worker_image = "` + ref + `"
pull_policy = "Never"
`
}

// TestKubernetesPoolCLI: with session.pool_size on the kubernetes backend,
// `vak session pool fill` starts a warm pod, a create claims it (and tops
// the pool up again), the session works, and rm removes it.
func TestKubernetesPoolCLI(t *testing.T) {
	env := kubetest.Cluster(t)
	vak := testenv.Vak(t)
	ref := kubetest.LoadArchive(t, func(w io.Writer) (string, error) { return kubesession.WriteWorkerImage(w, vak) })
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	cfg := writeConfig(t, strings.Replace(kubeConfig(env, ref), "[session]\n", "[session]\npool_size = 1\n", 1))
	ws := tempWorkspace(t)
	os.WriteFile(filepath.Join(ws, "f.txt"), []byte("warm\n"), 0o644)
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	code, out, errs := vakMain(t, cfg, append([]string{"session", "pool", "fill", "-w", ws}, labels...)...)
	if code != 0 || out != "started 1\n" {
		t.Fatalf("pool fill: exit %d: %q %s", code, out, errs)
	}
	code, out, errs = vakMain(t, cfg, append([]string{"session", "create", "-w", ws, "--task", "warm"}, labels...)...)
	if code != 0 {
		t.Fatalf("create: exit %d: %s %s", code, out, errs)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { vakMain(t, cfg, "session", "rm", id) })
	if !strings.Contains(errs, "claimed warm pod") || !strings.Contains(errs, "vak-pool-") {
		t.Errorf("create did not claim the warm pod: %s", errs)
	}
	if code, out, errs := vakMain(t, cfg, "session", "exec", id, "--", "cat", "f.txt"); code != 0 || out != "warm\n" {
		t.Fatalf("exec: exit %d: %q %s", code, out, errs)
	}
	// The pool was topped up after the claim: a fill starts nothing.
	if code, out, errs := vakMain(t, cfg, append([]string{"session", "pool", "fill", "-w", ws}, labels...)...); code != 0 || out != "started 0\n" {
		t.Errorf("pool fill after a create: exit %d: %q %s", code, out, errs)
	}
	if code, _, errs := vakMain(t, cfg, "session", "rm", id); code != 0 {
		t.Fatalf("rm: exit %d: %s", code, errs)
	}
}
