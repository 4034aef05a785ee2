package proxynet

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/paths"
	"vak/internal/testenv"
)

// DebianImage is the local Debian root for package-manager tests
// (scripts/build-debian-test-image.sh).
const DebianImage = "vak-test-debian:bookworm"

// Issue 11, item 7: stock apt-get switches users (setgroups, seteuid to
// _apt), which every dropped capability forbids. With session.allow_install
// a root session's `vak session exec --root` runs apt-get update and
// install through the proxied network against the real Debian archive the
// image is configured with (its name and address read at run time, the
// address listed in the rule's cidrs); without it the same apt-get update
// fails with the setgroups/seteuid error and --root is refused.
func TestSessionAptInstall(t *testing.T) {
	testenv.CheckLeftovers(t)
	testenv.RequireDocker(t)
	if err := exec.Command("docker", "image", "inspect", DebianImage).Run(); err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, DebianImage+" is not built: run scripts/build-debian-test-image.sh")
	}
	vak := testenv.Vak(t)
	// The archive the image uses, and where it resolves from here.
	src, err := exec.Command("docker", "run", "--rm", "--network", "none", "--label", testenv.TestLabel+"=1", "--label", testenv.TestIDLabel+"="+testenv.TestID(t),
		DebianImage, "sh", "-c", "cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null; true").Output()
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "deb" {
			if u, err := url.Parse(f[1]); err == nil && u.Scheme == "http" {
				hosts[u.Hostname()] = true
			}
		}
	}
	var hostList, cidrs []string
	for h := range hosts {
		addrs, err := net.LookupHost(h)
		if err != nil {
			testenv.Missing(t, testenv.EnvRequireDocker, "the Debian archive "+h+" does not resolve here: "+err.Error())
		}
		hostList = append(hostList, fmt.Sprintf("%q", h))
		for _, a := range addrs {
			if ip := net.ParseIP(a); ip.To4() != nil {
				cidrs = append(cidrs, fmt.Sprintf("%q", a+"/32"))
			}
		}
	}
	if len(hostList) == 0 {
		t.Fatalf("no http archive in the image's sources: %s", src)
	}
	base, _ := filepath.EvalSymlinks(t.TempDir())
	xdg := filepath.Join(base, "xdg-state")
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	run := func(install bool) {
		cfgFile := filepath.Join(base, fmt.Sprintf("config-%t.toml", install))
		os.WriteFile(cfgFile, []byte(fmt.Sprintf(`version = 1
[sandbox]
backend = "docker"
image = %q
user = "root"
[session]
allow_install = %t
[network]
policy = "proxied"
[[network.rules]]
name = "debian archive"
hosts = [%s]
cidrs = [%s]
methods = ["GET", "HEAD"]
`, DebianImage, install, strings.Join(hostList, ", "), strings.Join(cidrs, ", "))), 0o600)
		ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, fmt.Sprintf("ws-%t", install))))
		if err != nil {
			t.Fatal(err)
		}
		vakCmd := func(args ...string) (string, error) {
			cmd := exec.Command(vak, append([]string{"--config", cfgFile}, args...)...)
			cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+xdg)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			return strings.TrimSpace(out.String()), err
		}
		out, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--network", "proxied")...)
		if err != nil {
			t.Fatalf("session create: %v %s", err, out)
		}
		lines := strings.Split(out, "\n")
		id := lines[len(lines)-1]
		defer func() {
			if out, err := vakCmd(append(append([]string{"session", "rm"}, labels...), id)...); err != nil {
				t.Errorf("rm: %v %s", err, out)
			}
		}()
		if !install {
			out, err := vakCmd("session", "exec", id, "--", "apt-get", "update")
			if err == nil || !(strings.Contains(out, "setgroups") || strings.Contains(out, "seteuid")) {
				t.Errorf("apt-get update without allow_install: %v\n%s", err, out)
			}
			if out, err := vakCmd("session", "exec", "--root", id, "--", "true"); err == nil || !strings.Contains(out, "allow_install") {
				t.Errorf("--root without allow_install: %v %s", err, out)
			}
			return
		}
		out, err = vakCmd("session", "exec", "--root", id, "--", "apt-get", "update")
		if err != nil || !strings.Contains(out, "Reading package lists") {
			t.Fatalf("apt-get update with allow_install: %v\n%s", err, out)
		}
		out, err = vakCmd("session", "exec", "--root", id, "--", "apt-get", "install", "-y", "--no-install-recommends", "jq")
		if err != nil {
			t.Fatalf("apt-get install with allow_install: %v\n%s", err, out)
		}
		if out, err := vakCmd("session", "exec", id, "--", "jq", "-n", "1+1"); err != nil || out != "2" {
			t.Fatalf("the installed jq: %v %q", err, out)
		}
	}
	t.Run("WithoutAllowInstall", func(t *testing.T) { run(false) })
	t.Run("WithAllowInstall", func(t *testing.T) { run(true) })
}
