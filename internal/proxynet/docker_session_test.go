package proxynet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/client"

	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/shellquote"
	"vak/internal/taskenv"
	"vak/internal/testenv"
)

// Nested Docker through vak's own path: `vak session create --docker`,
// then `vak session exec` runs the docker CLI against DOCKER_HOST (the
// guard): `docker load` of a locally saved image, `docker run` of it, an
// inner container's HTTPS to an allowed upstream through the gateway with
// the CA the guard injects, a denied name and the canary blocked (canary
// count 0, with a control that the canary counts), a privileged run refused
// naming the field; a dead sidecar is reported by `vak session exec`, and
// `vak session rm` removes the sidecar and its volumes. It runs as root and,
// in scripts/test-nonroot, as an unprivileged user in the docker group
// (with the sidecar image the root leg built): every host-side file vak
// writes (state dir, gateway env cache, trust dir, session records) is the
// user's. The sidecar's baseline is the one docker info calls for (the
// capability-listed runc sidecar here: no Sysbox), printed by create,
// recorded and on the container; session.docker_runtime = "sysbox" without
// Sysbox fails naming the key before anything starts.
func TestDockerSession(t *testing.T) {
	testenv.CheckLeftovers(t)
	needSidecarImage(t)
	f := newNestedFixture(t, "")
	base, vak, inet, canIP, xdg, cfgFile, ws, key := f.base, f.vak, f.inet, f.canIP, f.xdg, f.cfgFile, f.ws, f.key
	os.MkdirAll(filepath.Join(ws, ".vak"), 0o777) // protected (sandbox.DefaultProtected)

	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	env := append(os.Environ(), "XDG_STATE_HOME="+xdg)
	vakCmd := f.run
	sexec := func(id, script string) (string, error) {
		t.Helper()
		out, errs, err := vakCmd("session", "exec", id, "--", "sh", "-c", script)
		return strings.TrimSpace(out + errs), err
	}

	// --docker without the proxied network is refused, naming the flag.
	if _, errs, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", "nonet", "--network", "none", "--docker")...); err == nil || !strings.Contains(errs, "--docker") || !strings.Contains(errs, "proxied") {
		t.Fatalf("--docker --network none: %v %s", err, errs)
	}

	// Sysbox required where docker info lists none: a config error naming
	// the key and the file, before anything is built or started.
	wantBaseline := expectedBaseline(t)
	if wantBaseline != dockerd.BaselineSysbox {
		sysboxCfg := filepath.Join(filepath.Dir(cfgFile), "config-sysbox.toml")
		b, _ := os.ReadFile(cfgFile)
		os.WriteFile(sysboxCfg, append(b, "[session]\ndocker_runtime = \"sysbox\"\n"...), 0o600)
		cmd := exec.Command(vak, append(append([]string{"--config", sysboxCfg, "session", "create"}, labels...), "-w", ws, "--task", "sysbox", "--network", "proxied", "--docker")...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 78 || !strings.Contains(string(out), "session.docker_runtime") || !strings.Contains(string(out), sysboxCfg) || !strings.Contains(string(out), "sysbox-runc") {
			t.Fatalf("docker_runtime = \"sysbox\" without Sysbox: %v\n%s", err, out)
		}
		if o := testenv.Docker(t, "ps", "-aq", "--filter", "label="+taskenv.LabelDocker+"=true", "--filter", "label="+testenv.TestIDLabel+"="+testenv.TestID(t)); strings.TrimSpace(o) != "" {
			t.Fatalf("a refused create left a sidecar: %s", o)
		}
	}

	out, errs, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", "dind", "--network", "proxied", "--docker")...)
	if err != nil {
		t.Fatalf("session create --docker: %v\n%s", err, errs)
	}
	id := strings.TrimSpace(out)
	if !strings.Contains(errs, "nested Docker sidecar: "+string(wantBaseline)+" (") {
		t.Errorf("create did not print the sidecar baseline %q:\n%s", wantBaseline, errs)
	}
	sidecar := "vak-dockerd-" + id
	removed := false
	f.cleanUp(t, labels, id, &removed)
	t.Cleanup(func() {
		if t.Failed() {
			o, _ := dockerOut("logs", "--tail", "30", sidecar)
			t.Logf("sidecar log:\n%s", o)
		}
	})
	if _, err := dockerOut("network", "connect", inet, "vak-gw-"+key); err != nil {
		t.Fatal(err)
	}

	t.Run("Baseline", func(t *testing.T) {
		checkSidecarBaseline(t, sidecar, wantBaseline)
		var rec struct {
			Docker         bool   `json:"docker"`
			DockerBaseline string `json:"docker_baseline"`
		}
		b, err := os.ReadFile(filepath.Join(xdg, "vak", "sessions", id+".json"))
		if err != nil || json.Unmarshal(b, &rec) != nil || !rec.Docker || rec.DockerBaseline != string(wantBaseline) {
			t.Errorf("the session record does not name the baseline %q: %v\n%s", wantBaseline, err, b)
		}
	})
	t.Run("HostFilesAreTheUsers", func(t *testing.T) {
		// Everything vak wrote on the host for this session and its
		// network (records, run dirs, the gateway env cache, the trust
		// dir) belongs to the user running it; none is left to root.
		seen := map[string]bool{}
		filepath.WalkDir(filepath.Join(xdg, "vak"), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Errorf("walk the state dir: %v", err)
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
				t.Errorf("%s is owned by uid %d, not the user (%d)", p, st.Uid, os.Getuid())
			}
			rel, _ := filepath.Rel(filepath.Join(xdg, "vak"), p)
			seen[strings.Split(rel, string(filepath.Separator))[0]] = true
			if strings.HasSuffix(p, "gateway-env") {
				seen["gateway-env"] = true
			}
			return nil
		})
		for _, want := range []string{"sessions", "proxynet", "gateway-env"} {
			if !seen[want] {
				t.Errorf("control: nothing under %s in the state dir (seen %v)", want, seen)
			}
		}
	})

	if out, err := sexec(id, `echo "$DOCKER_HOST"`); err != nil || out != "unix:///.vak/docker/docker.sock" {
		t.Fatalf("DOCKER_HOST in the command environment = %q, %v", out, err)
	}
	if out, err := sexec(id, "docker load -i inner.tar"); err != nil || !strings.Contains(out, "Loaded image") {
		t.Fatalf("docker load through the guard: %v\n%s", err, out)
	}
	// Control for the canary: it counts a connection from outside.
	if out, err := dockerOut("run", "--rm", "--network", inet, "--label", testenv.TestLabel+"=1", base, "probe", "connect", canIP+":80"); err != nil {
		t.Fatalf("control: the canary is unreachable from the test internet: %v %s", err, out)
	}
	if c := testenv.ResetCanary(t, canIP); c.TCP == 0 {
		t.Fatalf("control: the canary did not count a connection: %+v", c)
	}

	t.Run("InnerHTTPSAllowed", func(t *testing.T) {
		out, err := sexec(id, "docker run --rm "+base+" probe tls https://allowed.test/status/200")
		if err != nil || !strings.HasPrefix(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
			t.Fatalf("inner HTTPS to the allowed upstream: %v\n%s", err, out)
		}
	})
	t.Run("InnerDenied", func(t *testing.T) {
		// A denied name gets the gateway's block.
		out, err := sexec(id, "docker run --rm "+base+" probe tls https://denied.test/status/200")
		if err != nil || !strings.Contains(out, "OK 403") || !strings.Contains(out, "no rule matches") {
			t.Errorf("inner HTTPS to a denied name: %v\n%s", err, out)
		}
		// Direct connections to the canary (by name and address, TCP and
		// UDP) end at the gateway's forwarder or are dropped: the canary
		// counts nothing (its control above counted one).
		var probes []probeCase
		for _, c := range []string{
			"probe connect canary.test:80",
			"probe connect " + canIP + ":80",
			"probe connect " + canIP + ":443",
			"probe udp " + canIP + ":53",
			"probe udp " + canIP + ":443",
			"probe tls https://" + canIP + "/",
		} {
			probes = append(probes, probeCase{probe: c, logged: true})
		}
		out, err = sexec(id, "docker run --rm "+base+" sh -c "+shellquote.Quote(probeScript(probes)))
		checkProbes(t, "inner", probes, out, err)
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 {
			t.Errorf("the canary saw inner traffic: %+v", c)
		}
	})
	t.Run("UserNetworkEgress", func(t *testing.T) {
		if out, err := sexec(id, "docker network create vaktest-inner-net"); err != nil {
			t.Fatalf("docker network create: %v\n%s", err, out)
		}
		probes := []probeCase{
			{"probe tls https://allowed.test/status/200", true, `OK 200 issuer="vak gateway CA"`, false},
			{"probe tls https://denied.test/status/200", true, "OK 403", false},
			{"probe connect " + canIP + ":80", false, "", true},
			{"probe udp " + canIP + ":53", false, "", true},
		}
		out, err := sexec(id, "docker run --rm --network vaktest-inner-net "+base+" sh -c "+shellquote.Quote(probeScript(probes)))
		checkProbes(t, "user-defined network", probes, out, err)
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 {
			t.Errorf("the canary saw traffic from a user-defined network: %+v", c)
		}
	})
	t.Run("HostNetworkRefused", func(t *testing.T) {
		out, err := sexec(id, "docker run --rm --net host "+base+" true")
		if err == nil || !strings.Contains(out, "NetworkMode") {
			t.Fatalf("docker run --net host: %v\n%s", err, out)
		}
	})
	t.Run("DockerPsThroughTheGuard", func(t *testing.T) {
		if out, err := sexec(id, "docker run -d --name vaktest-ps "+base+" sleep 600"); err != nil {
			t.Fatalf("docker run -d: %v\n%s", err, out)
		}
		out, err := sexec(id, "docker ps --format '{{.Names}} {{.Label \"vak.session\"}}'")
		if err != nil || !strings.Contains(out, "vaktest-ps "+id) {
			t.Errorf("docker ps through the guard (the container, labelled with the session): %v\n%s", err, out)
		}
		// The raw socket is not in the session.
		if out, err := sexec(id, "docker -H unix://"+dockerd.RawSocket+" ps"); err == nil {
			t.Errorf("the raw socket answered in the session:\n%s", out)
		}
		if out, err := sexec(id, "docker rm -f vaktest-ps"); err != nil {
			t.Errorf("docker rm: %v\n%s", err, out)
		}
	})
	t.Run("PrivilegedRefused", func(t *testing.T) {
		out, err := sexec(id, "docker run --rm --privileged "+base+" true")
		if err == nil || !strings.Contains(out, "Privileged") {
			t.Fatalf("privileged run: %v\n%s", err, out)
		}
		if out, err := sexec(id, "docker run --rm "+base+" true"); err != nil {
			t.Fatalf("control: the same run without --privileged: %v\n%s", err, out)
		}
	})
	t.Run("ProtectedPathsStayReadOnly", func(t *testing.T) {
		// .vak is protected (existing at create: read-only in the session);
		// an inner container binding the workspace must not write it either.
		os.MkdirAll(filepath.Join(ws, "free"), 0o777)
		// As the test's user, so the file it leaves is the user's to remove.
		out, err := sexec(id, fmt.Sprintf("docker run --rm -u %d:%d -v ", os.Getuid(), os.Getgid())+ws+":/w "+base+" sh -c 'echo x > /w/.vak/evil; echo rc=$?; echo ok > /w/free/inner; echo rc2=$?'")
		if _, e := os.Stat(filepath.Join(ws, ".vak", "evil")); e == nil {
			t.Errorf("an inner container wrote the protected .vak: %v\n%s", err, out)
		}
		// Control: the same container writes an unprotected directory.
		if b, e := os.ReadFile(filepath.Join(ws, "free", "inner")); e != nil || strings.TrimSpace(string(b)) != "ok" {
			t.Errorf("control: the inner container could not write the workspace: %v %q\n%s", e, b, out)
		}
	})
	t.Run("ClassicBuild", func(t *testing.T) {
		os.MkdirAll(filepath.Join(ws, "build"), 0o777)
		os.WriteFile(filepath.Join(ws, "build", "Dockerfile"), []byte("FROM "+base+"\nRUN echo built-inside > /built\n"), 0o644)
		out, err := sexec(id, "DOCKER_BUILDKIT=0 docker build -q -t vaktest-inner-built build && docker run --rm vaktest-inner-built cat /built")
		if err != nil || !strings.Contains(out, "\nbuilt-inside") {
			t.Fatalf("classic docker build + run inside the session: %v\n%q", err, out)
		}
	})
	t.Run("PublishedPortOnLocalhost", func(t *testing.T) {
		out, err := sexec(id, "docker run -d --name web -p 18080:8080 "+base+" sh -c 'mkdir -p /w && echo hello-inner > /w/index.html && exec httpd -f -p 8080 -h /w'")
		if err != nil {
			t.Fatalf("docker run -p: %v\n%s", err, out)
		}
		// The agent reaches the published port on localhost (waiting for
		// the server to listen, not for a fixed time).
		out, err = sexec(id, "i=0; while [ $i -lt 100 ]; do wget -qO- http://localhost:18080/ && exit 0; i=$((i+1)); sleep 0.1; done; exit 1")
		if err != nil || !strings.Contains(out, "hello-inner") {
			t.Fatalf("the agent on localhost:18080: %v\n%s", err, out)
		}
		if out, err := sexec(id, "docker rm -f web"); err != nil {
			t.Fatalf("docker rm: %v\n%s", err, out)
		}
	})
	t.Run("DeadSidecar", func(t *testing.T) {
		if out, err := dockerOut("kill", sidecar); err != nil {
			t.Fatalf("kill the sidecar: %v %s", err, out)
		}
		out, err := sexec(id, "true")
		if err == nil || !strings.Contains(out, "Docker engine") || !strings.Contains(out, sidecar) {
			t.Fatalf("exec in a session whose sidecar is dead: %v\n%s", err, out)
		}
	})
	t.Run("GCTakesTheSidecar", func(t *testing.T) {
		out, errs, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", "gcd", "--network", "proxied", "--docker")...)
		if err != nil {
			t.Fatalf("second --docker session: %v\n%s", err, errs)
		}
		id2 := strings.TrimSpace(out)
		t.Cleanup(func() {
			vakCmd(append(append([]string{"session", "rm"}, labels...), id2)...)
			dockerOut("rm", "-f", "vak-dockerd-"+id2)
			dockerOut("volume", "rm", "-f", "vak-dockerd-"+id2+"-lib", "vak-dockerd-"+id2+"-sock")
		})
		if out := testenv.Docker(t, "ps", "-q", "--filter", "name=^vak-dockerd-"+id2+"$"); strings.TrimSpace(out) == "" {
			t.Fatal("control: the second session has no running sidecar")
		}
		// The session ends (its container stops): gc collects it and its
		// sidecar.
		testenv.Docker(t, "kill", "vak-session-"+id2)
		if _, errs, err := vakCmd(append([]string{"session", "gc"}, labels...)...); err != nil {
			t.Fatalf("session gc: %v %s", err, errs)
		}
		for _, kind := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}} {
			if out := testenv.Docker(t, append(kind, "--filter", "label=vak.session="+id2)...); strings.TrimSpace(out) != "" {
				t.Errorf("session gc left docker %v: %s", kind, out)
			}
		}
	})
	t.Run("RemoveTakesTheSidecar", func(t *testing.T) {
		if _, errs, err := vakCmd(append(append([]string{"session", "rm"}, labels...), id)...); err != nil {
			t.Fatalf("session rm: %v %s", err, errs)
		}
		removed = true
		for _, kind := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}} {
			if out := testenv.Docker(t, append(kind, "--filter", "label=vak.session="+id)...); strings.TrimSpace(out) != "" {
				t.Errorf("session rm left docker %v: %s", kind, out)
			}
		}
	})
}

