package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/testenv"
)

// envChild makes the test binary the access-check child of TestAccess: it
// prints what CheckAccess said for the daemon of its environment and exits.
const envChild = "VAK_ENGINE_ACCESS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		fmt.Print(accessResult())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// accessResult is "OK", or the error of the access check with
// "[daemon-unavailable]" and "[socket-permission]" for the sentinels it
// wraps.
func accessResult() string {
	cli, err := engine.New()
	if err == nil {
		defer cli.Close()
		err = engine.CheckAccess(context.Background(), cli, "")
	}
	if err == nil {
		return "OK"
	}
	s := err.Error()
	if errors.Is(err, engine.ErrDaemonUnavailable) {
		s += " [daemon-unavailable]"
	}
	if errors.Is(err, engine.ErrSocketPermission) {
		s += " [socket-permission]"
	}
	return s
}

// The access check against the real daemon's socket: a user without the
// socket's group (the docker group) is told so, by name, with the fix; with
// the group (and root) the check passes. As root it runs the check in this
// test binary re-executed as the unprivileged user, once without and once
// with the group; as that user (scripts/test-nonroot) in-process, with
// whatever groups the leg gave it.
func TestAccess(t *testing.T) {
	host := engine.EnvHost()
	sock, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		t.Skipf("DOCKER_HOST %s is not a unix socket", host)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, "no Docker daemon socket: "+err.Error())
		return
	}
	gid := int(fi.Sys().(*syscall.Stat_t).Gid)
	group := strconv.Itoa(gid)
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	if os.Getuid() != 0 {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		groups, _ := os.Getgroups()
		member := os.Getgid() == gid || slices.Contains(groups, gid)
		checkAccess(t, accessResult(), sock, u.Username, group, member)
		return
	}
	testenv.RequireDocker(t)
	if got := accessResult(); got != "OK" {
		t.Errorf("as root: %s", got)
	}
	name := testenv.UnprivilegedUser(t)
	bin := worldReadableCopy(t, os.Args[0])
	for _, member := range []bool{false, true} {
		t.Run("member="+strconv.FormatBool(member), func(t *testing.T) {
			args := []string{"-u", name}
			if member {
				args = append(args, "-g", name, "-G", group)
			}
			cmd := exec.Command("runuser", append(args, "--", "env", "-i", "PATH=/usr/bin:/bin", "DOCKER_HOST="+host, envChild+"=1", bin)...)
			cmd.Dir = filepath.Dir(bin)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child as %s: %v: %s", name, err, out)
			}
			checkAccess(t, string(out), sock, name, group, member)
		})
	}
}

// checkAccess checks the access check's result for a user who is or is not
// in the socket's group.
func checkAccess(t *testing.T, got, sock, name, group string, member bool) {
	t.Helper()
	t.Logf("%s, member of %s: %v: %s", name, group, member, got)
	if member {
		if got != "OK" {
			t.Errorf("%s, in group %s: %s", name, group, got)
		}
		return
	}
	want := "docker daemon unavailable: permission denied on " + sock + ": add " + name + " to the " + group + " group (usermod -aG " + group + " " + name + ", then log in again) [daemon-unavailable] [socket-permission]"
	if got != want {
		t.Errorf("%s, not in group %s:\n got %s\nwant %s", name, group, got, want)
	}
}

// worldReadableCopy copies the file src into a new directory every user
// may enter, removed when t ends.
func worldReadableCopy(t *testing.T, src string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vak-engine-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// CheckAccess and APIError against sockets this test controls: a missing
// socket is ErrDaemonUnavailable naming it (never a permission problem),
// and a socket that answers the Engine API's /_ping passes (the control:
// the stub counts the ping, so the check really reached it).
func TestCheckAccess(t *testing.T) {
	stub, missing, pings := testSockets(t)
	tests := []struct {
		name      string
		sock      string
		purpose   string
		wantErr   []string // substrings; nil means no error
		wantPings int32
	}{
		{"stub answers", stub, "", nil, 1},
		{"missing socket", missing, "", []string{"docker daemon unavailable", missing}, 0},
		{"missing socket with purpose", missing, "nested Docker needs it", []string{"docker daemon unavailable", missing, "(nested Docker needs it at unix://" + missing + ", as uid " + strconv.Itoa(os.Getuid()) + ")"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pings.Store(0)
			err := engine.CheckAccess(context.Background(), clientFor(t, tc.sock), tc.purpose)
			if got := pings.Load(); got != tc.wantPings {
				t.Errorf("pings = %d, want %d", got, tc.wantPings)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("CheckAccess: %v", err)
				}
				return
			}
			if !errors.Is(err, engine.ErrDaemonUnavailable) || errors.Is(err, engine.ErrSocketPermission) {
				t.Fatalf("CheckAccess = %v, want ErrDaemonUnavailable and no permission error", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckAccess = %v, want it to name %q", err, w)
				}
			}
		})
	}
}

// APIError turns a failed connection into ErrDaemonUnavailable naming the
// socket, and leaves any other error (here the stub's 404) as it is.
func TestAPIError(t *testing.T) {
	stub, missing, _ := testSockets(t)
	tests := []struct {
		name        string
		sock        string
		unavailable bool
		want        string
	}{
		{"missing socket", missing, true, "inspect x: docker daemon unavailable: "},
		{"daemon answers with an error", stub, false, "inspect x: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := clientFor(t, tc.sock).ContainerInspect(context.Background(), "x", client.ContainerInspectOptions{})
			if err == nil {
				t.Fatal("inspect of a container that does not exist succeeded")
			}
			got := engine.APIError("inspect x", err)
			if errors.Is(got, engine.ErrDaemonUnavailable) != tc.unavailable || !strings.HasPrefix(got.Error(), tc.want) || !errors.Is(got, err) {
				t.Errorf("APIError = %v, want unavailable=%v, prefix %q and the cause wrapped", got, tc.unavailable, tc.want)
			}
			if tc.unavailable && !strings.Contains(got.Error(), tc.sock) {
				t.Errorf("APIError = %v, want it to name %s", got, tc.sock)
			}
			if engine.APIError("x", nil) != nil {
				t.Error("APIError of nil is not nil")
			}
		})
	}
}

// testSockets returns a stub engine's socket (stubEngine), counting its
// pings, and a socket path in the same directory that nothing serves.
func testSockets(t *testing.T) (stub, missing string, pings *atomic.Int32) {
	dir := t.TempDir()
	pings = new(atomic.Int32)
	return stubEngine(t, filepath.Join(dir, "stub.sock"), pings), filepath.Join(dir, "missing.sock"), pings
}

// clientFor is engine.New's client for the daemon socket sock (through
// DOCKER_HOST, for the rest of t), closed when t ends.
func clientFor(t *testing.T, sock string) *engine.Client {
	t.Helper()
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// stubEngine serves a stub of the Engine API on the unix socket sock until
// the test ends: /_ping (counted in pings); 404 otherwise.
func stubEngine(t *testing.T, sock string, pings *atomic.Int32) string {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		if strings.HasSuffix(r.URL.Path, "/_ping") {
			pings.Add(1)
			w.Write([]byte("OK"))
			return
		}
		http.Error(w, `{"message":"stub engine: no such object"}`, http.StatusNotFound)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}
