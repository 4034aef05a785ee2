package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/testenv"
)

// A user who cannot use the host's Docker daemon gets a clear error from
// `vak session create --docker` and from `vak session pool fill --docker`
// (exit 69, naming the daemon's socket, the uid and the docker group)
// before anything is built or started. It runs
// as an unprivileged user: in-process in the non-root leg (vak-ci), and
// through runuser as that leg's user (or vakuser) without the docker group
// when the test runs as root. Control: the same
// user and command against a socket it may use (a stub answering the
// Engine API's /_ping) gets past the check (it fails later, differently).
func TestSessionDockerNeedsEngineAccess(t *testing.T) {
	dir, ws := accessTestDir(t)
	cfg := filepath.Join(dir, "config.toml")
	os.WriteFile(cfg, []byte("version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"vak-test:latest\"\n[network]\npolicy = \"proxied\"\n[session]\npool_size = 1\n"), 0o644)
	stub := stubEngine(t, filepath.Join(dir, "stub.sock"))

	for _, cmdline := range [][]string{
		{"session", "create", "--label", "vak.test=1", "-w", ws, "--network", "proxied", "--docker"},
		{"session", "pool", "fill", "--label", "vak.test=1", "-w", ws, "--network", "proxied", "--docker"},
	} {
		t.Run(strings.Join(cmdline[:2], "-"), func(t *testing.T) {
			testEngineAccess(t, dir, ws, stub, append([]string{"--config", cfg}, cmdline...))
		})
	}
}

func testEngineAccess(t *testing.T, dir, ws, stub string, args []string) {
	run := func(dockerHost string) (int, string) {
		t.Helper()
		return runUnprivileged(t, dir, []string{"DOCKER_HOST=" + dockerHost}, args)
	}
	// The default daemon socket, which this user may not use.
	sock := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		sock = strings.TrimPrefix(h, "unix://")
	}
	if os.Getuid() != 0 {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			t.Skipf("this user (uid %d) can use %s: nothing to refuse", os.Getuid(), sock)
		}
	}
	code, out := run("unix://" + sock)
	if code != 69 || !strings.Contains(out, "permission denied on "+sock+": add ") || !strings.Contains(out, " group (usermod -aG ") || !strings.Contains(out, "nested Docker, --docker, starts its engine through the host's Docker daemon") {
		t.Errorf("--docker without access to the daemon: exit %d\n%s", code, out)
	}
	code, out = run("unix://" + stub)
	if code == 0 || strings.Contains(out, "permission denied on") {
		t.Errorf("control: against a socket the user may use, the access check still refused (exit %d)\n%s", code, out)
	}
	t.Logf("control (stub engine): exit %d: %s", code, strings.TrimSpace(out))
}

// accessTestDir returns a directory every user may enter (not
// t.TempDir: its parent is private to this user), removed at the end, and
// a workspace in it every user may write.
func accessTestDir(t *testing.T) (dir, ws string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "vak-docker-access-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	ws = filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o777)
	os.Chmod(ws, 0o777)
	return dir, ws
}

// stubVersion is the server version stubEngine reports.
const stubVersion = "99.0.0-vak-stub"

// stubEngine serves a stub of the Engine API on the unix socket sock
// (mode 0666) until the test ends: /_ping, /version (what the docker
// CLI's probe asks) and /info (no runtime but runc); 404 otherwise.
func stubEngine(t *testing.T, sock string) string {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o666)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		switch p := r.URL.Path; {
		case strings.HasSuffix(p, "/_ping"):
			w.Write([]byte("OK"))
		case strings.HasSuffix(p, "/version"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"Version":%q,"ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux","Arch":"amd64"}`, stubVersion)
		case strings.HasSuffix(p, "/info"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"ServerVersion":%q,"Runtimes":{"runc":{"path":"runc"}}}`, stubVersion)
		default:
			http.Error(w, `{"message":"stub engine"}`, http.StatusNotFound)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// runUnprivileged runs vak with args as an unprivileged user without the
// docker group, in dir, with env (NAME=VALUE) added to a minimal
// environment (PATH=/usr/bin:/bin unless env sets it, HOME=dir,
// XDG_STATE_HOME below dir): in-process when the test is not root (the
// non-root leg's user), else through runuser as that leg's user (or
// vakuser). It returns the exit status and stdout and stderr together.
func runUnprivileged(t *testing.T, dir string, env, args []string) (int, string) {
	t.Helper()
	state := filepath.Join(dir, "state")
	os.MkdirAll(state, 0o777)
	os.Chmod(state, 0o777)
	base := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "XDG_STATE_HOME=" + state}
	if os.Getuid() != 0 {
		for _, kv := range append(base[1:], env...) {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String() + errb.String()
	}
	runAs := testenv.UnprivilegedUser(t)
	vak := testenv.Vak(t)
	os.Chmod(filepath.Dir(vak), 0o755)
	cmd := exec.Command("runuser", append([]string{"-u", runAs, "--", "env", "-i"}, append(append(base, env...), append([]string{vak}, args...)...)...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}
