package proxynet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/taskenv"
	"vak/internal/testenv"
)

// nestedFixture is what the --docker session tests share: the test image
// and vak, a hermetic upstream (allowed.test, denied.test) and canary on an
// "internet" network, a user config whose policy allows allowed.test
// through the gateway with image as the session image (empty: the test
// image plus the host's docker CLI), vak's state dir, and a
// workspace the session's user can write, holding the test image saved as
// inner.tar (loaded through the guard: no registry).
type nestedFixture struct {
	base, vak    string
	inet         string
	canIP, upIP  string
	xdg, cfgFile string
	ws, key      string
}

func newNestedFixture(t *testing.T, image string) *nestedFixture {
	t.Helper()
	f := &nestedFixture{base: testenv.TestNetImage(t), vak: testenv.Vak(t)}
	if image == "" {
		image = testenv.DockerCLIImage(t, f.base)
	}
	in := testenv.StartInternet(t, f.base, "allowed.test", "denied.test")
	certs, upIP, canIP := in.Certs, in.UpstreamIP, in.CanaryIP
	f.inet, f.canIP, f.upIP = in.Network, canIP, upIP

	dir, _ := filepath.EvalSymlinks(t.TempDir())
	f.xdg = filepath.Join(dir, "xdg-state")
	os.MkdirAll(filepath.Join(f.xdg, "vak"), 0o700)
	f.cfgFile = filepath.Join(dir, "config.toml")
	os.WriteFile(f.cfgFile, []byte(fmt.Sprintf(`version = 1
[sandbox]
backend = "docker"
image = %q
[network]
policy = "proxied"
[[network.rules]]
name = "test upstream"
hosts = ["allowed.test"]
cidrs = ["%s/32"]
[network.dns.overrides]
"allowed.test" = [%q]
"denied.test" = [%q]
"canary.test" = [%q]
[gateway]
extra_ca_bundles = [%q]
`, image, upIP, upIP, upIP, canIP, certs.CA)), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(dir, "ws")))
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(ws, 0o777) // the session's user writes here
	f.ws, f.key = ws, Key(ws)
	if out, err := exec.Command("docker", "save", "-o", filepath.Join(ws, "inner.tar"), f.base).CombinedOutput(); err != nil {
		t.Fatalf("docker save: %v %s", err, out)
	}
	os.Chmod(filepath.Join(ws, "inner.tar"), 0o644)
	return f
}

// run runs the fixture's vak with its config and state dir and returns its
// stdout and stderr.
func (f *nestedFixture) run(args ...string) (string, string, error) {
	cmd := exec.Command(f.vak, append([]string{"--config", f.cfgFile}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+f.xdg)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// cleanUp removes --docker session id when the test ends (unless *removed
// says the test did), its sidecar and volumes in any case, and the
// workspace's topology.
func (f *nestedFixture) cleanUp(t *testing.T, labels []string, id string, removed *bool) {
	sidecar := taskenv.SidecarPrefix + id
	t.Cleanup(func() {
		if !*removed {
			f.run(append(append([]string{"session", "rm"}, labels...), id)...)
		}
		dockerOut("rm", "-f", sidecar)
		dockerOut("volume", "rm", "-f", sidecar+"-lib", sidecar+"-sock")
		if cli, err := engine.New(); err == nil {
			Teardown(context.Background(), cli, filepath.Join(f.xdg, "vak"), f.ws, true)
		}
	})
}
