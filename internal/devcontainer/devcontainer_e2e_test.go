package devcontainer_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"vak/internal/catrust"
	"vak/internal/devcontainer"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/testenv"
)

// devcontainerCLI finds the dev-containers CLI (@devcontainers/cli):
// $VAK_DEVCONTAINER_CLI, else `devcontainer` on PATH.
func devcontainerCLI(t *testing.T) string {
	t.Helper()
	p := os.Getenv("VAK_DEVCONTAINER_CLI")
	if p == "" {
		p, _ = exec.LookPath("devcontainer")
	}
	if p == "" {
		testenv.Missing(t, testenv.EnvRequireDocker, "the dev-containers CLI (npm install @devcontainers/cli; set VAK_DEVCONTAINER_CLI)")
	}
	return p
}

// The generated template brought up by the real dev-containers CLI (the
// code path of VS Code's "Reopen in Container") with Debian's
// docker-compose 1.29, then used through `devcontainer exec` as an agent
// would: the same hermetic internet, canary and escape attempts as the
// proxied topology's own test.
func TestDevcontainerUp(t *testing.T) {
	testenv.RequireDocker(t)
	devcontainerUp(t, composeV1(t), true)
}

// The same template and files with Compose v2 (`docker compose`, the
// dev-containers CLI's and VS Code's first choice): up, the agent's egress
// and escape attempts, the read-only template dirs, Rebuild, a
// netclient-only recreate; then the project brought up by compose alone,
// without the dev-containers CLI (as a tool that does not override the
// command, JetBrains' dev containers, runs it): the agent's container stays
// up on its own command and its egress works.
func TestDevcontainerUpComposeV2(t *testing.T) {
	testenv.RequireDocker(t)
	devcontainerUp(t, composeV2(t), false)
}

