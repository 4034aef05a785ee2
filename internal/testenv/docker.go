package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIDLabel ties a Docker object to the top-level test that created it
// (value: TestID), so a test can check that it left nothing behind without
// seeing objects of tests running in parallel. Objects also carry
// TestLabel=1.
const TestIDLabel = "vak.test.id"

// dockerTimeout bounds one docker CLI call made by these helpers.
const dockerTimeout = 2 * time.Minute

// runNonce makes TestID unique per test process.
var runNonce = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// TestID is the TestIDLabel value for t: derived from this process and the
// name of t's top-level test, so subtests share their parent's ID.
func TestID(t testing.TB) string {
	top, _, _ := strings.Cut(t.Name(), "/")
	sum := sha256.Sum256([]byte(runNonce + "\x00" + top))
	return hex.EncodeToString(sum[:6])
}

// LabelArgs are the docker CLI arguments that label an object as t's.
func LabelArgs(t testing.TB) []string {
	return []string{"--label", TestLabel + "=1", "--label", TestIDLabel + "=" + TestID(t)}
}

// UniqueName returns "vaktest-PREFIX-" plus random hex: a name for a
// container or network that cannot collide with another test's.
func UniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "vaktest-" + prefix + "-" + hex.EncodeToString(b)
}

// Docker runs the docker CLI with args and returns its trimmed stdout; it
// fails t (quoting stderr) when the command fails.
func Docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := docker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// CreateNetwork creates a Docker network labelled for t (args are further
// `docker network create` options, e.g. "--internal") and removes it when
// t ends. Create networks before the containers on them: cleanups run in
// reverse order.
func CreateNetwork(t testing.TB, name string, args ...string) string {
	t.Helper()
	RequireDocker(t)
	cmd := append([]string{"network", "create"}, LabelArgs(t)...)
	cmd = append(append(cmd, args...), name)
	Docker(t, cmd...)
	t.Cleanup(func() {
		if _, err := docker("network", "rm", name); err != nil {
			t.Errorf("remove test network: %v", err)
		}
	})
	return name
}

// RunContainer starts a detached container labelled for t on network and
// returns its ID and its IPv4 address on that network ("" for networks
// without one, such as "none" or "container:ID"). args are further
// `docker run` arguments: options, then the image and its command, e.g.
//
//	id, ip := testenv.RunContainer(t, testenv.UniqueName("canary"), net,
//		"--network-alias", "canary.test", img, "/bin/testnet", "canary")
//
// name may be "" (Docker picks one). The container and its anonymous
// volumes are removed when t ends; if t failed, the tail of its log is
// logged first.
func RunContainer(t testing.TB, name, network string, args ...string) (id, ip string) {
	t.Helper()
	RequireDocker(t)
	cidfile := filepath.Join(t.TempDir(), "cid")
	cmd := append([]string{"run", "-d", "--cidfile", cidfile, "--network", network}, LabelArgs(t)...)
	if name != "" {
		cmd = append(cmd, "--name", name)
	}
	cmd = append(cmd, args...)
	id, err := docker(cmd...)
	if err != nil {
		// docker run can fail after creating the container (e.g. when the
		// command does not exist): remove what it left.
		if b, rerr := os.ReadFile(cidfile); rerr == nil && len(b) > 0 {
			_, _ = docker("rm", "-f", "-v", strings.TrimSpace(string(b)))
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("docker", "logs", "--tail", "40", id).CombinedOutput()
			t.Logf("container %s (%s) log tail:\n%s", name, short(id), logs)
		}
		if _, err := docker("rm", "-f", "-v", id); err != nil {
			t.Errorf("remove test container: %v", err)
		}
	})
	if network == "none" || network == "host" || strings.HasPrefix(network, "container:") {
		return id, ""
	}
	ip = Docker(t, "inspect", "-f", `{{with index .NetworkSettings.Networks "`+network+`"}}{{.IPAddress}}{{end}}`, id)
	return id, ip
}

// Exec runs cmd in a running container and returns its combined output and
// exit code. It fails t only when docker itself fails.
func Exec(t testing.TB, container string, cmd ...string) (out string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	b, err := exec.CommandContext(ctx, "docker", append([]string{"exec", container}, cmd...)...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() > 0 && ee.ExitCode() < 125:
		return string(b), ee.ExitCode()
	case err != nil:
		t.Fatalf("docker exec %s %s: %v: %s", short(container), strings.Join(cmd, " "), err, b)
	}
	return string(b), 0
}

// readyTimeout bounds WaitReady.
const readyTimeout = 30 * time.Second

// WaitReady waits until a container running a scripts/testnet role has
// printed its ready line (every listener bound), failing t with the
// container's log if it exits or the line does not come.
func WaitReady(t testing.TB, container string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		logs, _ := exec.Command("docker", "logs", container).CombinedOutput()
		for _, line := range strings.Split(string(logs), "\n") {
			if strings.HasPrefix(line, "testnet ") && strings.Contains(line, ": ready") {
				return
			}
		}
		running, err := docker("inspect", "-f", "{{.State.Running}}", container)
		if err != nil || running != "true" || time.Now().After(deadline) {
			t.Fatalf("container %s is not ready (running=%s, %v); log:\n%s", short(container), running, err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CheckLeftovers makes t fail if, when it ends, any container, network or
// volume labelled with its TestID remains. Call it first, before creating
// anything, so that its check runs after every other cleanup.
func CheckLeftovers(t testing.TB) {
	t.Helper()
	RequireDocker(t)
	filter := "label=" + TestIDLabel + "=" + TestID(t)
	t.Cleanup(func() {
		for _, kind := range [][]string{
			{"ps", "-aq", "--filter", filter},
			{"network", "ls", "-q", "--filter", filter},
			{"volume", "ls", "-q", "--filter", filter},
		} {
			out, err := docker(kind...)
			if err != nil {
				t.Errorf("check leftovers: %v", err)
			} else if out != "" {
				t.Errorf("test left Docker objects behind (docker %s): %s", strings.Join(kind, " "), strings.Fields(out))
			}
		}
	})
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// DockerCLIImage is base plus the host's static docker CLI (removed at the
// end of the test); it skips t when the host has none.
func DockerCLIImage(t testing.TB, base string) string {
	t.Helper()
	p, err := exec.LookPath("docker")
	if err != nil {
		Missing(t, EnvRequireDocker, "a docker CLI on the host (for an agent image with the docker CLI)")
	}
	if out, _ := exec.Command("file", "-L", p).Output(); len(out) > 0 && !bytes.Contains(out, []byte("statically linked")) {
		Missing(t, EnvRequireDocker, "a static docker CLI on the host; this one is not: "+strings.TrimSpace(string(out)))
	}
	ctxDir := t.TempDir()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(ctxDir, "root", "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(ctxDir, "root", "bin", "docker"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM "+base+"\nCOPY root/ /\n"), 0o644)
	var rnd [4]byte
	rand.Read(rnd[:])
	tag := "vaktest-dockercli:" + hex.EncodeToString(rnd[:])
	cmd := exec.Command("docker", append([]string{"build", "-q", "-t", tag}, append(LabelArgs(t), ctxDir)...)...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", tag, err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	return tag
}
