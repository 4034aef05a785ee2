package devcontainer_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"vak/internal/devcontainer"
	"vak/internal/dockerd"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/shellquote"
	"vak/internal/testenv"
)

// dockerToolsImage is the agent image of the --docker test (as
// proxynet.DockerToolsImage).
const dockerToolsImage = "vak-test-docker:bookworm"

// The --docker template brought up by the real dev-containers CLI: the
// agent's container drives the nested engine through DOCKER_HOST (the
// guard) with `devcontainer exec`: docker load and run of a local image,
// docker-compose up of a two-service stack, two
// inner containers on a user network, an inner container's egress through
// the gateway (allowed with the CA, denied blocked, canary 0), the guard's
// refusals; dockerd's private cgroup namespace (the release_agent escape);
// Rebuild keeps the daemon's images and the receipts chain; a
// netclient-only recreate fails dockerd's health check, doctor names it,
// and the next up repairs it. With Debian's docker-compose 1.29.
func TestDevcontainerDocker(t *testing.T) {
	testenv.RequireDocker(t)
	devcontainerDocker(t, composeV1(t), true)
}

// The same --docker template with Compose v2 (`docker compose`): up, the
// inner engine through the guard and an inner container's egress, the
// guard's socket directory read-only for the agent, dockerd's private
// cgroup namespace (the release_agent escape), Rebuild, a netclient-only
// recreate.
func TestDevcontainerDockerComposeV2(t *testing.T) {
	testenv.RequireDocker(t)
	devcontainerDocker(t, composeV2(t), false)
}

// needSidecarImage skips (fails with VAK_REQUIRE_DOCKER=1) a non-root run
// when the sidecar image is missing: prepare builds it when it is (as a
// session's --docker does), which needs root (debootstrap, chroot), so the
// non-root leg uses the image the root leg built.
func needSidecarImage(t *testing.T) {
	t.Helper()
	if os.Getuid() == 0 {
		return
	}
	tag := dockerd.DefaultRecipe.Tag()
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", tag).CombinedOutput(); err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, "the sidecar image "+tag+" is not built, and building it needs root: run `go test -run TestDevcontainerDocker ./internal/devcontainer/` (or `vak devcontainer prepare` of a --docker template, or any `vak session create --docker`) as root first ("+strings.TrimSpace(string(out))+")")
	}
}