// devcontainerUp runs the plain template's end-to-end test with compose f;
// full adds what does not depend on the compose (the scan and
// read-configuration, tampering with the fence, a config change).
func devcontainerUp(t *testing.T, f composeFlavor, full bool) {
	dc := devcontainerCLI(t)
	img := testenv.TestNetImage(t)
	vak := testenv.Vak(t)
	id := testenv.TestID(t)
	in := testenv.StartInternet(t, img, "allowed.test", "unbound.test")
	certs, inet, upIP, canIP := in.Certs, in.Network, in.UpstreamIP, in.CanaryIP
	// Registered after the network's own cleanup, so it runs first.
	wsName := testenv.UniqueName("ws")
	t.Cleanup(func() { removeLabelled(id, wsName) })

	var rnd [6]byte
	rand.Read(rnd[:])
	secret := "real-secret-" + hex.EncodeToString(rnd[:])
	base, _ := filepath.EvalSymlinks(t.TempDir())
	xdgState, xdgConfig := filepath.Join(base, "state"), filepath.Join(base, "config")
	os.MkdirAll(filepath.Join(xdgConfig, "vak"), 0o700)
	os.WriteFile(filepath.Join(xdgConfig, "vak", "config.toml"), []byte(fmt.Sprintf(`version = 1
[network]
policy = "proxied"
[[network.rules]]
name = "test upstreams"
action = "allow"
hosts = ["allowed.test", "unbound.test"]
cidrs = ["%s/32"]
[network.dns.overrides]
"allowed.test" = [%q]
"unbound.test" = [%q]
"canary.test" = [%q]
[gateway]
extra_ca_bundles = [%q]
[secrets.TOKEN]
value = %q
hosts = ["allowed.test"]
`, upIP, upIP, upIP, canIP, certs.CA, secret)), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, wsName)))
	if err != nil {
		t.Fatal(err)
	}
	// An existing protected path of the config: mounted read-only too.
	mkdir(t, filepath.Join(ws, ".git", "hooks"))
	env := append(append(os.Environ(), "XDG_STATE_HOME="+xdgState, "XDG_CONFIG_HOME="+xdgConfig), f.env...)
	run := func(name string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		cmd.Dir = ws
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustRun := func(name string, args ...string) string {
		t.Helper()
		out, err := run(name, args...)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return out
	}
	mustRun(vak, "devcontainer", "init", "-w", ws, "--image", img, "--gateway-network", inet,
		"--label", testenv.TestLabel+"=1", "--label", testenv.TestIDLabel+"="+id)
	if out, _ := run(vak, "devcontainer", "init", "-w", ws); !strings.Contains(out, "already has") {
		t.Errorf("a second init overwrote the template: %s", out)
	}

	if full {
		t.Run("GeneratedFilesHoldNoSecret", func(t *testing.T) {
			for _, dir := range []string{devcontainer.Dir, devcontainer.VSCodeDir} {
				filepath.Walk(filepath.Join(ws, dir), func(p string, fi os.FileInfo, err error) error {
					if err == nil && !fi.IsDir() {
						if data, _ := os.ReadFile(p); strings.Contains(string(data), secret) || strings.Contains(string(data), "PRIVATE KEY") {
							t.Errorf("%s holds a secret", p)
						}
					}
					return nil
				})
			}
			out := mustRun(dc, "read-configuration", "--workspace-folder", ws)
			if !strings.Contains(out, `"service":"app"`) || !strings.Contains(out, `"devcontainer","prepare"`) {
				t.Errorf("read-configuration: %s", out)
			}
		})
	}

	t0 := time.Now()
	f.checkCLICompose(t, mustRun(dc, "up", "--workspace-folder", ws))
	sb := func(cmd string) string {
		t.Helper()
		out, _ := run(dc, "exec", "--workspace-folder", ws, "sh", "-c", cmd)
		return strings.TrimSpace(out)
	}
	if out := sb("probe tls https://allowed.test/status/200"); !strings.HasPrefix(lastLine(out), "OK 200") {
		t.Fatalf("allowed HTTPS after devcontainer up: %s", out)
	}
	t.Logf("benchmark: devcontainer up (compose %s) to a working exec: %v", f.name, time.Since(t0).Round(100*time.Millisecond))
	if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err != nil || !strings.Contains(out, "fence self-test passed") {
		t.Errorf("doctor after up: %v\n%s", err, out)
	}
	// overrideCommand false: the agent's container runs the template's own
	// command (the CLI's entrypoint wrapper execs it instead of its
	// keep-alive loop).
	key := proxynet.Key(ws)
	app := testenv.Docker(t, "ps", "-q", "--filter", "label="+devcontainer.LabelKey+"="+key, "--filter", "label=com.docker.compose.service=app")
	if cmd := testenv.Docker(t, "inspect", "--format", "{{json .Config.Cmd}}", app); cmd != `["sleep","infinity"]` {
		t.Errorf("the agent's container runs %s (want the template's sleep infinity)", cmd)
	}
	project := testenv.Docker(t, "inspect", "--format", `{{index .Config.Labels "com.docker.compose.project"}}`, app)
	composeFile := filepath.Join(ws, devcontainer.Dir, devcontainer.ComposeFile)

	canaryZero := func(when string) {
		t.Helper()
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 || c.DNS != 0 {
			t.Errorf("%s: the canary saw traffic: %+v", when, c)
		}
	}
	// Control: the canary counts a connection from a plain container.
	if out, _ := exec.Command("docker", append(append([]string{"run", "--rm"}, testenv.LabelArgs(t)...), "--network", inet, img, "probe", "connect", canIP+":80", "3s")...).CombinedOutput(); !strings.Contains(string(out), "OK") {
		t.Fatalf("control: canary unreachable: %s", out)
	}
	if c := testenv.ResetCanary(t, canIP); c.TCP == 0 {
		t.Fatalf("control: the canary did not count a connection: %+v", c)
	}

	t.Run("AllowedHTTPSWithTheCATrusted", func(t *testing.T) {
		out := lastLine(sb("probe tls https://allowed.test/status/200"))
		if !strings.HasPrefix(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
			t.Fatalf("allowed HTTPS with verification on: %s", out)
		}
		if got := lastLine(sb("echo $SSL_CERT_FILE")); got != catrust.Dir+"/"+catrust.BundleFile {
			t.Errorf("SSL_CERT_FILE = %q", got)
		}
	})
	t.Run("DeniedHostBlocked", func(t *testing.T) {
		attempts := []string{"probe http https://denied.test/ 5s", "probe http http://canary.test/ 5s", "probe http https://example.com/ 5s"}
		for i, out := range testenv.ProbeOutputs(t, sb(testenv.ProbeScript(attempts)), attempts) {
			if out := lastLine(out); strings.HasPrefix(out, "OK 200") {
				t.Errorf("%s: %s", attempts[i], out)
			}
		}
		canaryZero("denied names")
	})
	t.Run("RawTCPUDPDNSBlocked", func(t *testing.T) {
		testenv.ResetCanary(t, canIP)
		attempts := []string{
			"probe http http://" + canIP + "/ 3s",
			"probe connect " + canIP + ":22 3s",
			"probe udp " + canIP + ":9 2s",
			"probe dns leak-" + hex.EncodeToString(rnd[:3]) + ".exfil.test " + canIP,
			"probe dns --tcp leak2.exfil.test " + canIP,
			"probe ping " + canIP + " 2s",
			"probe http http://169.254.169.254/latest/meta-data/ 3s",
		}
		// All at once (most wait out their timeout).
		for i, out := range testenv.ProbeOutputs(t, sb(testenv.ProbeScript(attempts)), attempts) {
			// The gateway may accept and refuse (OK connected, OK 403)
			// or answer DNS with its sinkhole; nothing may reach the canary.
			if out := lastLine(out); testenv.ProbeEscaped(out) {
				t.Errorf("%s: %s", attempts[i], out)
			}
		}
		canaryZero("escape attempts")
	})
	t.Run("PlaceholderSwappedOnlyTowardItsHost", func(t *testing.T) {
		ph := lastLine(sb("echo $TOKEN"))
		if !strings.HasPrefix(ph, "vakph_") || strings.Contains(sb("env"), secret) {
			t.Fatalf("the container sees %q (the real value must never be inside)", ph)
		}
		testenv.ResetUpstream(t, upIP)
		if out := lastLine(sb(`probe http -H "Authorization: Bearer $TOKEN" https://allowed.test/sink 5s`)); !strings.HasPrefix(out, "OK 200") {
			t.Fatalf("bound host: %s", out)
		}
		if reqs := testenv.UpstreamRequests(t, upIP); reqs.Count != 1 || strings.Join(reqs.Requests[0].Headers["Authorization"], "") != "Bearer "+secret {
			t.Fatalf("the upstream did not receive the real value: %+v", reqs)
		}
		testenv.ResetUpstream(t, upIP)
		if out := lastLine(sb(`probe http -H "Authorization: Bearer $TOKEN" https://unbound.test/sink 5s`)); !strings.Contains(out, "403") {
			t.Errorf("placeholder to an unbound host was not blocked: %s", out)
		}
		if reqs := testenv.UpstreamRequests(t, upIP); reqs.Count != 0 {
			t.Errorf("the unbound host received the request: %+v", reqs)
		}
	})
	t.Run("TemplateDirsReadOnlyForTheAgent", func(t *testing.T) {
		// Control: the workspace itself is writable from inside.
		if out := sb("echo ok > " + ws + "/from-agent && cat " + ws + "/from-agent"); lastLine(out) != "ok" {
			t.Fatalf("control: workspace not writable: %s", out)
		}
		if data, _ := os.ReadFile(filepath.Join(ws, "from-agent")); strings.TrimSpace(string(data)) != "ok" {
			t.Fatalf("control: the host does not see the agent's write")
		}
		// What the agent writes is the workspace owner's (a non-root user's
		// workspace: the agent runs as that uid, not as the image's root).
		if fi, err := os.Stat(filepath.Join(ws, "from-agent")); err != nil {
			t.Fatal(err)
		} else if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			t.Fatalf("the agent's file is owned by uid %v, want this user's %d", fi.Sys(), os.Getuid())
		}
		// Each attempt on its own, all in one exec.
		var attempts []string
		for _, d := range []string{devcontainer.Dir, devcontainer.VSCodeDir, ".git/hooks"} {
			p := ws + "/" + d
			attempts = append(attempts,
				"echo '{}' > "+p+"/devcontainer.json",
				"echo x >> "+p+"/compose.yml",
				"touch "+p+"/settings.json",
				"rm -rf "+p+"/*",
				"mv "+p+" "+ws+"/moved",
				"umount "+p,
				"mkdir "+p+"/sub",
			)
		}
		sb(strings.Join(attempts, "; "))
		// The parent of a protected path: renaming .git and planting a
		// fresh one would undo the read-only hooks.
		sb("mv " + ws + "/.git " + ws + "/.git-moved && mkdir -p " + ws + "/.git/hooks && echo evil > " + ws + "/.git/hooks/pre-commit")
		if _, err := os.Stat(filepath.Join(ws, ".git-moved")); err == nil {
			t.Errorf("the agent renamed .git")
		}
		// (mv across mounts may copy first: the copy is harmless, the
		// original must stay.)
		for _, d := range []string{devcontainer.Dir, devcontainer.VSCodeDir, ".git/hooks"} {
			if fi, err := os.Stat(filepath.Join(ws, d)); err != nil || !fi.IsDir() {
				t.Errorf("the agent moved or removed %s: %v", d, err)
			}
		}
		if _, err := os.Stat(filepath.Join(ws, ".git/hooks/pre-commit")); err == nil {
			t.Errorf("the agent planted a hook")
		}
		for _, f := range []string{devcontainer.ConfigFile, devcontainer.ComposeFile} {
			data, err := os.ReadFile(filepath.Join(ws, devcontainer.Dir, f))
			if err != nil || string(data) == "{}\n" || strings.HasSuffix(string(data), "x\n") {
				t.Errorf("the agent changed %s: %v", f, err)
			}
		}
		for _, p := range []string{filepath.Join(ws, devcontainer.VSCodeDir, "settings.json"), filepath.Join(ws, devcontainer.Dir, "sub"), filepath.Join(ws, ".git/hooks/settings.json"), filepath.Join(ws, ".git/hooks/sub")} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("the agent created %s", p)
			}
		}
	})

	gatewayOf := func() string {
		return testenv.Docker(t, "ps", "-q", "--filter", "label="+devcontainer.LabelKey+"="+proxynet.Key(ws), "--filter", "label=com.docker.compose.service=gateway")
	}
	appOf := func() string {
		return testenv.Docker(t, "ps", "-aq", "--filter", "label="+devcontainer.LabelKey+"="+proxynet.Key(ws), "--filter", "label=com.docker.compose.service=app")
	}
	t.Run("RebuildKeepsGatewayAndReceipts", func(t *testing.T) {
		gw, app := gatewayOf(), appOf()
		t0 := time.Now()
		mustRun(dc, "up", "--workspace-folder", ws, "--remove-existing-container")
		if out := lastLine(sb("probe tls https://allowed.test/status/200")); !strings.HasPrefix(out, "OK 200") {
			t.Fatalf("after Rebuild: %s", out)
		}
		t.Logf("benchmark: rebuild (devcontainer up --remove-existing-container) to a working exec: %v", time.Since(t0).Round(100*time.Millisecond))
		if appOf() == app || gatewayOf() != gw {
			t.Errorf("Rebuild: app %s -> %s (want new), gateway %s -> %s (want same)", app, appOf(), gw, gatewayOf())
		}
		// One receipts log across the rebuild, verifying with the host's key.
		dir := filepath.Join(base, "receipts")
		testenv.Docker(t, "cp", gw+":"+paths.GatewayReceiptsDir(proxynet.GatewayStateDir), dir)
		logs, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		if len(logs) != 1 {
			t.Fatalf("receipts logs: %v", logs)
		}
		data, _ := os.ReadFile(logs[0])
		if n := strings.Count(string(data), "allowed.test"); n < 5 || strings.Contains(string(data), secret) {
			t.Errorf("receipts: %d records for allowed.test (want those before and after the rebuild), secret present: %v", n, strings.Contains(string(data), secret))
		}
		if out, err := run(vak, "receipts", "verify", logs[0]); err != nil {
			t.Errorf("receipts verify: %v\n%s", err, out)
		}
	})
	t.Run("NetclientOnlyRecreateDetectedAndRepaired", func(t *testing.T) {
		mustRun(f.cmd[0], "-p", project, "-f", composeFile, "up", "-d", "--no-deps", "--force-recreate", "netclient")
		out, err := run(vak, "devcontainer", "doctor", "-w", ws)
		if err == nil || !strings.Contains(out, "dead network namespace") {
			t.Errorf("doctor did not report the dead namespace: %v\n%s", err, out)
		}
		// Fails closed meanwhile.
		if out := lastLine(sb("probe tls https://allowed.test/status/200 3s")); strings.HasPrefix(out, "OK") {
			t.Errorf("in the dead namespace: %s", out)
		}
		stale := appOf()
		if out := mustRun(dc, "up", "--workspace-folder", ws); !strings.Contains(out, "dead network namespace") {
			t.Errorf("prepare did not report the stale agent container:\n%s", out)
		}
		if appOf() == stale {
			t.Errorf("the agent container %s was not recreated", stale)
		}
		if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err != nil || !strings.Contains(out, "fence self-test passed") {
			t.Errorf("doctor after up: %v\n%s", err, out)
		}
		if out := lastLine(sb("probe tls https://allowed.test/status/200")); !strings.HasPrefix(out, "OK 200") {
			t.Errorf("after the repairing up: %s", out)
		}
		canaryZero("after repair")
	})
	if !full {
		t.Run("ComposeAloneWithoutTheCLI", func(t *testing.T) {
			composeAlone(t, f, vak, ws, project, run, mustRun, canaryZero)
		})
		return
	}
	t.Run("FenceTamperFailsClosedAndIsRepaired", func(t *testing.T) {
		nc := testenv.Docker(t, "ps", "-q", "--filter", "label="+devcontainer.LabelKey+"="+proxynet.Key(ws), "--filter", "label=com.docker.compose.service=netclient")
		// As the netclient itself: flush every rule in the namespace. The
		// netclient notices and exits; nothing restarts it silently.
		if out, code := testenv.Exec(t, nc, "/vak", "netclient", "unfence"); code != 0 {
			t.Fatalf("unfence: %s", out)
		}
		testenv.ResetCanary(t, canIP)
		attempts := []string{"probe connect " + canIP + ":80 3s", "probe udp " + canIP + ":9 2s", "probe tls https://allowed.test/status/200 3s"}
		for i, out := range testenv.ProbeOutputs(t, sb(testenv.ProbeScript(attempts)), attempts) {
			if out := lastLine(out); strings.Contains(out, "OK 200") || strings.Contains(out, "canary") {
				t.Errorf("with the rules flushed, %s: %s", attempts[i], out)
			}
		}
		canaryZero("rules flushed")
		if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err == nil {
			t.Errorf("doctor with the rules flushed found nothing:\n%s", out)
		}
		mustRun(dc, "up", "--workspace-folder", ws)
		if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err != nil || !strings.Contains(out, "fence self-test passed") {
			t.Errorf("doctor after up: %v\n%s", err, out)
		}
		if out := lastLine(sb("probe tls https://allowed.test/status/200")); !strings.HasPrefix(out, "OK 200") {
			t.Errorf("after the repairing up: %s", out)
		}
	})
	t.Run("ConfigChangeReachesTheRunningGateway", func(t *testing.T) {
		if out := lastLine(sb("probe tls https://unbound.test/status/200")); !strings.HasPrefix(out, "OK 200") {
			t.Fatalf("control: unbound.test before the change: %s", out)
		}
		cfg := filepath.Join(xdgConfig, "vak", "config.toml")
		data, _ := os.ReadFile(cfg)
		os.WriteFile(cfg, []byte(strings.Replace(string(data), `hosts = ["allowed.test", "unbound.test"]`, `hosts = ["allowed.test"]`, 1)), 0o600)
		gw := gatewayOf()
		if out := mustRun(dc, "up", "--workspace-folder", ws); !strings.Contains(out, "config changed") {
			t.Errorf("prepare did not report the changed config:\n%s", out)
		}
		if gatewayOf() != gw {
			t.Errorf("the gateway container was replaced (want restarted in place)")
		}
		if out := lastLine(sb("probe tls https://unbound.test/status/200 5s")); strings.HasPrefix(out, "OK 200") {
			t.Errorf("the running gateway still allows the removed host: %s", out)
		}
		if out := lastLine(sb("probe tls https://allowed.test/status/200")); !strings.HasPrefix(out, "OK 200") {
			t.Errorf("after the change: %s", out)
		}
		if ph := lastLine(sb("echo $TOKEN")); !strings.HasPrefix(ph, "vakph_") {
			t.Errorf("placeholder after restart: %q", ph)
		}
	})
	t.Run("DamagedTemplateReported", func(t *testing.T) {
		damagedTemplate(t, ws, vak, run)
	})
	t.Run("DownRemovesOnlyThisWorkspace", func(t *testing.T) {
		down(t, ws, xdgState, project, vak, id, run, []string{devcontainer.GatewayVolume(key), devcontainer.TrustVolume(key)})
	})
}