// needSidecarImage skips (or, with VAK_REQUIRE_DOCKER=1, fails) a nested
// Docker test run by a user who cannot build the sidecar image when it is
// not built yet: building it needs root (debootstrap); reusing it does not.
func needSidecarImage(t *testing.T) {
	t.Helper()
	if os.Getuid() == 0 {
		return // vak session create --docker builds it when missing
	}
	tag := dockerd.DefaultRecipe.Tag()
	if _, err := dockerOut("image", "inspect", tag); err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, "the sidecar image "+tag+" is not built, and building it needs root: run `go test -run TestDockerSession ./internal/proxynet/` (or any `vak session create --docker`) as root first")
	}
}

// expectedBaseline is the sidecar baseline docker info calls for here.
func expectedBaseline(t *testing.T) dockerd.Baseline {
	t.Helper()
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	info, err := cli.Info(context.Background(), client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, why, err := dockerd.ChooseBaseline(info.Info.Runtimes, dockerd.RuntimeAuto)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sidecar baseline here: %s (%s)", b, why)
	return b
}

// checkSidecarBaseline checks the running sidecar against baseline b: its
// label, runtime, capabilities and security options as the engine
// recorded them, and its cgroup namespace private.
func checkSidecarBaseline(t *testing.T, sidecar string, b dockerd.Baseline) {
	t.Helper()
	out := testenv.Docker(t, "inspect", "-f", `{{index .Config.Labels "`+taskenv.LabelDockerBaseline+`"}}|{{.HostConfig.Runtime}}|{{json .HostConfig.CapAdd}}|{{json .HostConfig.CapDrop}}|{{len .HostConfig.SecurityOpt}}|{{.HostConfig.CgroupnsMode}}|{{.HostConfig.Privileged}}`, sidecar)
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 7 {
		t.Fatalf("inspect %s: %q", sidecar, out)
	}
	if f[0] != string(b) || f[5] != "private" || f[6] != "false" {
		t.Errorf("sidecar %s: label %q cgroupns %q privileged %s (want baseline %q, private, not privileged)", sidecar, f[0], f[5], f[6], b)
	}
	// The engine records capabilities with a CAP_ prefix, sorted.
	var recorded []string
	json.Unmarshal([]byte(f[2]), &recorded)
	for i, c := range recorded {
		recorded[i] = strings.TrimPrefix(c, "CAP_")
	}
	slices.Sort(recorded)
	want := slices.Sorted(slices.Values(dockerd.Capabilities))
	switch b {
	case dockerd.BaselineSysbox:
		if f[1] != dockerd.SysboxRuntime || f[2] != "null" || f[4] != "0" {
			t.Errorf("sysbox sidecar: runtime %q capadd %s security opts %s", f[1], f[2], f[4])
		}
	default:
		if f[1] != "runc" || !slices.Equal(recorded, want) || f[3] != `["ALL"]` || f[4] != "2" {
			t.Errorf("capability sidecar: runtime %q capadd %s capdrop %s security opts %s", f[1], f[2], f[3], f[4])
		}
	}
}
