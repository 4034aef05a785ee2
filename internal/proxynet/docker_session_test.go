package proxynet

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
// `vak session rm` removes the sidecar and its volumes.
func TestDockerSession(t *testing.T) {
	testenv.CheckLeftovers(t)
	if os.Getuid() != 0 {
		// The sidecar image build needs root (an existing image does not,
		// but the test cannot know it is current).
		testenv.Missing(t, testenv.EnvRequireDocker, "the nested Docker session test needs root (sidecar image)")
	}
	f := newNestedFixture(t, "")
	base, vak, inet, canIP, xdg, cfgFile, ws, key := f.base, f.vak, f.inet, f.canIP, f.xdg, f.cfgFile, f.ws, f.key
	os.MkdirAll(filepath.Join(ws, ".vak"), 0o777) // protected (sandbox.DefaultProtected)

	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	env := append(os.Environ(), "XDG_STATE_HOME="+xdg)
	vakCmd := func(args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(vak, append([]string{"--config", cfgFile}, args...)...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	sexec := func(id, script string) (string, error) {
		t.Helper()
		out, errs, err := vakCmd("session", "exec", id, "--", "sh", "-c", script)
		return strings.TrimSpace(out + errs), err
	}

	// --docker without the proxied network is refused, naming the flag.
	if _, errs, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", "nonet", "--network", "none", "--docker")...); err == nil || !strings.Contains(errs, "--docker") || !strings.Contains(errs, "proxied") {
		t.Fatalf("--docker --network none: %v %s", err, errs)
	}

	out, errs, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", "dind", "--network", "proxied", "--docker")...)
	if err != nil {
		t.Fatalf("session create --docker: %v\n%s", err, errs)
	}
	id := strings.TrimSpace(out)
	sidecar := "vak-dockerd-" + id
	removed := false
	t.Cleanup(func() {
		if !removed {
			vakCmd(append(append([]string{"session", "rm"}, labels...), id)...)
		}
		dockerOut("rm", "-f", sidecar)
		dockerOut("volume", "rm", "-f", sidecar+"-lib", sidecar+"-sock")
		if cli, err := taskenv.NewEngine(); err == nil {
			Teardown(context.Background(), cli, filepath.Join(xdg, "vak"), ws, true)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			o, _ := dockerOut("logs", "--tail", "30", sidecar)
			t.Logf("sidecar log:\n%s", o)
		}
	})
	if _, err := dockerOut("network", "connect", inet, "vak-gw-"+key); err != nil {
		t.Fatal(err)
	}

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
		for _, c := range []string{
			"probe connect canary.test:80",
			"probe connect " + canIP + ":80",
			"probe connect " + canIP + ":443",
			"probe udp " + canIP + ":53",
			"probe udp " + canIP + ":443",
			"probe tls https://" + canIP + "/",
		} {
			out, err := sexec(id, "docker run --rm "+base+" "+c)
			t.Logf("inner %s: %v %s", c, err, out)
		}
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 {
			t.Errorf("the canary saw inner traffic: %+v", c)
		}
	})
	t.Run("UserNetworkEgress", func(t *testing.T) {
		if out, err := sexec(id, "docker network create vaktest-inner-net"); err != nil {
			t.Fatalf("docker network create: %v\n%s", err, out)
		}
		run := "docker run --rm --network vaktest-inner-net " + base + " "
		if out, err := sexec(id, run+"probe tls https://allowed.test/status/200"); err != nil || !strings.HasPrefix(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
			t.Errorf("user-defined network, allowed host: %v\n%s", err, out)
		}
		if out, err := sexec(id, run+"probe tls https://denied.test/status/200"); err != nil || !strings.Contains(out, "OK 403") {
			t.Errorf("user-defined network, denied host: %v\n%s", err, out)
		}
		for _, c := range []string{"probe connect " + canIP + ":80", "probe udp " + canIP + ":53"} {
			out, err := sexec(id, run+c)
			t.Logf("user-defined network, %s: %v %s", c, err, out)
		}
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
		out, err := sexec(id, "docker run --rm -v "+ws+":/w "+base+" sh -c 'echo x > /w/.vak/evil; echo rc=$?; echo ok > /w/free/inner; echo rc2=$?'")
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