// damagedTemplate: with the dev container running and doctor content
// (control), a devcontainer.json that no longer runs vak devcontainer
// prepare, and a compose.yml that does not parse, make doctor say so and
// exit non-zero; prepare names the compose file's line, not a template out
// of date. Both are restored afterwards (doctor content again).
func damagedTemplate(t *testing.T, ws, vak string, run func(string, ...string) (string, error)) {
	t.Helper()
	if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err != nil || strings.Contains(out, "problem") {
		t.Fatalf("control: doctor before the damage: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		file, from, to, want string
	}{
		{devcontainer.ConfigFile, `"prepare",`, `"--version",`, devcontainer.ConfigFile + ": initializeCommand does not run vak devcontainer prepare"},
		{devcontainer.ComposeFile, `"version": "2.4",`, `"version": "2.4"`, devcontainer.ComposeFile + ":6: invalid character"}, // the next key's line
	} {
		p := filepath.Join(ws, devcontainer.Dir, tc.file)
		orig, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(orig), tc.from) {
			t.Fatalf("%s lacks %q: %v", p, tc.from, err)
		}
		os.WriteFile(p, []byte(strings.Replace(string(orig), tc.from, tc.to, 1)), 0o644)
		out, err := run(vak, "devcontainer", "doctor", "-w", ws)
		if err == nil || !strings.Contains(out, "problem: "+filepath.Join(ws, devcontainer.Dir, tc.want)) {
			t.Errorf("doctor with a damaged %s: %v\n%s", tc.file, err, out)
		}
		if tc.file == devcontainer.ComposeFile {
			out, err := run(vak, "devcontainer", "prepare", "-w", ws)
			if err == nil || !strings.Contains(out, filepath.Join(ws, devcontainer.Dir, tc.want)) || strings.Contains(out, "placeholder") {
				t.Errorf("prepare with a broken compose.yml: %v\n%s", err, out)
			}
		}
		os.WriteFile(p, orig, 0o644)
	}
	if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err != nil || strings.Contains(out, "problem") {
		t.Errorf("doctor after the repair: %v\n%s", err, out)
	}
}

