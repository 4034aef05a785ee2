package proxynet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/shellquote"
	"vak/internal/taskenv"
	"vak/internal/testenv"
)

// dindEnv is one workspace with a hermetic internet (an upstream serving
// allowed.test and other.test, a canary) and the vak CLI configured for
// --docker sessions in it. With pool set (newDindEnvPool), every session
// is claimed from the warm pool: session fills it with one pair first and
// fails unless the create claimed that pair.
type dindEnv struct {
	t              *testing.T
	vak, base, img string
	ws, xdg        string
	cfg, cfgProp   string // without / with session.docker_placeholders
	upIP, canIP    string
	inet, key      string
	secret         string
	labels         []string
	env            []string
	pool           bool
	slots          sync.Map // session ID -> docker slot key
}

// newDindEnv: sessions are created cold.
func newDindEnv(t *testing.T) *dindEnv { return newDindEnvMode(t, false) }

// newDindEnvPool: sessions are claimed warm-pool pairs (session.pool_size
// = 1, `vak session pool fill --docker` before each create).
func newDindEnvPool(t *testing.T) *dindEnv { return newDindEnvMode(t, true) }

func newDindEnvMode(t *testing.T, pool bool) *dindEnv {
	testenv.CheckLeftovers(t)
	needSidecarImage(t) // as non-root: only where root built it
	e := &dindEnv{t: t, pool: pool}
	e.base = testenv.TestNetImage(t)
	e.img = testenv.DockerCLIImage(t, e.base)
	e.vak = testenv.Vak(t)
	in := testenv.StartInternet(t, e.base, "allowed.test", "other.test", "denied.test")
	certs, upIP, canIP := in.Certs, in.UpstreamIP, in.CanaryIP
	e.inet, e.upIP, e.canIP = in.Network, upIP, canIP
	var rnd [8]byte
	rand.Read(rnd[:])
	e.secret = "dind-secret-" + hex.EncodeToString(rnd[:])

	dir, _ := filepath.EvalSymlinks(t.TempDir())
	e.xdg = filepath.Join(dir, "xdg-state")
	os.MkdirAll(filepath.Join(e.xdg, "vak"), 0o700)
	body := fmt.Sprintf(`version = 1
[sandbox]
backend = "docker"
image = %q
[network]
policy = "proxied"
[[network.rules]]
name = "test upstream"
hosts = ["allowed.test"]
cidrs = ["%s/32"]
[[network.rules]]
name = "same upstream, no secret bound"
hosts = ["other.test"]
cidrs = ["%s/32"]
[network.dns.overrides]
"allowed.test" = [%q]
"other.test" = [%q]
"denied.test" = [%q]
"canary.test" = [%q]
[gateway]
extra_ca_bundles = [%q]
[secrets.TOKEN]
env = "VAKTEST_DIND_TOKEN"
hosts = ["allowed.test"]
`, e.img, upIP, upIP, upIP, upIP, upIP, canIP, certs.CA)
	body += "[session]\n"
	if pool {
		body += "pool_size = 1\n"
	}
	e.cfg = filepath.Join(dir, "config.toml")
	os.WriteFile(e.cfg, []byte(body), 0o600)
	e.cfgProp = filepath.Join(dir, "config-propagate.toml")
	os.WriteFile(e.cfgProp, []byte(body+"docker_placeholders = [\"TOKEN\"]\n"), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(dir, "ws")))
	if err != nil {
		t.Fatal(err)
	}
	e.ws = ws
	os.Chmod(ws, 0o777)
	os.MkdirAll(filepath.Join(ws, ".vak"), 0o777)
	e.key = Key(ws)
	if out, err := exec.Command("docker", "save", "-o", filepath.Join(ws, "inner.tar"), e.base).CombinedOutput(); err != nil {
		t.Fatalf("docker save: %v %s", err, out)
	}
	os.Chmod(filepath.Join(ws, "inner.tar"), 0o644)
	e.labels = []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	e.env = append(os.Environ(), "XDG_STATE_HOME="+e.xdg, "VAKTEST_DIND_TOKEN="+e.secret)
	if pool {
		// Runs after the teardown below (which removes the pool
		// containers): pool sidecars a failed test left unclaimed.
		t.Cleanup(func() {
			own := "label=" + testenv.TestIDLabel + "=" + testenv.TestID(t)
			if out, err := dockerOut("ps", "-aq", "--filter", own, "--filter", "name=^"+taskenv.SidecarPrefix+taskenv.PoolSlotPrefix); err == nil && strings.TrimSpace(out) != "" {
				dockerOut(append([]string{"rm", "-f"}, strings.Fields(out)...)...)
			}
			if out, err := dockerOut("volume", "ls", "-q", "--filter", own); err == nil {
				for _, v := range strings.Fields(out) {
					if strings.HasPrefix(v, taskenv.SidecarPrefix+taskenv.PoolSlotPrefix) {
						dockerOut("volume", "rm", "-f", v)
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		if cli, err := engine.New(); err == nil {
			Teardown(context.Background(), cli, filepath.Join(e.xdg, "vak"), ws, true)
		}
	})
	return e
}

func (e *dindEnv) vakCmd(cfg string, args ...string) (string, string, error) {
	cmd := exec.Command(e.vak, append([]string{"--config", cfg}, args...)...)
	cmd.Env = e.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// session creates a --docker session with cfg (in pool mode: claimed from
// the pool, filled first with cfg) and loads the test image into its
// engine through the guard.
func (e *dindEnv) session(cfg, task string) string {
	t := e.t
	t.Helper()
	if e.pool {
		out, errs, err := e.vakCmd(cfg, append(append([]string{"session", "pool", "fill"}, e.labels...), "-w", e.ws, "--network", "proxied", "--docker")...)
		if err != nil || strings.TrimSpace(out) != "started 1" {
			t.Fatalf("session pool fill --docker: %v\n%s%s", err, out, errs)
		}
	}
	out, errs, err := e.vakCmd(cfg, append(append([]string{"session", "create"}, e.labels...), "-w", e.ws, "--task", task, "--network", "proxied", "--docker", "--no-refill")...)
	if err != nil {
		t.Fatalf("session create --docker: %v\n%s", err, errs)
	}
	id := strings.TrimSpace(out)
	slot := e.slot(id)
	sidecar := taskenv.SidecarPrefix + slot
	t.Cleanup(func() {
		if t.Failed() {
			o, _ := dockerOut("logs", "--tail", "30", sidecar)
			t.Logf("sidecar %s log:\n%s", sidecar, o)
		}
		e.vakCmd(cfg, append(append([]string{"session", "rm"}, e.labels...), id)...)
		dockerOut("rm", "-f", sidecar, taskenv.SessionPrefix+id)
		dockerOut("volume", "rm", "-f", sidecar+"-lib", sidecar+"-sock")
	})
	if e.pool != strings.HasPrefix(slot, taskenv.PoolSlotPrefix) || !e.pool && slot != id {
		t.Fatalf("session %s has docker slot %q: claimed from the pool %t, want %t (warnings: %s)", id, slot, !e.pool, e.pool, errs)
	}
	// The gateway reaches the hermetic internet (connecting twice is fine).
	dockerOut("network", "connect", e.inet, "vak-gw-"+e.key)
	if out, err := e.exec(id, "docker load -i inner.tar"); err != nil || !strings.Contains(out, "Loaded image") {
		t.Fatalf("docker load through the guard: %v\n%s", err, out)
	}
	return id
}

// slot is the docker slot key of session id (its container's
// vak.docker.slot label): the session ID for a cold create, a pool slot
// for a claimed pair.
// It is read once, when session creates it (later the session container
// may be gone).
func (e *dindEnv) slot(id string) string {
	if k, ok := e.slots.Load(id); ok {
		return k.(string)
	}
	out, err := dockerOut("inspect", "-f", `{{index .Config.Labels "`+taskenv.LabelDockerSlot+`"}}`, taskenv.SessionPrefix+id)
	if err != nil {
		return "unknown-slot-of-" + id
	}
	k := strings.TrimSpace(out)
	e.slots.Store(id, k)
	return k
}

// sidecar is the sidecar container of session id.
func (e *dindEnv) sidecar(id string) string { return taskenv.SidecarPrefix + e.slot(id) }

// exec runs a shell script in session id through `vak session exec`.
func (e *dindEnv) exec(id, script string) (string, error) {
	out, errs, err := e.vakCmd(e.cfg, "session", "exec", id, "--", "sh", "-c", script)
	return strings.TrimSpace(out + errs), err
}

// raw runs the docker CLI inside session id's sidecar against the raw
// socket: what an agent that got past the guard could do (the sidecar's
// own properties must hold there).
func (e *dindEnv) raw(id string, args ...string) (string, error) {
	return dockerOut(append([]string{"exec", e.sidecar(id), "docker", "-H", "unix://" + dockerd.RawSocket}, args...)...)
}

// canaryControl shows the canary counts traffic from the test internet
// (so a count of 0 later means something), then resets it.
func (e *dindEnv) canaryControl() {
	t := e.t
	t.Helper()
	for _, c := range [][]string{{"probe", "connect", e.canIP + ":80"}, {"probe", "udp", e.canIP + ":9"}, {"probe", "ping", e.canIP}} {
		if out, err := dockerOut(append([]string{"run", "--rm", "--network", e.inet, "--label", testenv.TestLabel + "=1", e.base}, c...)...); err != nil {
			t.Fatalf("control: %v from the test internet: %v %s", c, err, out)
		}
	}
	if c := testenv.ResetCanary(t, e.canIP); c.TCP == 0 || c.UDP == 0 {
		t.Fatalf("control: the canary did not count TCP and UDP from the test internet: %+v", c)
	}
}

// probeCase is one probe of an egress matrix: the probe's command line
// (words split on spaces, each quoted for the inner shell), whether it must
// exit 0, and what its output must contain. A logged probe's status and
// output are only logged.
type probeCase struct {
	probe  string
	ok     bool
	want   string
	logged bool
}

// probeScript is testenv.ProbeScript of probes' command lines.
func probeScript(probes []probeCase) string {
	commands := make([]string, len(probes))
	for i, p := range probes {
		commands[i] = p.probe
	}
	return testenv.ProbeScript(commands)
}

// checkProbes fails t with probeProblems (where names the container) if
// the container that ran probeScript's probes ended with err or left out a
// probe, or any probe's status or output is not what it expects.
func checkProbes(t *testing.T, where string, probes []probeCase, out string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: the probe container: %v\n%s", where, err, out)
	}
	problems, logs := probeProblems(probes, out)
	for _, l := range logs {
		t.Logf("%s: %s", where, l)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", where, p)
	}
}

// probeProblems reads out (probeScript's output): one problem per probe
// whose record is missing or whose status or output is not what it
// expects, and one if the script did not say that every probe ran; logs
// holds the logged probes' records.
func probeProblems(probes []probeCase, out string) (problems, logs []string) {
	if !strings.Contains(out, testenv.ProbeAllRan(len(probes))) {
		problems = append(problems, "the probe container did not run every probe:\n"+out)
	}
	for i, p := range probes {
		got, rc, ok := testenv.ProbeRecord(out, i)
		switch {
		case p.logged:
			logs = append(logs, fmt.Sprintf("%s: exit status %d (record complete: %v): %s", p.probe, rc, ok, got))
		case !ok:
			problems = append(problems, p.probe+": no complete record of this probe in the output")
		case (rc == 0) != p.ok || !strings.Contains(got, p.want):
			problems = append(problems, fmt.Sprintf("%s: exit status %d, want success %v and %q in the output\n%s", p.probe, rc, p.ok, p.want, got))
		}
	}
	return problems, logs
}

// The inner-container egress matrix and the sidecar's own properties,
// through `vak session exec` in a --docker session (default policy: no
// placeholder propagation): on the default bridge and on a user-defined
// network, an allowed host answers 200 with the CA the guard injects, a
// denied host gets the gateway's 403, the canary's address directly
// reaches the gateway (403), UDP, QUIC, ICMP and IPv6 reach nothing, DNS to
// any resolver is answered by the gateway, a placeholder the agent passes
// is swapped only toward its bound host; through the RAW socket (past the
// guard), --net host is fenced like the agent, host paths, the host's
// Docker socket and cgroups are the sidecar's, not the host's, and the
// cgroup-v1 release_agent cannot be reached; a workspace directory swapped
// for a symlink between create and start is not followed (control: the
// raw daemon follows it); gc removes a sidecar whose session container is
// gone. The canary counts nothing from inside, after a control that it
// counts. A network's probes all run in one inner container (probeScript),
// each with its own exit status and output checked.
func TestDockerSessionEgressMatrix(t *testing.T) { testDockerSessionEgressMatrix(t, newDindEnv(t)) }

// The same matrix against a session claimed from the warm pool: a pooled
// pair must be exactly as fenced as a cold one.
func TestClaimedDockerSessionEgressMatrix(t *testing.T) {
	testDockerSessionEgressMatrix(t, newDindEnvPool(t))
}

func testDockerSessionEgressMatrix(t *testing.T, e *dindEnv) {
	id := e.session(e.cfg, "matrix")
	e.canaryControl()
	run := "docker run --rm "
	nets := map[string]string{"DefaultBridge": run, "UserNetwork": run + "--network vaktest-matrix-net "}
	if out, err := e.exec(id, "docker network create vaktest-matrix-net"); err != nil {
		t.Fatalf("docker network create: %v\n%s", err, out)
	}
	for _, name := range []string{"DefaultBridge", "UserNetwork"} {
		t.Run(name, func(t *testing.T) {
			// innerProbes, and the canary's address over TLS (the
			// connection ends at the gateway, which has no rule for it)
			// and DNS to an address where no resolver listens (answered
			// by the gateway).
			probes := append(innerProbes(e.canIP, e.upIP),
				probeCase{"probe tls https://" + e.canIP + "/", true, "OK 403", false},
				probeCase{"probe dns --type A allowed.test 192.0.2.53:53", true, "A " + e.upIP, false})
			// All of a network's probes in one inner container (one
			// container start instead of one per probe).
			script := probeScript(probes)
			out, err := e.exec(id, nets[name]+e.base+" sh -c "+shellquote.Quote(script))
			checkProbes(t, name, probes, out, err)
			if c := testenv.CanaryCounts(t, e.canIP); c.Total != 0 {
				t.Errorf("the canary saw inner traffic: %+v", c)
			}
		})
	}
	t.Run("RawHostNetworkIsFenced", func(t *testing.T) {
		// Past the guard, --net host puts an inner container in the
		// netclient's namespace: fenced like the agent (TCP to the
		// gateway, DNS answered by it, nothing else out).
		probes := []probeCase{
			{"probe http http://" + e.canIP + "/", true, "OK 403", false},
			{"probe http http://denied.test/", true, "OK 403", false},
			{"probe udp " + e.canIP + ":9 2s", false, "FAIL", false},
			{"probe quic " + e.canIP + ":443 2s", false, "FAIL", false},
			{"probe ping " + e.canIP + " 2s", false, "FAIL", false},
			{"probe connect [fd00::1]:80 2s", false, "FAIL", false},
			{"probe dns --type A allowed.test " + e.canIP + ":53", true, "A " + e.upIP, false},
		}
		out, err := e.raw(id, "run", "--rm", "--net", "host", e.base, "sh", "-c", probeScript(probes))
		checkProbes(t, "raw --net host", probes, out, err)
		if c := testenv.CanaryCounts(t, e.canIP); c.Total != 0 {
			t.Errorf("the canary saw traffic from a --net host inner container: %+v", c)
		}
	})
	t.Run("PlaceholdersWithheldByDefault", func(t *testing.T) {
		out, err := e.exec(id, run+e.base+` sh -c 'echo "TOKEN=${TOKEN:-unset}"'`)
		if err != nil || !strings.Contains(out, "TOKEN=unset") {
			t.Errorf("an inner container got a placeholder by default: %v\n%s", err, out)
		}
		if out, err := e.exec(id, `test -n "$TOKEN" && echo set`); err != nil || out != "set" {
			t.Fatalf("control: the session has no TOKEN placeholder: %v %s", err, out)
		}
	})
	t.Run("PlaceholderSwappedOnlyTowardItsHost", func(t *testing.T) {
		// The agent passes its placeholder explicitly (-e TOKEN).
		testenv.ResetUpstream(t, e.upIP)
		out, err := e.exec(id, run+"-e TOKEN "+e.base+` sh -c 'probe http -H "Authorization: Bearer $TOKEN" https://allowed.test/sink >/dev/null && echo sent'`)
		if err != nil || !strings.Contains(out, "sent") {
			t.Fatalf("inner request with the placeholder: %v\n%s", err, out)
		}
		reqs := testenv.UpstreamRequests(t, e.upIP)
		if reqs.Count != 1 || strings.Join(reqs.Requests[0].Headers["Authorization"], "") != "Bearer "+e.secret {
			t.Fatalf("the bound upstream did not receive the real value once: count %d", reqs.Count)
		}
		testenv.ResetUpstream(t, e.upIP)
		out, _ = e.exec(id, run+"-e TOKEN "+e.base+` sh -c 'probe http -H "Authorization: Bearer $TOKEN" https://other.test/sink'`)
		if !strings.Contains(out, "403") || strings.Contains(out, e.secret) {
			t.Errorf("the placeholder toward a host it is not bound to: %s", out)
		}
		if reqs := testenv.UpstreamRequests(t, e.upIP); reqs.Count != 0 {
			t.Errorf("the request with the placeholder toward other.test reached the upstream: %+v", reqs)
		}
		// Control: other.test itself is allowed (without the placeholder).
		if out, err := e.exec(id, run+e.base+" probe tls https://other.test/status/200"); err != nil || !strings.HasPrefix(out, "OK 200") {
			t.Errorf("control: other.test without the placeholder: %v %s", err, out)
		}
	})
	t.Run("GuardRefusesHostAccess", func(t *testing.T) {
		for _, c := range []string{
			"-v /:/h", "-v /var/run/docker.sock:/var/run/docker.sock", "-v /run/docker.sock:/s",
			"-v /proc/1/root:/r", "-v /sys/fs/cgroup:/c", "-v " + dockerd.RawSocketDir + ":/x",
			"--mount type=bind,source=/etc,target=/e",
			"--net host --cap-add NET_ADMIN", "--cgroupns host --cap-add SYS_ADMIN", "--pid host",
		} {
			out, err := e.exec(id, run+c+" "+e.base+" true")
			if err == nil || !strings.Contains(out, "vak dockerguard: denied") {
				t.Errorf("docker run %s: %v\n%s", c, err, out)
			}
		}
		// Control: a workspace bind is allowed.
		if out, err := e.exec(id, run+"-v "+e.ws+":/w "+e.base+" ls /w/inner.tar"); err != nil {
			t.Errorf("control: a workspace bind: %v %s", err, out)
		}
	})
	t.Run("RawDaemonSeesTheSidecarNotTheHost", func(t *testing.T) {
		// A file on the real host (outside every container).
		var rnd [6]byte
		rand.Read(rnd[:])
		hostFile := "/var/tmp/vaktest-hostfile-" + hex.EncodeToString(rnd[:])
		if err := os.WriteFile(hostFile, []byte("host-only\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(hostFile) })
		out, _ := e.raw(id, "run", "--rm", "-v", "/:/h", e.base, "sh", "-c", "cat /h"+hostFile+"; ls /h"+dockerd.RawSocketDir)
		if strings.Contains(out, "host-only") {
			t.Errorf("an inner container of the raw daemon read a host file through -v /:/h\n%s", out)
		}
		if !strings.Contains(out, "docker.sock") {
			t.Errorf("control: -v /:/h is not the sidecar's root (no raw socket there)\n%s", out)
		}
		out, _ = e.raw(id, "run", "--rm", "--pid", "host", e.base, "sh", "-c", "cat /proc/1/root"+hostFile+"; cat /proc/1/cmdline | tr '\\0' ' '")
		if strings.Contains(out, "host-only") {
			t.Errorf("--pid host reached the host's PID 1\n%s", out)
		}
		if !strings.Contains(out, "/bin/sh") && !strings.Contains(out, "dockerd") {
			t.Errorf("control: --pid host does not show the sidecar's PID 1\n%s", out)
		}
		// The host's Docker socket is not in the sidecar.
		out, _ = e.raw(id, "run", "--rm", "-v", "/var/run/docker.sock:/s", e.base, "sh", "-c", "if test -S /s; then echo SOCKET; else echo NOSOCKET; fi")
		if !strings.Contains(out, "NOSOCKET") {
			t.Errorf("the host's Docker socket is reachable from an inner container\n%s", out)
		}
		// cgroups: the sidecar's fresh cgroup2 hierarchy, not the host's.
		hostCg, _ := os.ReadDir("/sys/fs/cgroup")
		var hostNames []string
		for _, d := range hostCg {
			hostNames = append(hostNames, d.Name())
		}
		out, _ = e.raw(id, "run", "--rm", "-v", "/sys/fs/cgroup:/c", e.base, "ls", "/c")
		if strings.Join(strings.Fields(out), " ") == strings.Join(hostNames, " ") || !strings.Contains(out, "cgroup.controllers") {
			t.Errorf("-v /sys/fs/cgroup shows the host's hierarchy (%v)\n%s", hostNames, out)
		}
	})
	t.Run("RawDaemonReleaseAgent", func(t *testing.T) {
		out, err := e.raw(id, "run", "--rm", "--cgroupns", "host", "--cap-add", "SYS_ADMIN", "--security-opt", "apparmor=unconfined", e.base, "sh", "-c",
			"mkdir -p /m /t && mount -t tmpfs none /t && echo tmpfs-ok; mount -t cgroup -o none,name=vaktest cgroup /m && ls /m; for d in /sys/fs/cgroup/*; do test -e $d/release_agent && echo FOUND $d; done; true")
		if err != nil || !strings.Contains(out, "tmpfs-ok") {
			t.Fatalf("control: the probe has no SYS_ADMIN: %v\n%s", err, out)
		}
		if strings.Contains(out, "release_agent") || strings.Contains(out, "FOUND") {
			t.Errorf("an inner container of the raw daemon reached a cgroup-v1 release_agent\n%s", out)
		}
	})
	t.Run("SymlinkSwapAfterCheck", func(t *testing.T) {
		if out, err := e.exec(id, "mkdir -p race && echo inside > race/marker"); err != nil {
			t.Fatal(out)
		}
		show := "cat /x/marker 2>&1; ls /x" + dockerd.RawSocketDir + " 2>&1; true"
		swap := "mv race race.old && ln -s / race"
		unswap := "rm race && mv race.old race"
		// Through the guard: created while race is a directory, started
		// after it became a symlink to /.
		if out, err := e.exec(id, "docker create --name vaktest-race -v "+e.ws+"/race:/x "+e.base+" sh -c '"+show+"'"); err != nil {
			t.Fatalf("docker create: %v\n%s", err, out)
		}
		if out, err := e.exec(id, swap); err != nil {
			t.Fatal(out)
		}
		// Another create meanwhile sweeps the stage: the created (not yet
		// started) container's staged source is kept.
		if out, err := e.exec(id, "mkdir -p other && "+run+"-v "+e.ws+"/other:/y "+e.base+" true"); err != nil {
			t.Fatalf("a create between: %v\n%s", err, out)
		}
		out, err := e.exec(id, "docker start -a vaktest-race; docker rm vaktest-race >/dev/null")
		if err != nil || !strings.Contains(out, "inside") || strings.Contains(out, "docker.sock") {
			t.Errorf("the guard's container followed the swapped symlink: %v\n%s", err, out)
		}
		// Staged sources of removed containers do not pile up: after three
		// --rm runs with a bind, only the last one's is left (each create
		// sweeps what no container uses).
		if out, err := e.exec(id, "for i in 1 2 3; do "+run+"-v "+e.ws+"/other:/y "+e.base+" true || exit 1; done"); err != nil {
			t.Fatalf("--rm runs with a bind: %v\n%s", err, out)
		}
		if ls, err := dockerOut("exec", e.sidecar(id), "ls", taskenv.StageDir); err != nil || len(strings.Fields(ls)) != 1 {
			t.Errorf("staged sources after three --rm runs: %v %q (want the last run's only)", err, ls)
		}
		// Control: the raw daemon, same sequence, follows it into the
		// sidecar's root (the raw socket).
		e.exec(id, unswap)
		if out, err := e.raw(id, "create", "--name", "vaktest-race-raw", "-v", e.ws+"/race:/x", e.base, "sh", "-c", show); err != nil {
			t.Fatalf("raw create: %v\n%s", err, out)
		}
		e.exec(id, swap)
		out, _ = e.raw(id, "start", "-a", "vaktest-race-raw")
		e.raw(id, "rm", "-f", "vaktest-race-raw")
		if !strings.Contains(out, "docker.sock") {
			t.Errorf("control: the raw daemon did not follow the swapped symlink (the test shows nothing)\n%s", out)
		}
		e.exec(id, unswap)
		// A symlink leading out is refused at create.
		e.exec(id, "ln -sfn / escape")
		if out, err := e.exec(id, run+"-v "+e.ws+"/escape:/x "+e.base+" true"); err == nil || !strings.Contains(out, "symlink") {
			t.Errorf("a bind through a symlink to /: %v\n%s", err, out)
		}
	})
	if c := testenv.CanaryCounts(t, e.canIP); c.Total != 0 {
		t.Errorf("the canary saw traffic from the session: %+v", c)
	}
	t.Run("GCTakesAnOrphanSidecar", func(t *testing.T) {
		// The session container goes (by hand), its sidecar stays: gc
		// removes the sidecar and its volumes. The session's workspace
		// watcher may have stopped the sidecar by then (it stops what can
		// write the workspace when the session container dies), but only
		// gc removes it.
		slot := e.slot(id)
		sidecar := taskenv.SidecarPrefix + slot
		testenv.Docker(t, "rm", "-f", taskenv.SessionPrefix+id)
		if out := testenv.Docker(t, "ps", "-aq", "--filter", "name=^"+sidecar+"$"); strings.TrimSpace(out) == "" {
			t.Fatal("control: the sidecar is gone before gc")
		}
		if _, errs, err := e.vakCmd(e.cfg, append([]string{"session", "gc"}, e.labels...)...); err != nil {
			t.Fatalf("session gc: %v %s", err, errs)
		}
		for _, kind := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}} {
			if out := testenv.Docker(t, append(kind, "--filter", "label=vak.session="+slot)...); strings.TrimSpace(out) != "" {
				t.Errorf("session gc left docker %v of the orphaned sidecar: %s", kind, out)
			}
		}
	})
}

// Placeholder propagation opt-in and failing closed when the fence goes:
// with session.docker_placeholders = ["TOKEN"] in the trusted config an
// inner container gets the session's TOKEN placeholder (and the gateway
// swaps it toward its bound host); an inner --net host --cap-add NET_ADMIN
// container is refused by the guard; through the raw socket one deletes
// the nested forward chain (netclient --check names it), then another
// flushes every rule: nothing reaches the canary or the upstream's address
// directly before or after the netclient notices and stops, and `vak
// session exec` then refuses (exit 69) naming the fence.
func TestDockerSessionPlaceholdersAndFailClosed(t *testing.T) {
	testDockerSessionPlaceholdersAndFailClosed(t, newDindEnv(t))
}

// The same against a session claimed from the warm pool (filled with the
// propagating config).
func TestClaimedDockerSessionPlaceholdersAndFailClosed(t *testing.T) {
	testDockerSessionPlaceholdersAndFailClosed(t, newDindEnvPool(t))
}

func testDockerSessionPlaceholdersAndFailClosed(t *testing.T, e *dindEnv) {
	id := e.session(e.cfgProp, "failclosed")
	e.canaryControl()
	run := "docker run --rm "
	t.Run("PlaceholderPropagated", func(t *testing.T) {
		ph, err := e.exec(id, `echo "$TOKEN"`)
		if err != nil || ph == "" || strings.Contains(ph, e.secret) {
			t.Fatalf("the session's placeholder: %v %q", err, ph)
		}
		out, err := e.exec(id, run+e.base+` sh -c 'echo "TOKEN=$TOKEN"'`)
		if err != nil || !strings.Contains(out, "TOKEN="+ph) {
			t.Errorf("an inner container did not get the propagated placeholder: %v\n%s", err, out)
		}
		testenv.ResetUpstream(t, e.upIP)
		out, err = e.exec(id, run+e.base+` sh -c 'probe http -H "Authorization: Bearer $TOKEN" https://allowed.test/sink >/dev/null && echo sent'`)
		if err != nil || !strings.Contains(out, "sent") {
			t.Fatalf("inner request with the propagated placeholder: %v\n%s", err, out)
		}
		if reqs := testenv.UpstreamRequests(t, e.upIP); reqs.Count != 1 || strings.Join(reqs.Requests[0].Headers["Authorization"], "") != "Bearer "+e.secret {
			t.Errorf("the bound upstream did not receive the real value (count %d)", reqs.Count)
		}
	})
	t.Run("GuardRefusesNetAdminOnHostNetwork", func(t *testing.T) {
		out, err := e.exec(id, run+"--net host --cap-add NET_ADMIN "+e.base+" true")
		if err == nil || !strings.Contains(out, "denied") || !strings.Contains(out, "NetworkMode") && !strings.Contains(out, "CapAdd") {
			t.Fatalf("--net host --cap-add NET_ADMIN through the guard: %v\n%s", err, out)
		}
	})
	nc := "vak-nc-" + e.key
	sidecar := e.sidecar(id)
	// The netclient's own --check with its own fence flags.
	fenceFlags := func() []string {
		check := strings.Split(strings.TrimSpace(testenv.Docker(t, "inspect", "-f", "{{range .Config.Cmd}}{{.}}\n{{end}}", nc)), "\n")
		var fence []string
		for i, a := range check {
			if (a == "--gateway" || a == "--nested-pool") && i+1 < len(check) {
				fence = append(fence, a, check[i+1])
			}
		}
		return fence
	}
	fence := fenceFlags()
	if len(fence) != 4 {
		t.Fatalf("cannot read the netclient's fence flags: %q", fence)
	}
	// netclient --check run in the namespace (from the sidecar, which
	// shares it and has the vak binary: the netclient may be paused). Its
	// rule verification comes first; the ready file it looks for next is
	// the netclient's own, absent in the sidecar, so "netclient not ready"
	// means the rules verified.
	fenceCheck := func() (string, error) {
		out, err := dockerOut(append([]string{"exec", sidecar, "/opt/vak/vak", "netclient", "--check"}, fence...)...)
		if err != nil && strings.TrimSpace(out) == "vak: netclient not ready" {
			return out, nil
		}
		return out, err
	}
	if out, err := fenceCheck(); err != nil {
		t.Fatalf("control: netclient --check fails before anything changed: %v\n%s", err, out)
	}
	// The sidecar is in a cgroup namespace of its own (a property the
	// release_agent probe of the egress matrix relies on).
	t.Run("PrivateCgroupNamespace", func(t *testing.T) {
		in, err := dockerOut("exec", sidecar, "readlink", "/proc/1/ns/cgroup")
		host, herr := os.Readlink("/proc/self/ns/cgroup")
		if err != nil || herr != nil || !strings.HasPrefix(in, "cgroup:[") {
			t.Fatalf("cgroup namespaces: sidecar %q %v, host %q %v", in, err, host, herr)
		}
		if strings.TrimSpace(in) == host {
			t.Errorf("the sidecar %s shares the host's cgroup namespace %s", sidecar, host)
		}
		if mode := strings.TrimSpace(testenv.Docker(t, "inspect", "-f", "{{.HostConfig.CgroupnsMode}}", sidecar)); mode != "private" {
			t.Errorf("the sidecar's cgroupns mode is %q", mode)
		}
	})
	// An inner container in the namespace with NET_ADMIN, past the guard,
	// running the sidecar's nft (the sidecar's root bound and chrooted).
	nft := func(script string) (string, error) {
		return e.raw(id, "run", "--rm", "--net", "host", "--cap-add", "NET_ADMIN", "-v", "/:/sc", e.base, "chroot", "/sc", "/usr/sbin/nft", script)
	}
	// What must not get through, whatever state the fence is in: UDP,
	// QUIC and ICMP to the canary from a bridged and a --net host inner
	// container fail, and nothing at all (TCP included) reaches the canary.
	probes := func(when string) {
		t.Helper()
		for _, netMode := range []string{"bridge", "host"} {
			// TCP may end at the gateway's forwarder while the NAT
			// chain is there (logged only); the canary must count
			// nothing.
			pc := []probeCase{
				{"probe udp " + e.canIP + ":9 2s", false, "", false},
				{"probe quic " + e.canIP + ":443 2s", false, "", false},
				{"probe ping " + e.canIP + " 2s", false, "", false},
				{"probe http http://" + e.canIP + "/ 2s", false, "", true},
				{"probe connect " + e.canIP + ":22 2s", false, "", true},
			}
			out, err := e.raw(id, "run", "--rm", "--net", netMode, e.base, "sh", "-c", probeScript(pc))
			checkProbes(t, when+", a --net "+netMode+" inner container", pc, out, err)
		}
		if c := testenv.CanaryCounts(t, e.canIP); c.Total != 0 {
			t.Errorf("%s: the canary saw traffic: %+v", when, c)
		}
	}
	// The netclient re-verifies every 2 s and stops on a change; paused,
	// it cannot, so the probes below see the window between a change and
	// its noticing (with the uplink still there), deterministically.
	// The freezer can fail transiently ("unable to freeze") on a busy
	// host: retry until it takes.
	for i := 0; ; i++ {
		out, err := dockerOut("pause", nc)
		if err == nil {
			break
		}
		if i == 20 {
			t.Fatalf("docker pause %s: %v %s", nc, err, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Cleanup(func() { dockerOut("unpause", nc) })
	t.Run("NestedRulesMissing", func(t *testing.T) {
		if out, err := nft("flush chain inet vak_filter forward; delete chain inet vak_filter forward"); err != nil {
			t.Fatalf("delete the nested forward chain through the raw daemon: %v\n%s", err, out)
		}
		if out, err := fenceCheck(); err == nil || !strings.Contains(out, "forward") {
			t.Errorf("netclient --check did not notice the missing forward chain: %v\n%s", err, out)
		}
		if out, errs, err := e.vakCmd(e.cfgProp, "session", "exec", id, "--", "true"); err == nil || !strings.Contains(errs, "paused") {
			t.Errorf("exec with the netclient paused: %v %s%s", err, out, errs)
		}
		probes("nested forward chain deleted, netclient not yet noticing")
	})
	t.Run("RulesFlushed", func(t *testing.T) {
		if out, err := nft("flush ruleset"); err != nil {
			t.Fatalf("flush ruleset through the raw daemon: %v\n%s", err, out)
		}
		if out, err := e.raw(id, "run", "--rm", "--net", "host", "--cap-add", "NET_ADMIN", "-v", "/:/sc", e.base, "chroot", "/sc", "/usr/sbin/nft", "list", "ruleset"); err != nil || strings.Contains(out, "vak_") {
			t.Fatalf("control: the ruleset is not empty after the flush: %v\n%s", err, out)
		}
		probes("ruleset flushed, netclient not yet noticing")
	})
	testenv.Docker(t, "unpause", nc)
	t.Run("ExecRefusedOnceTheFenceIsGone", func(t *testing.T) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			st, _ := dockerOut("inspect", "-f", "{{.State.Running}}", nc)
			if strings.TrimSpace(st) == "false" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the netclient still runs with its rules gone")
			}
			time.Sleep(200 * time.Millisecond)
		}
		probes("netclient stopped")
		if st, _ := dockerOut("inspect", "-f", "{{.State.ExitCode}}", nc); strings.TrimSpace(st) == "0" {
			t.Errorf("the netclient exited 0 after its rules changed")
		}
		out, errs, err := e.vakCmd(e.cfgProp, "session", "exec", id, "--", "true")
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 69 || !strings.Contains(errs, "fence") || !strings.Contains(errs, nc) || !strings.Contains(errs, "not running") {
			t.Errorf("exec after the fence is gone: exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("NewSessionRefusedUntilTheOldOneGoes", func(t *testing.T) {
		// A new --docker session of the workspace is refused while the
		// dead fence is still used (exit 69 naming the netclient and the
		// session using it); the netclient started again by hand does not
		// revive the old session; once the old session is removed, a new
		// one gets a fence whose nested --check passes, and works.
		create := func() (string, string, error) {
			return e.vakCmd(e.cfgProp, append(append([]string{"session", "create"}, e.labels...), "-w", e.ws, "--task", "after", "--network", "proxied", "--docker", "--no-refill")...)
		}
		_, errs, err := create()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 69 || !strings.Contains(errs, "netclient is not running") || !strings.Contains(errs, taskenv.SessionPrefix+id) {
			t.Fatalf("a new --docker session while the dead fence is in use: exit %d\n%s", code, errs)
		}
		// The netclient started again by hand has a new namespace: the old
		// session's engine is not in it, and its exec stays refused.
		testenv.Docker(t, "start", nc)
		if _, errs, err := e.vakCmd(e.cfgProp, "session", "exec", id, "--", "true"); err == nil || !strings.Contains(errs, "started again") {
			t.Errorf("exec after the netclient was started again: %v %s", err, errs)
		}
		if _, errs, err := e.vakCmd(e.cfgProp, append(append([]string{"session", "rm"}, e.labels...), id)...); err != nil {
			t.Fatalf("session rm of the old session: %v %s", err, errs)
		}
		out, errs, err := create()
		if err != nil {
			t.Fatalf("a new --docker session after the old one went: %v\n%s", err, errs)
		}
		id2 := strings.TrimSpace(out)
		t.Cleanup(func() {
			e.vakCmd(e.cfgProp, append(append([]string{"session", "rm"}, e.labels...), id2)...)
			dockerOut("rm", "-f", taskenv.SidecarPrefix+id2, taskenv.SessionPrefix+id2)
			dockerOut("volume", "rm", "-f", taskenv.SidecarPrefix+id2+"-lib", taskenv.SidecarPrefix+id2+"-sock")
		})
		dockerOut("network", "connect", e.inet, "vak-gw-"+e.key)
		if f := fenceFlags(); len(f) != 4 {
			t.Errorf("the new netclient is not in nested mode: %q", f)
		} else if out, err := dockerOut(append([]string{"exec", nc, "/vak", "netclient", "--check"}, f...)...); err != nil {
			t.Errorf("the new netclient does not pass its nested --check: %v\n%s", err, out)
		}
		if out, err := e.exec(id2, "docker load -i inner.tar >/dev/null && docker run --rm "+e.base+" probe tls https://allowed.test/status/200"); err != nil || !strings.HasPrefix(out, "OK 200") {
			t.Errorf("the new session's inner egress: %v\n%s", err, out)
		}
		if c := testenv.CanaryCounts(t, e.canIP); c.Total != 0 {
			t.Errorf("the canary saw traffic: %+v", c)
		}
	})
}

// The matrices' probe records, parsed from a real sh running probeScript:
// each probe's status and output, and a missing or cut-off record noticed.
func TestProbeScriptRecords(t *testing.T) {
	probes := []probeCase{
		{"echo OK 200", true, "OK 200", false},
		{"false", false, "", false},
		{"ls /nonexistent-vaktest-probe", false, "nonexistent-vaktest-probe", false},
		{"echo it's [fd00::1]:80", true, "it's [fd00::1]:80", false},
	}
	out, err := exec.Command("sh", "-c", probeScript(probes)).CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, out)
	}
	for i, want := range []struct {
		rc     int
		output string
	}{{0, "OK 200"}, {1, ""}, {2, "nonexistent-vaktest-probe"}, {0, "it's [fd00::1]:80"}} {
		got, rc, ok := testenv.ProbeRecord(string(out), i)
		if !ok || rc != want.rc || !strings.Contains(got, want.output) {
			t.Errorf("probe %d: got %q rc %d ok %v, want rc %d and %q", i, got, rc, ok, want.rc, want.output)
		}
	}
	// A record cut off after its begin line, and one that never began.
	cut := string(out)[:strings.Index(string(out), testenv.ProbeMark+"3 begin")+len(testenv.ProbeMark+"3 begin\n")+3]
	if _, _, ok := testenv.ProbeRecord(cut, 3); ok {
		t.Errorf("a record without its end line was taken as complete:\n%s", cut)
	}
	if _, _, ok := testenv.ProbeRecord(string(out), len(probes)); ok {
		t.Errorf("a probe that never ran has a record")
	}
	if problems, _ := probeProblems(probes, string(out)); len(problems) != 0 {
		t.Errorf("problems in a run where every probe did as expected: %q", problems)
	}
	if problems, _ := probeProblems(probes, cut); len(problems) != 2 {
		t.Errorf("the cut-off output: want two problems (not all ran, probe 3 incomplete), got %q", problems)
	}
	// Expectations turned around: every probe is a problem, except a
	// logged one.
	flipped := slices.Clone(probes)
	for i := range flipped {
		flipped[i].ok = !flipped[i].ok
	}
	flipped[1].logged = true
	if problems, logs := probeProblems(flipped, string(out)); len(problems) != len(probes)-1 || len(logs) != 1 {
		t.Errorf("the flipped expectations: want %d problems and one log, got %q and %q", len(probes)-1, problems, logs)
	}
	// The probes run at once: the first waits (at most 30 s) for a file
	// the second creates, which it only sees if the second runs meanwhile.
	dir := t.TempDir()
	waiter, marker := filepath.Join(dir, "wait-for"), filepath.Join(dir, "marker")
	if err := os.WriteFile(waiter, []byte("#!/bin/sh\nfor i in $(seq 3000); do [ -e \"$1\" ] && { echo seen; exit 0; }; sleep 0.01; done\necho never; exit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	both := []probeCase{{waiter + " " + marker, true, "seen", false}, {"touch " + marker, true, "", false}}
	out, err = exec.Command("sh", "-c", probeScript(both)).CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, out)
	}
	if problems, _ := probeProblems(both, string(out)); len(problems) != 0 {
		t.Errorf("the probes did not run at once: %q", problems)
	}
}