// devcontainerDocker runs the --docker template's end-to-end test with
// compose f; full adds what does not depend on the compose (the scan and
// read-configuration, inner networks and compose, the guard's refusals,
// the bind-source swap).
func devcontainerDocker(t *testing.T, f composeFlavor, full bool) {
	needSidecarImage(t)
	dc := devcontainerCLI(t)
	base := testenv.TestNetImage(t)
	// The agent's image: Debian with docker.io's CLI and docker-compose
	// 1.29 (scripts/build-docker-test-image.sh).
	img := dockerToolsImage
	if out, err := exec.Command("docker", "image", "inspect", img).CombinedOutput(); err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, img+" is not built: run scripts/build-docker-test-image.sh ("+strings.TrimSpace(string(out))+")")
	}
	vak := testenv.Vak(t)
	id := testenv.TestID(t)
	in := testenv.StartInternet(t, base, "allowed.test", "denied.test", "unbound.test")
	certs, inet, upIP, canIP := in.Certs, in.Network, in.UpstreamIP, in.CanaryIP
	wsName := testenv.UniqueName("ws")
	t.Cleanup(func() { removeLabelled(id, wsName) })

	var rnd [6]byte
	rand.Read(rnd[:])
	secret := "real-secret-" + hex.EncodeToString(rnd[:])
	base0, _ := filepath.EvalSymlinks(t.TempDir())
	xdgState, xdgConfig := filepath.Join(base0, "state"), filepath.Join(base0, "config")
	os.MkdirAll(filepath.Join(xdgConfig, "vak"), 0o700)
	os.WriteFile(filepath.Join(xdgConfig, "vak", "config.toml"), []byte(fmt.Sprintf(`version = 1
[network]
policy = "proxied"
[[network.rules]]
name = "test upstream"
action = "allow"
hosts = ["allowed.test", "unbound.test"]
cidrs = ["%s/32"]
[network.dns.overrides]
"allowed.test" = [%q]
"denied.test" = [%q]
"unbound.test" = [%q]
"canary.test" = [%q]
[gateway]
extra_ca_bundles = [%q]
[secrets.TOKEN]
value = %q
hosts = ["allowed.test"]
`, upIP, upIP, upIP, upIP, canIP, certs.CA, secret)), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base0, wsName)))
	if err != nil {
		t.Fatal(err)
	}
	// The inner image, saved into the workspace and loaded through the
	// guard (no registry).
	if out, err := exec.Command("docker", "save", "-o", filepath.Join(ws, "inner.tar"), base).CombinedOutput(); err != nil {
		t.Fatalf("docker save: %v %s", err, out)
	}
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
	key := proxynet.Key(ws)
	svc := func(name string) string {
		return testenv.Docker(t, "ps", "-aq", "--filter", "label="+devcontainer.LabelKey+"="+key, "--filter", "label=com.docker.compose.service="+name)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if d := svc("dockerd"); d != "" {
				out, _ := exec.Command("docker", "logs", "--tail", "30", d).CombinedOutput()
				t.Logf("dockerd log:\n%s", out)
			}
		}
	})
	mustRun(vak, "devcontainer", "init", "--docker", "-w", ws, "--image", img, "--gateway-network", inet,
		"--label", testenv.TestLabel+"=1", "--label", testenv.TestIDLabel+"="+id)

	if full {
		t.Run("GeneratedFilesHoldNoSecret", func(t *testing.T) {
			filepath.Walk(filepath.Join(ws, devcontainer.Dir), func(p string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					if data, _ := os.ReadFile(p); strings.Contains(string(data), secret) || strings.Contains(string(data), "PRIVATE KEY") {
						t.Errorf("%s holds a secret", p)
					}
				}
				return nil
			})
			// The seccomp profile is in the state dir, not the workspace.
			if _, err := os.Stat(devcontainer.SeccompFile(filepath.Join(xdgState, "vak"), key)); err != nil {
				t.Errorf("the seccomp profile: %v", err)
			}
			out := mustRun(dc, "read-configuration", "--workspace-folder", ws)
			if !strings.Contains(out, `"runServices":["gateway","netclient","dockerd","app"]`) {
				t.Errorf("read-configuration: %s", out)
			}
		})
	}

	t0 := time.Now()
	f.checkCLICompose(t, mustRun(dc, "up", "--workspace-folder", ws))
	sb := func(cmd string) (string, error) {
		t.Helper()
		out, err := run(dc, "exec", "--workspace-folder", ws, "sh", "-c", cmd)
		return strings.TrimSpace(out), err
	}
	if out, err := sb("docker version --format '{{.Server.Version}}'"); err != nil {
		t.Fatalf("docker through the guard after devcontainer up: %v\n%s", err, out)
	}
	t.Logf("benchmark: devcontainer up (--docker, compose %s) to a working docker exec: %v", f.name, time.Since(t0).Round(100*time.Millisecond))
	if out, _ := sb("echo $DOCKER_HOST"); lastLine(out) != "unix://"+devcontainer.DockerSocket {
		t.Errorf("DOCKER_HOST = %q", out)
	}
	t.Run("AgentRunsAsTheWorkspaceOwner", func(t *testing.T) {
		// The agent's container runs as the workspace owner (this user;
		// root's workspace: the image's root), drives the nested engine
		// as that user, and what it writes in the workspace is theirs.
		if out, _ := sb("id -u; id -g"); strings.Join(strings.Fields(out), ":") != fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()) {
			t.Errorf("the agent runs as %q, want the workspace owner %d:%d", out, os.Getuid(), os.Getgid())
		}
		if out, err := sb("echo ok > from-agent && cat from-agent"); err != nil || lastLine(out) != "ok" {
			t.Fatalf("control: the workspace is not writable for the agent: %v\n%s", err, out)
		}
		if fi, err := os.Stat(filepath.Join(ws, "from-agent")); err != nil {
			t.Fatal(err)
		} else if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
			t.Errorf("the agent's file is owned by %v, want this user's %d:%d", fi.Sys(), os.Getuid(), os.Getgid())
		}
		// Everything prepare wrote on the host (placeholders, digests,
		// dockerd's seccomp profile) is the user's too.
		n := 0
		filepath.WalkDir(filepath.Join(xdgState, "vak"), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Errorf("walk the state dir: %v", err)
				return nil
			}
			n++
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
					t.Errorf("%s is owned by uid %d, not the user (%d)", p, st.Uid, os.Getuid())
				}
			}
			return nil
		})
		if _, err := os.Stat(devcontainer.SeccompFile(filepath.Join(xdgState, "vak"), key)); err != nil || n < 3 {
			t.Errorf("control: prepare's files in the state dir (%d entries): %v", n, err)
		}
	})
	if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err != nil || !strings.Contains(out, "fence self-test passed") || !strings.Contains(out, "dockerd") {
		t.Errorf("doctor after up: %v\n%s", err, out)
	}
	if out, err := sb("docker load -i inner.tar"); err != nil || !strings.Contains(out, "Loaded image") {
		t.Fatalf("docker load through the guard: %v\n%s", err, out)
	}
	// Control for the canary: it counts a connection from outside.
	if out, _ := exec.Command("docker", append(append([]string{"run", "--rm"}, testenv.LabelArgs(t)...), "--network", inet, base, "probe", "connect", canIP+":80", "3s")...).CombinedOutput(); !strings.Contains(string(out), "OK") {
		t.Fatalf("control: canary unreachable: %s", out)
	}
	if c := testenv.ResetCanary(t, canIP); c.TCP == 0 {
		t.Fatalf("control: the canary did not count a connection: %+v", c)
	}
	inner := func(args string) string {
		t.Helper()
		out, _ := sb("docker run --rm " + base + " " + args)
		return lastLine(out)
	}

	t.Run("InnerEgressThroughTheGateway", func(t *testing.T) {
		// One inner container runs them all at once (most of the escape
		// attempts wait out their timeout).
		attempts := []string{"probe tls https://allowed.test/status/200", "probe tls https://denied.test/status/200",
			"probe connect canary.test:80 3s", "probe connect " + canIP + ":80 3s", "probe udp " + canIP + ":53 2s", "probe tls https://" + canIP + "/ 3s"}
		out, _ := sb("docker run --rm " + base + " sh -c " + shellquote.Quote(testenv.ProbeScript(attempts)))
		outs := testenv.ProbeOutputs(t, out, attempts)
		if out := lastLine(outs[0]); !strings.HasPrefix(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
			t.Fatalf("inner HTTPS to the allowed upstream: %s", out)
		}
		if out := lastLine(outs[1]); !strings.Contains(out, "OK 403") {
			t.Errorf("inner HTTPS to a denied name: %s", out)
		}
		for i, out := range outs[2:] {
			if out := lastLine(out); strings.Contains(out, "OK 200") || strings.Contains(out, "canary") {
				t.Errorf("inner %s: %s", attempts[2+i], out)
			}
		}
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 {
			t.Errorf("the canary saw inner traffic: %+v", c)
		}
	})
	if full {
		t.Run("AgentEgressAndPlaceholder", func(t *testing.T) {
			// The agent's own container (not an inner one), as in the plain
			// variant: the static probe, copied into the workspace.
			data, err := os.ReadFile(testenv.Probe(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, "probe"), data, 0o755); err != nil {
				t.Fatal(err)
			}
			probe := func(args string) string {
				t.Helper()
				out, _ := sb(ws + "/probe " + args)
				return lastLine(out)
			}
			testenv.ResetCanary(t, canIP)
			if out := probe("tls https://allowed.test/status/200"); !strings.HasPrefix(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
				t.Fatalf("the agent's HTTPS to the allowed upstream (verification on, no flags): %s", out)
			}
			if out := probe("http https://denied.test/status/200 5s"); strings.HasPrefix(out, "OK 200") {
				t.Errorf("the agent reached a denied name: %s", out)
			}
			var attempts []string
			for _, a := range []string{
				"http http://" + canIP + "/ 3s",
				"connect " + canIP + ":22 3s",
				"udp " + canIP + ":9 2s",
				"dns leak-" + hex.EncodeToString(rnd[:3]) + ".exfil.test " + canIP,
				"dns --tcp leak2.exfil.test " + canIP,
				"connect canary.test:80 3s",
			} {
				attempts = append(attempts, ws+"/probe "+a)
			}
			// All at once (most wait out their timeout).
			out, _ := sb(testenv.ProbeScript(attempts))
			for i, out := range testenv.ProbeOutputs(t, out, attempts) {
				if out := lastLine(out); testenv.ProbeEscaped(out) {
					t.Errorf("the agent's %s: %s", attempts[i], out)
				}
			}
			ph, _ := sb("echo $TOKEN")
			if ph = lastLine(ph); !strings.HasPrefix(ph, "vakph_") {
				t.Fatalf("the agent sees TOKEN=%q (want its placeholder)", ph)
			}
			if env, _ := sb("env"); strings.Contains(env, secret) {
				t.Fatalf("the real value is in the agent's environment")
			}
			testenv.ResetUpstream(t, upIP)
			if out := probe(`http -H "Authorization: Bearer $TOKEN" https://allowed.test/sink 5s`); !strings.HasPrefix(out, "OK 200") {
				t.Fatalf("the placeholder toward its bound host: %s", out)
			}
			if reqs := testenv.UpstreamRequests(t, upIP); reqs.Count != 1 || strings.Join(reqs.Requests[0].Headers["Authorization"], "") != "Bearer "+secret {
				t.Fatalf("the bound host did not receive the real value: %+v", reqs)
			}
			testenv.ResetUpstream(t, upIP)
			if out := probe(`http -H "Authorization: Bearer $TOKEN" https://unbound.test/sink 5s`); !strings.Contains(out, "403") {
				t.Errorf("the placeholder toward an allowed host it is not bound to was not blocked: %s", out)
			}
			if reqs := testenv.UpstreamRequests(t, upIP); reqs.Count != 0 {
				t.Errorf("the unbound host received the request: %+v", reqs)
			}
			if c := testenv.CanaryCounts(t, canIP); c.Total != 0 || c.DNS != 0 {
				t.Errorf("the canary saw the agent's traffic: %+v", c)
			}
			os.Remove(filepath.Join(ws, "probe"))
		})
		t.Run("AgentGainsNoPrivileges", func(t *testing.T) {
			// No capabilities (bounding set empty) and no-new-privileges:
			// setuid binaries in the image (su, mount, passwd) and sudo, if
			// the image had it, gain nothing.
			status := func(out string) map[string]string {
				m := map[string]string{}
				for _, l := range strings.Split(out, "\n") {
					if k, v, ok := strings.Cut(l, ":"); ok {
						m[k] = strings.TrimSpace(v)
					}
				}
				return m
			}
			out, _ := sb("grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd):' /proc/self/status")
			if st := status(out); st["NoNewPrivs"] != "1" || st["CapEff"] != "0000000000000000" || st["CapPrm"] != "0000000000000000" || st["CapBnd"] != "0000000000000000" {
				t.Errorf("the agent's privileges: %s", out)
			}
			// Control: the same image without the template's options.
			ctl, _ := exec.Command("docker", append(append([]string{"run", "--rm"}, testenv.LabelArgs(t)...), "--network", "none", "--entrypoint", "grep", img, "-E", "^(NoNewPrivs|CapBnd):", "/proc/self/status")...).CombinedOutput()
			if st := status(string(ctl)); st["NoNewPrivs"] != "0" || st["CapBnd"] == "0000000000000000" || st["CapBnd"] == "" {
				t.Errorf("control: a plain container of %s: %s", img, ctl)
			}
		})
		t.Run("TwoContainersOnAUserNetwork", func(t *testing.T) {
			out, err := sb("docker network create vakinner && docker run -d --name srv --network vakinner " + base + " testnet canary")
			if err != nil {
				t.Fatalf("inner network and server: %v\n%s", err, out)
			}
			var last string
			for i := 0; i < 50; i++ {
				if last, _ = sb("docker run --rm --network vakinner " + base + " probe connect srv:80 2s"); strings.HasPrefix(lastLine(last), "OK") {
					break
				}
			}
			if !strings.HasPrefix(lastLine(last), "OK") {
				t.Errorf("inner container to inner container by name: %s", last)
			}
			sb("docker rm -f srv; docker network rm vakinner")
		})
		t.Run("TemplateDirsReadOnlyForInnerContainers", func(t *testing.T) {
			// The template's initializeCommand runs on the host: an inner
			// container (root, Docker's default capabilities) binding the
			// workspace, or the template dirs themselves, must not change
			// them either. Control: the same container writes the workspace.
			var attempts []string
			for _, d := range devcontainer.ProtectedDirs {
				attempts = append(attempts,
					"echo x >> /w/"+d+"/"+devcontainer.ComposeFile,
					"echo '{}' > /w/"+d+"/"+devcontainer.ConfigFile,
					"touch /w/"+d+"/planted",
					"echo x >> /d/"+devcontainer.ComposeFile,
					"touch /d/planted",
				)
			}
			for _, d := range devcontainer.ProtectedDirs {
				script := strings.Join(append(attempts, "echo ok > /w/inner-control"), "; ")
				out, err := sb("docker run --rm -v " + ws + ":/w -v " + ws + "/" + d + ":/d " + base + " sh -c \"" + script + "\" 2>&1")
				if data, e := os.ReadFile(filepath.Join(ws, "inner-control")); e != nil || strings.TrimSpace(string(data)) != "ok" {
					t.Fatalf("control: the inner container could not write the workspace: %v %v\n%s", err, e, out)
				}
				os.Remove(filepath.Join(ws, "inner-control"))
			}
			sb("docker run --rm -v " + ws + ":/w " + base + " rm -f /w/inner-control")
			for _, d := range devcontainer.ProtectedDirs {
				if _, err := os.Stat(filepath.Join(ws, d, "planted")); err == nil {
					t.Errorf("an inner container planted a file in %s", d)
				}
			}
			for _, f := range []string{devcontainer.ConfigFile, devcontainer.ComposeFile} {
				data, err := os.ReadFile(filepath.Join(ws, devcontainer.Dir, f))
				if err != nil || string(data) == "{}\n" || strings.HasSuffix(string(data), "x\n") {
					t.Errorf("an inner container changed %s: %v", f, err)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, devcontainer.VSCodeDir, devcontainer.ComposeFile)); err == nil {
				t.Errorf("an inner container wrote in %s", devcontainer.VSCodeDir)
			}
		})
		t.Run("InnerContainerFileOwners", func(t *testing.T) {
			// An inner container writes a bind-mounted workspace as its
			// user: with -u as the workspace owner, the file is theirs;
			// without, as the image's root, which is the host's root (the
			// nested engine is rootful: docs/devcontainer.md, "The agent's
			// user"), so an inner container removes that file again.
			asUser := fmt.Sprintf("docker run --rm -u %d:%d -v %s:/w %s sh -c 'echo ok > /w/inner-as-user'", os.Getuid(), os.Getgid(), ws, base)
			asRoot := "docker run --rm -v " + ws + ":/w " + base + " sh -c 'echo ok > /w/inner-as-root'"
			if out, err := sb(asUser + " && " + asRoot); err != nil {
				t.Fatalf("inner writes: %v\n%s", err, out)
			}
			defer sb("docker run --rm -v " + ws + ":/w " + base + " rm -f /w/inner-as-root /w/inner-as-user")
			for f, uid := range map[string]int{"inner-as-user": os.Getuid(), "inner-as-root": 0} {
				if fi, err := os.Stat(filepath.Join(ws, f)); err != nil {
					t.Errorf("%s: %v", f, err)
				} else if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != uid {
					t.Errorf("%s is owned by %v, want uid %d", f, fi.Sys(), uid)
				}
			}
		})
		t.Run("ComposeInside", func(t *testing.T) {
			// docker-compose 1.29 in the agent's container, through the guard:
			// a two-service stack on its own network, the client reaching the
			// server by name and the allowed upstream through the gateway.
			compose := "version: \"2.4\"\nservices:\n  web:\n    image: " + base + "\n    command: [\"testnet\", \"canary\"]\n" +
				"  client:\n    image: " + base + "\n    depends_on: [web]\n" +
				"    command: [\"sh\", \"-c\", \"i=0; until probe connect web:80 2s; do i=$$((i+1)); [ $$i -lt 50 ] || exit 1; sleep 0.2; done; probe tls https://allowed.test/status/200\"]\n"
			if err := os.WriteFile(filepath.Join(ws, "compose-inner.yml"), []byte(compose), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := sb("docker-compose -f compose-inner.yml -p vakdcinner up --exit-code-from client client 2>&1")
			sb("docker-compose -f compose-inner.yml -p vakdcinner down -v 2>&1")
			if err != nil || !strings.Contains(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
				t.Fatalf("docker-compose up inside: %v\n%s", err, out)
			}
			if left, _ := sb("docker ps -aq --filter label=com.docker.compose.project=vakdcinner"); strings.TrimSpace(left) != "" {
				t.Errorf("docker-compose down left containers: %s", left)
			}
		})
		t.Run("GuardRefusesEscalation", func(t *testing.T) {
			// Control: a plain run works.
			if out, err := sb("docker run --rm " + base + " true"); err != nil {
				t.Fatalf("control: plain docker run: %v\n%s", err, out)
			}
			for _, a := range []string{
				"--privileged",
				"--cap-add SYS_ADMIN",
				"--cap-add ALL",
				"--security-opt seccomp=unconfined",
				"--pid host",
				"--network host",
				"-v /:/host",
				"-v /var/run:/x",
				"--device /dev/kmsg",
				"--cgroupns host",
			} {
				if out, err := sb("docker run --rm " + a + " " + base + " true"); err == nil {
					t.Errorf("docker run %s was allowed: %s", a, out)
				}
			}
		})
		t.Run("BindSymlinkSwapAfterCheck", func(t *testing.T) {
			// The agent creates a container binding a workspace directory,
			// then swaps the directory for a symlink to / before starting it:
			// the guard staged the directory it checked, so the container
			// still sees that directory, not dockerd's root.
			show := "cat /x/marker 2>&1; ls /x" + dockerd.RawSocketDir + " 2>&1; true"
			swap := "mv race race.old && ln -s / race"
			unswap := "rm race && mv race.old race"
			if out, err := sb("mkdir -p race && echo inside > race/marker"); err != nil {
				t.Fatal(out)
			}
			if out, err := sb("docker create --name vakrace -v " + ws + "/race:/x " + base + " sh -c '" + show + "'"); err != nil {
				t.Fatalf("docker create: %v\n%s", err, out)
			}
			if out, err := sb(swap); err != nil {
				t.Fatal(out)
			}
			out, err := sb("docker start -a vakrace; docker rm vakrace >/dev/null")
			if err != nil || !strings.Contains(out, "inside") || strings.Contains(out, "docker.sock") {
				t.Errorf("the guard's container followed the swapped symlink: %v\n%s", err, out)
			}
			// Control: the raw daemon, same sequence, follows the symlink
			// into dockerd's root (where the raw socket is).
			sb(unswap)
			raw := "DOCKER_HOST=unix://" + dockerd.RawSocket + " docker "
			if out, code := testenv.Exec(t, svc("dockerd"), "sh", "-c", raw+"create --name vakrace-raw -v "+ws+"/race:/x "+base+" sh -c '"+show+"'"); code != 0 {
				t.Fatalf("raw create: %s", out)
			}
			sb(swap)
			out, _ = testenv.Exec(t, svc("dockerd"), "sh", "-c", raw+"start -a vakrace-raw; "+raw+"rm -f vakrace-raw >/dev/null")
			if !strings.Contains(out, "docker.sock") {
				t.Errorf("control: the raw daemon did not follow the swapped symlink (the test shows nothing)\n%s", out)
			}
			sb(unswap)
		})
	}
	t.Run("GuardSocketsNotReplaceable", func(t *testing.T) {
		// A reaper.sock replaced by a link to the raw socket would be
		// bound into an inner container by dockerd: the agent's view of
		// the socket directory is read-only.
		// Each attempt on its own, all in one exec.
		sb(strings.Join([]string{
			"rm -f " + devcontainer.ReaperSocket,
			"ln -sf /run/vak-dockerd/docker.sock " + devcontainer.DockerDir + "/evil.sock",
			"mv " + devcontainer.ReaperSocket + " " + devcontainer.DockerDir + "/moved",
			"touch " + devcontainer.DockerDir + "/x",
		}, "; "))
		if out, err := testenv.Exec(t, svc("dockerd"), "sh", "-c", "ls -la "+devcontainer.DockerDir); err != 0 || !strings.Contains(out, "reaper.sock") || strings.Contains(out, "evil") || strings.Contains(out, "moved") || strings.Contains(out, " x\n") {
			t.Errorf("the agent changed the guard's socket directory:\n%s", out)
		}
		if out, err := sb("docker version --format '{{.Server.Version}}'"); err != nil {
			t.Errorf("control: docker through the guard: %v\n%s", err, out)
		}
		// Control: the directory is writable where it is not mounted
		// read-only (dockerd), so the attempts above could succeed.
		if out, code := testenv.Exec(t, svc("dockerd"), "sh", "-c", "touch "+devcontainer.DockerDir+"/control && rm "+devcontainer.DockerDir+"/control"); code != 0 {
			t.Errorf("control: the socket directory is not writable in dockerd: %s", out)
		}
	})
	t.Run("DockerdCgroupNamespacePrivate", func(t *testing.T) {
		d := svc("dockerd")
		// The release_agent escape needs the root of a cgroup v1
		// hierarchy: in the cgroup namespace of dockerd's process tree
		// (PID 1 after the entrypoint's unshare; everything the daemon
		// starts inherits it) a fresh v1 mount has none. (A docker exec
		// from the host does not join that namespace: see
		// docs/devcontainer.md.)
		probe := "mkdir -p /tmp/cg && mount -t cgroup -o pids none /tmp/cg && ls /tmp/cg/release_agent"
		if out, code := testenv.Exec(t, d, "nsenter", "--target", "1", "--cgroup", "--", "sh", "-c", probe); code == 0 || strings.Contains(out, "/tmp/cg/release_agent") && !strings.Contains(out, "No such file") {
			t.Errorf("dockerd's process tree reached a cgroup v1 root (release_agent): %s", out)
		} else {
			t.Logf("probe in dockerd's cgroup namespace: %s", out)
		}
		// dockerd (PID 1) is in a cgroup namespace other than the one
		// compose created the container in (which a docker exec joins).
		out, _ := testenv.Exec(t, d, "sh", "-c", "readlink /proc/1/ns/cgroup /proc/self/ns/cgroup")
		ns := strings.Fields(out)
		if len(ns) != 2 || ns[0] == ns[1] {
			t.Fatalf("dockerd (PID 1) did not move to a cgroup namespace of its own: %s", out)
		}
		// ... and not the host's: namespace ids are the kernel's, the same
		// read inside the container as from the host, where this test runs.
		host, err := os.Readlink("/proc/self/ns/cgroup")
		if err != nil || ns[0] == host {
			t.Errorf("dockerd (PID 1) is in the host's cgroup namespace %s: %s (%v)", host, ns[0], err)
		}
		if os.Getuid() == 0 {
			// Root also sees it from the host, by dockerd's host pid (a
			// user cannot read a root process's namespaces).
			pid := testenv.Docker(t, "inspect", "--format", "{{.State.Pid}}", d)
			if hns, err := os.Readlink("/proc/" + pid + "/ns/cgroup"); err != nil || hns != ns[0] {
				t.Errorf("dockerd's host pid %s is in cgroup namespace %s, inside it reads %s (%v)", pid, hns, ns[0], err)
			}
		}
		// Control: the same probe with the same capability in the host's
		// cgroup namespace finds it (so the probe can fail).
		ctl, _ := exec.Command("docker", append(append([]string{"run", "--rm"}, testenv.LabelArgs(t)...), "--cap-drop", "ALL", "--cap-add", "SYS_ADMIN", "--security-opt", "apparmor=unconfined", "--cgroupns", "host", "--entrypoint", "sh", devcontainer.DockerdImage, "-c", probe)...).CombinedOutput()
		if !strings.Contains(string(ctl), "/tmp/cg/release_agent") || strings.Contains(string(ctl), "No such file") {
			t.Errorf("control: the probe did not find release_agent in the host's cgroup namespace: %s", ctl)
		}
	})

	dockerdOf, appOf, gatewayOf := func() string { return svc("dockerd") }, func() string { return svc("app") }, func() string { return svc("gateway") }
	t.Run("RebuildKeepsImagesAndReceipts", func(t *testing.T) {
		d, app, gw := dockerdOf(), appOf(), gatewayOf()
		t0 := time.Now()
		mustRun(dc, "up", "--workspace-folder", ws, "--remove-existing-container")
		if out, err := sb("docker image inspect --format '{{.Id}}' " + base); err != nil {
			t.Fatalf("after Rebuild, the inner image is gone: %v\n%s", err, out)
		}
		t.Logf("benchmark: rebuild (--docker) to a working docker exec: %v", time.Since(t0).Round(100*time.Millisecond))
		if appOf() == app || dockerdOf() != d || gatewayOf() != gw {
			t.Errorf("Rebuild: app %s -> %s (want new), dockerd %s -> %s and gateway %s -> %s (want same)", app, appOf(), d, dockerdOf(), gw, gatewayOf())
		}
		if out := inner("probe tls https://allowed.test/status/200"); !strings.HasPrefix(out, "OK 200") {
			t.Errorf("inner HTTPS after Rebuild: %s", out)
		}
		dir := filepath.Join(base0, "receipts")
		testenv.Docker(t, "cp", gw+":"+paths.GatewayReceiptsDir(proxynet.GatewayStateDir), dir)
		logs, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		if len(logs) != 1 {
			t.Fatalf("receipts logs: %v", logs)
		}
		data, _ := os.ReadFile(logs[0])
		if n := strings.Count(string(data), "allowed.test"); n < 2 || strings.Contains(string(data), secret) {
			t.Errorf("receipts: %d records for allowed.test (want those before and after the rebuild), secret present: %v", n, strings.Contains(string(data), secret))
		}
		if out, err := run(vak, "receipts", "verify", logs[0]); err != nil {
			t.Errorf("receipts verify: %v\n%s", err, out)
		}
	})
	t.Run("NetclientOnlyRecreateDetectedAndRepaired", func(t *testing.T) {
		project := testenv.Docker(t, "inspect", "--format", `{{index .Config.Labels "com.docker.compose.project"}}`, appOf())
		d := dockerdOf()
		mustRun(f.cmd[0], "-p", project, "-f", filepath.Join(ws, devcontainer.Dir, devcontainer.ComposeFile), "up", "-d", "--no-deps", "--force-recreate", "netclient")
		// dockerd's health check fails in the dead namespace.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		for {
			if h := testenv.Docker(t, "inspect", "--format", "{{.State.Health.Status}}", d); h == "unhealthy" {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("dockerd in the dead namespace did not become unhealthy")
			}
			time.Sleep(500 * time.Millisecond)
		}
		out, err := run(vak, "devcontainer", "doctor", "-w", ws)
		if err == nil || !strings.Contains(out, "dockerd: in a dead network namespace") || !strings.Contains(out, "app: in a dead network namespace") {
			t.Errorf("doctor did not report the dead namespace: %v\n%s", err, out)
		}
		if out := lastLine(inner("probe tls https://allowed.test/status/200 3s")); strings.HasPrefix(out, "OK 200") {
			t.Errorf("in the dead namespace: %s", out)
		}
		if out := mustRun(dc, "up", "--workspace-folder", ws); !strings.Contains(out, "dead network namespace") {
			t.Errorf("prepare did not report the stale containers:\n%s", out)
		}
		if dockerdOf() == d {
			t.Errorf("dockerd %s was not recreated", d)
		}
		if out, err := run(vak, "devcontainer", "doctor", "-w", ws); err != nil || !strings.Contains(out, "fence self-test passed") {
			t.Errorf("doctor after the repairing up: %v\n%s", err, out)
		}
		if out := inner("probe tls https://allowed.test/status/200"); !strings.HasPrefix(out, "OK 200") {
			t.Errorf("inner HTTPS after the repairing up (the image from before): %s", out)
		}
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 {
			t.Errorf("the canary saw traffic: %+v", c)
		}
	})
	t.Run("DownRemovesOnlyThisWorkspace", func(t *testing.T) {
		key := proxynet.Key(ws)
		project := testenv.Docker(t, "inspect", "--format", `{{index .Config.Labels "com.docker.compose.project"}}`, appOf())
		down(t, ws, xdgState, project, vak, id, run, []string{devcontainer.GatewayVolume(key), devcontainer.TrustVolume(key), devcontainer.BinVolume(key), devcontainer.DockerVolume(key), devcontainer.SocketVolume(key)})
	})
}