// down: vak devcontainer down --dry-run lists the workspace's containers,
// networks and volumes and removes nothing; down removes them all, saves
// the gateway's receipts (a log that verifies) and keeps the images and
// another workspace's objects, even ones under the same compose project
// name (planted here, for a key that is not this workspace's); a second
// down finds nothing.
func down(t *testing.T, ws, xdgState, project, vak, id string, run func(string, ...string) (string, error), volumes []string) {
	t.Helper()
	key := proxynet.Key(ws)
	other := "0ther" + key[5:]
	if other == key {
		other = "1ther" + key[5:]
	}
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + id, "--label", devcontainer.LabelKey + "=" + other, "--label", "com.docker.compose.project=" + project}
	neighbours := []string{
		"network " + testenv.Docker(t, append(append([]string{"network", "create"}, labels...), project+"_neighbour")...),
		"volume " + testenv.Docker(t, append(append([]string{"volume", "create"}, labels...), devcontainer.GatewayVolume(other))...),
		"container " + testenv.Docker(t, append(append([]string{"create"}, labels...), testenv.TestNetImage(t), "version")...),
	}
	list := func(kind string) []string {
		args := []string{kind, "ls", "-q", "--filter", "label=" + devcontainer.LabelKey + "=" + key}
		if kind == "container" {
			args = []string{"ps", "-aq", "--filter", "label=" + devcontainer.LabelKey + "=" + key}
		}
		return strings.Fields(testenv.Docker(t, args...))
	}
	if len(list("container")) == 0 || len(list("network")) != 2 || len(list("volume")) != len(volumes) {
		t.Fatalf("control: the workspace's objects before down: containers %v, networks %v, volumes %v", list("container"), list("network"), list("volume"))
	}
	out, err := run(vak, "devcontainer", "down", "--dry-run", "-w", ws)
	for _, want := range append([]string{"would remove container ", "would remove network " + project + "_egress", "would remove network " + project + "_sandbox", "would copy the gateway's receipts"}, volumes...) {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("down --dry-run lacks %q: %v\n%s", want, err, out)
		}
	}
	if strings.Contains(out, other) || strings.Contains(out, "neighbour") || len(list("container")) == 0 || len(list("volume")) != len(volumes) {
		t.Errorf("down --dry-run touched something or listed another workspace's:\n%s", out)
	}
	out, err = run(vak, "devcontainer", "down", "-w", ws, "--label", testenv.TestLabel+"=1", "--label", testenv.TestIDLabel+"="+id)
	if err != nil || strings.Contains(out, other) || strings.Contains(out, "neighbour") {
		t.Fatalf("down: %v\n%s", err, out)
	}
	t.Logf("down:\n%s", out)
	for _, kind := range []string{"container", "network", "volume"} {
		if l := list(kind); len(l) > 0 {
			t.Errorf("down left %ss: %v", kind, l)
		}
	}
	for _, n := range neighbours {
		kind, nid, _ := strings.Cut(n, " ")
		args := []string{kind, "inspect", nid}
		if kind == "container" {
			args = []string{"inspect", nid}
		}
		if err := exec.Command("docker", args...).Run(); err != nil {
			t.Errorf("down removed another workspace's %s", n)
		}
	}
	if err := exec.Command("docker", "image", "inspect", devcontainer.NetImage).Run(); err != nil {
		t.Errorf("down removed the shared image %s", devcontainer.NetImage)
	}
	logs, _ := filepath.Glob(filepath.Join(proxynet.ReceiptsDir(filepath.Join(xdgState, "vak"), key), "*-devcontainer-*.jsonl"))
	if len(logs) != 1 || !strings.Contains(out, "saved receipts "+logs[0]) {
		t.Fatalf("saved receipts: %v\n%s", logs, out)
	}
	if data, _ := os.ReadFile(logs[0]); !strings.Contains(string(data), "allowed.test") {
		t.Errorf("the saved receipts have no allowed.test record")
	}
	if out, err := run(vak, "receipts", "verify", logs[0]); err != nil {
		t.Errorf("receipts verify %s: %v\n%s", logs[0], err, out)
	}
	if out, err := run(vak, "devcontainer", "down", "-w", ws); err != nil || !strings.Contains(out, "no dev-container objects") {
		t.Errorf("a second down: %v\n%s", err, out)
	}
}

