package cli

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
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
	// Not t.TempDir: its parent is private to this user.
	dir, err := os.MkdirTemp("", "vak-docker-access-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o777)
	os.Chmod(ws, 0o777)
	cfg := filepath.Join(dir, "config.toml")
	os.WriteFile(cfg, []byte("version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"vak-test:latest\"\n[network]\npolicy = \"proxied\"\n[session]\npool_size = 1\n"), 0o644)
	stub := filepath.Join(dir, "stub.sock")
	ln, err := net.Listen("unix", stub)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(stub, 0o666)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_ping") {
			w.Header().Set("Api-Version", "1.41")
			w.Write([]byte("OK"))
			return
		}
		http.Error(w, `{"message":"stub engine"}`, http.StatusNotFound)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

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
		state := filepath.Join(dir, "state")
		os.MkdirAll(state, 0o777)
		os.Chmod(state, 0o777)
		if os.Getuid() != 0 {
			t.Setenv("XDG_STATE_HOME", state)
			t.Setenv("DOCKER_HOST", dockerHost)
			var out, errb bytes.Buffer
			code := Main(context.Background(), args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
			return code, out.String() + errb.String()
		}
		// An unprivileged user without the docker group: the non-root
		// leg's (created by .ci/run before the tests), else vakuser.
		runAs := ""
		for _, u := range []string{os.Getenv("VAK_NONROOT_USER"), "vak-ci", "vakuser"} {
			if u == "" {
				continue
			}
			if _, err := user.Lookup(u); err == nil {
				runAs = u
				break
			}
		}
		if runAs == "" {
			testenv.Missing(t, testenv.EnvRequireDocker, "running as root and there is no unprivileged user (VAK_NONROOT_USER, vak-ci or vakuser) to run as")
		}
		vak := testenv.Vak(t)
		os.Chmod(filepath.Dir(vak), 0o755)
		env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "XDG_STATE_HOME=" + state}
		if dockerHost != "" {
			env = append(env, "DOCKER_HOST="+dockerHost)
		}
		cmd := exec.Command("runuser", append([]string{"-u", runAs, "--", "env", "-i"}, append(env, append([]string{vak}, args...)...)...)...)
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
	if code != 69 || !strings.Contains(out, sock) || !strings.Contains(out, "does not answer uid") || !strings.Contains(out, "docker group") && !strings.Contains(out, "usually docker") {
		t.Errorf("--docker without access to the daemon: exit %d\n%s", code, out)
	}
	code, out = run("unix://" + stub)
	if code == 0 || strings.Contains(out, "does not answer uid") {
		t.Errorf("control: against a socket the user may use, the access check still refused (exit %d)\n%s", code, out)
	}
	t.Logf("control (stub engine): exit %d: %s", code, strings.TrimSpace(out))
}
