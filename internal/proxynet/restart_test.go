package proxynet

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/paths"
	"vak/internal/testenv"
)

// Issue 11, item 9: a gateway that stops does not cost a live session its
// network. The session fails closed while the gateway is down (and `vak
// session ls` says so); the next proxied session create brings the gateway
// back in place instead of rebuilding the topology under the session, with
// the same placeholders; the first session has its network again.
func TestGatewayRestartKeepsSessions(t *testing.T) {
	testenv.CheckLeftovers(t)
	img := testenv.TestNetImage(t)
	vak := testenv.Vak(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	xdg := filepath.Join(base, "xdg-state")
	cfgFile := filepath.Join(base, "config.toml")
	os.WriteFile(cfgFile, []byte(`version = 1
[sandbox]
backend = "docker"
image = "`+img+`"
[network]
policy = "proxied"
[[network.rules]]
hosts = ["allowed.test"]
cidrs = ["192.0.2.10/32"]
[network.dns.overrides]
"allowed.test" = ["192.0.2.10"]
[secrets.TOKEN]
value = "restart-secret-value"
hosts = ["allowed.test"]
`), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, "ws")))
	if err != nil {
		t.Fatal(err)
	}
	key := Key(ws)
	_, _, gwName, _, _ := names(key)
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	vakCmd := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(vak, append([]string{"--config", cfgFile}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+xdg)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return strings.TrimSpace(out.String()), err
	}
	create := func(task string) string {
		t.Helper()
		out, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", task, "--network", "proxied")...)
		if err != nil {
			t.Fatalf("session create: %v\n%s", err, out)
		}
		lines := strings.Split(out, "\n")
		id := lines[len(lines)-1]
		t.Cleanup(func() { vakCmd(append(append([]string{"session", "rm"}, labels...), id)...) })
		return id
	}
	dns := func(id string) string {
		t.Helper()
		out, _ := vakCmd("session", "exec", id, "--", "probe", "dns", "allowed.test", "127.0.0.11", "2s")
		return out
	}
	ls := func(id string) string {
		t.Helper()
		out, err := vakCmd(append([]string{"session", "ls"}, labels...)...)
		if err != nil {
			t.Fatalf("session ls: %v %s", err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, id) {
				return l
			}
		}
		t.Fatalf("session ls has no %s:\n%s", id, out)
		return ""
	}

	id1 := create("first")
	if out := dns(id1); !strings.HasPrefix(out, "OK NOERROR A 192.0.2.10") {
		t.Fatalf("control: the session's DNS through the gateway: %s", out)
	}
	ph, _ := vakCmd("session", "exec", id1, "--", "sh", "-c", "echo $TOKEN")
	if !strings.HasPrefix(ph, "vakph_") {
		t.Fatalf("placeholder: %q", ph)
	}
	if l := ls(id1); !strings.Contains(l, " proxied ") {
		t.Fatalf("ls with the network up: %s", l)
	}

	testenv.Docker(t, "stop", "-t", "1", gwName)
	if out := dns(id1); strings.HasPrefix(out, "OK") {
		t.Fatalf("with the gateway stopped the session still resolves: %s", out)
	}
	if l := ls(id1); !strings.Contains(l, "proxied (down: gateway not running)") {
		t.Fatalf("ls does not show the network down: %s", l)
	}

	// The next proxied create brings the gateway back in place.
	id2 := create("second")
	for _, id := range []string{id1, id2} {
		if out := dns(id); !strings.HasPrefix(out, "OK NOERROR A 192.0.2.10") {
			t.Fatalf("after the gateway came back, session %s: %s", id, out)
		}
		if l := ls(id); !strings.Contains(l, " proxied ") {
			t.Errorf("ls after the restart: %s", l)
		}
	}
	if ph2, _ := vakCmd("session", "exec", id2, "--", "sh", "-c", "echo $TOKEN"); ph2 != ph {
		t.Errorf("placeholders changed across the gateway restart: %q, then %q", ph, ph2)
	}
	// A gateway that cannot come back in place (removed): the next create
	// fails (exit 69, naming the sessions) and leaves the netclient the
	// live sessions share alone.
	_, _, _, ncName, _ := names(key)
	ncID := testenv.Docker(t, "inspect", "-f", "{{.Id}}", ncName)
	testenv.Docker(t, "rm", "-f", gwName)
	out, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", "third", "--network", "proxied")...)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 69 || !strings.Contains(out, "still use it") || !strings.Contains(out, id1) {
		t.Fatalf("create with the gateway gone under live sessions: %v\n%s", err, out)
	}
	if got := testenv.Docker(t, "inspect", "-f", "{{.Id}}", ncName); got != ncID {
		t.Fatalf("the netclient of live sessions was replaced")
	}
	if l := ls(id1); !strings.Contains(l, "proxied (down: gateway not running)") {
		t.Errorf("ls with the gateway gone: %s", l)
	}
	if out, err := vakCmd(append(append([]string{"session", "rm"}, labels...), id1, id2)...); err != nil {
		t.Fatalf("rm: %v %s", err, out)
	}
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		if out := testenv.Docker(t, append(kind, "--filter", "label="+LabelKey+"="+key)...); out != "" {
			t.Errorf("left behind: docker %v: %s", kind, out)
		}
	}
}