// composeAlone brings the project up with compose alone, as a tool that
// runs the initializeCommand and then compose without the dev-containers
// CLI does (JetBrains' dev containers): the agent's container runs the
// template's own command, stays up, and reaches the allowed upstream
// through the gateway (a denied name and the canary do not).
func composeAlone(t *testing.T, f composeFlavor, vak, ws, project string, run func(string, ...string) (string, error), mustRun func(string, ...string) string, canaryZero func(string)) {
	t.Helper()
	compose := func(args ...string) string {
		t.Helper()
		return mustRun(f.cmd[0], append([]string{"-p", project, "-f", filepath.Join(ws, devcontainer.Dir, devcontainer.ComposeFile)}, args...)...)
	}
	compose("down") // the volumes are external: the gateway's state stays
	var cfg struct {
		InitializeCommand []string `json:"initializeCommand"`
	}
	data, _ := os.ReadFile(filepath.Join(ws, devcontainer.Dir, devcontainer.ConfigFile))
	if err := json.Unmarshal(data, &cfg); err != nil || len(cfg.InitializeCommand) == 0 {
		t.Fatalf("devcontainer.json's initializeCommand: %v", err)
	}
	mustRun(cfg.InitializeCommand[0], cfg.InitializeCommand[1:]...)
	compose("up", "-d")
	app := testenv.Docker(t, "ps", "-q", "--filter", "label="+devcontainer.LabelKey+"="+proxynet.Key(ws), "--filter", "label=com.docker.compose.service=app")
	if app == "" {
		t.Fatalf("no running agent container after compose up")
	}
	started := testenv.Docker(t, "inspect", "--format", "{{.State.StartedAt}}", app)
	// The template's command as PID 1's child, nothing of the
	// dev-containers CLI (its entrypoint wrapper, its labels).
	if cmd := testenv.Docker(t, "inspect", "--format", `{{json .Config.Entrypoint}} {{json .Config.Cmd}}`, app); cmd != `null ["sleep","infinity"]` {
		t.Errorf("the agent's container runs %s (want the template's command only)", cmd)
	}
	if l := testenv.Docker(t, "inspect", "--format", `{{json .Config.Labels}}`, app); strings.Contains(l, "devcontainer.") {
		t.Errorf("the agent's container has the dev-containers CLI's labels: %s", l)
	}
	exec := func(cmd string) string {
		t.Helper()
		out, _ := run(f.cmd[0], "-p", project, "-f", filepath.Join(ws, devcontainer.Dir, devcontainer.ComposeFile), "exec", "-T", "app", "sh", "-c", cmd)
		return lastLine(out)
	}
	if out := exec("probe tls https://allowed.test/status/200"); !strings.HasPrefix(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
		t.Errorf("allowed HTTPS from the agent's container: %s", out)
	}
	if out := exec("probe http https://denied.test/ 5s"); strings.HasPrefix(out, "OK 200") {
		t.Errorf("a denied name: %s", out)
	}
	if out := exec("probe connect canary.test:80 3s; probe udp canary.test:9 2s"); strings.Contains(out, "canary") {
		t.Errorf("raw TCP/UDP to the canary: %s", out)
	}
	canaryZero("compose alone")
	if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err != nil || !strings.Contains(out, "fence self-test passed") {
		t.Errorf("doctor after compose up: %v\n%s", err, out)
	}
	// Still the same, running process after all that (no restart, no exit).
	if st := testenv.Docker(t, "inspect", "--format", "{{.State.Running}} {{.RestartCount}} {{.State.StartedAt}}", app); st != "true 0 "+started {
		t.Errorf("the agent's container did not stay up: %s (started %s)", st, started)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// removeLabelled removes this test's dev-container containers, networks
// and volumes (testenv removes its own).
func removeLabelled(id, wsName string) {
	f := "label=" + testenv.TestIDLabel + "=" + id
	list := func(args ...string) []string {
		out, _ := exec.Command("docker", args...).Output()
		return strings.Fields(string(out))
	}
	if cs := list("ps", "-aq", "--filter", f, "--filter", "label="+devcontainer.LabelKey); len(cs) > 0 {
		exec.Command("docker", append([]string{"rm", "-f"}, cs...)...).Run()
	}
	if ns := list("network", "ls", "-q", "--filter", f, "--filter", "label="+devcontainer.LabelKey); len(ns) > 0 {
		exec.Command("docker", append([]string{"network", "rm"}, ns...)...).Run()
	}
	if vs := list("volume", "ls", "-q", "--filter", f, "--filter", "label="+devcontainer.LabelKey); len(vs) > 0 {
		exec.Command("docker", append([]string{"volume", "rm", "-f"}, vs...)...).Run()
	}
	// The image the dev-containers CLI builds to give the remote user the
	// workspace owner's uid, named after the workspace's directory
	// (vsc-NAME-HASH-uid; it carries no label of ours).
	if is := list("images", "-q", "--filter", "reference=vsc-"+wsName+"-*"); len(is) > 0 {
		exec.Command("docker", append([]string{"image", "rm"}, is...)...).Run()
	}
}
