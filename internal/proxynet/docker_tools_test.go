package proxynet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/taskenv"
	"vak/internal/testenv"
)

// DockerToolsImage is the session image of the nested Docker tool tests:
// Debian with docker.io's 20.10 CLI (BuildKit without buildx),
// docker-compose 1.29 and curl (scripts/build-docker-test-image.sh).
const DockerToolsImage = "vak-test-docker:bookworm"

// toolStepTimeout bounds one `vak session exec` step of the tool tests
// (the slowest, a build with its RUN step's probe matrix, takes well under
// a minute).
const toolStepTimeout = 5 * time.Minute

// hangState describes a session whose command did not return: the
// processes in the session container and in the sidecar, the inner
// daemon's containers and the sidecar's log.
func hangState(id string) string {
	if id == "" {
		return ""
	}
	var b strings.Builder
	sidecar := taskenv.SidecarPrefix + id
	for _, c := range [][]string{
		{"top", taskenv.SessionPrefix + id, "-eo", "pid,ppid,stat,etime,args"},
		{"top", sidecar, "-eo", "pid,ppid,stat,etime,args"},
		{"exec", sidecar, "docker", "-H", "unix://" + dockerd.RawSocket, "ps", "-a"},
		{"logs", "--tail", "40", sidecar},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		o, err := exec.CommandContext(ctx, "docker", c...).CombinedOutput()
		cancel()
		fmt.Fprintf(&b, "$ docker %s (%v)\n%s\n", strings.Join(c, " "), err, o)
	}
	return b.String()
}

// buildTCProbe builds testdata/tcprobe (a Testcontainers-go client, a
// module of its own) static into dir.
func buildTCProbe(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "tcprobe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = filepath.Join("testdata", "tcprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/tcprobe (testcontainers-go from the Go module proxy): %v\n%s", err, b)
	}
	os.Chmod(out, 0o755)
	return out
}

// The docker tools an agent uses, inside a `vak session create --docker`
// session and only through `vak session exec` (issue 14): BuildKit builds
// (DOCKER_BUILDKIT=1 with Debian's docker 20.10 CLI, no buildx) whose RUN
// steps egress through the gateway; docker-compose 1.29 with a two-service
// stack; a testcontainers-go program against DOCKER_HOST (the guard) with
// Ryuk disabled, and with Ryuk on (a stand-in image) whose reaper gets the
// reaper socket and removes what the program left; and a container
// binding the guard's socket, as Ryuk does, that gets the reaper socket.
func TestDockerSessionTools(t *testing.T) {
	testenv.CheckLeftovers(t)
	if os.Getuid() != 0 {
		testenv.Missing(t, testenv.EnvRequireDocker, "the nested Docker session test needs root (sidecar image)")
	}
	if _, err := dockerOut("image", "inspect", DockerToolsImage); err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, DockerToolsImage+" is not built: run scripts/build-docker-test-image.sh")
	}
	f := newNestedFixture(t, DockerToolsImage)
	base, vak, inet, canIP, xdg, cfgFile, ws, key := f.base, f.vak, f.inet, f.canIP, f.xdg, f.cfgFile, f.ws, f.key
	buildTCProbe(t, ws)

	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	env := append(os.Environ(), "XDG_STATE_HOME="+xdg)
	// Every vak command gets a deadline: a step that hangs (a build, an
	// attach through the guard) fails this test with the session's and
	// the sidecar's state instead of running into the package timeout.
	var id string
	vakCmd := func(args ...string) (string, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), toolStepTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, vak, append([]string{"--config", cfgFile}, args...)...)
		cmd.Env = env
		cmd.WaitDelay = 10 * time.Second
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ctx.Err() != nil {
			t.Errorf("vak %s: no answer after %v; output so far:\n%s%s\n%s", strings.Join(args, " "), toolStepTimeout, out.String(), errb.String(), hangState(id))
			err = errors.Join(err, ctx.Err())
		}
		return out.String(), errb.String(), err
	}
	sexec := func(id, script string) (string, error) {
		t.Helper()
		out, errs, err := vakCmd("session", "exec", id, "--", "sh", "-c", script)
		return strings.TrimSpace(out + errs), err
	}

	out, errs, err := vakCmd(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", "tools", "--network", "proxied", "--docker")...)
	if err != nil {
		t.Fatalf("session create --docker: %v\n%s", err, errs)
	}
	id = strings.TrimSpace(out)
	sidecar := taskenv.SidecarPrefix + id
	t.Cleanup(func() {
		vakCmd(append(append([]string{"session", "rm"}, labels...), id)...)
		dockerOut("rm", "-f", sidecar)
		dockerOut("volume", "rm", "-f", sidecar+"-lib", sidecar+"-sock")
		if cli, err := engine.New(); err == nil {
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
	if out, err := sexec(id, "docker version --format '{{.Client.Version}} {{.Server.Version}}' && docker-compose version --short"); err != nil {
		t.Fatalf("the session's docker tools: %v\n%s", err, out)
	} else {
		t.Logf("docker client/server, compose: %s", out)
	}
	if out, err := sexec(id, "docker load -i inner.tar"); err != nil || !strings.Contains(out, "Loaded image") {
		t.Fatalf("docker load through the guard: %v\n%s", err, out)
	}
	// Controls for the canary: it counts TCP, UDP, QUIC, DNS and ICMP from
	// outside.
	canaryControls(t, inet, base, canIP)
	probes := innerProbes(canIP, f.upIP)

	t.Run("BuildKit", func(t *testing.T) {
		// A RUN step has no CA injected (both builders start their steps
		// without the Engine API's container create): the Dockerfile brings
		// the CA from the context, copied from the session's SSL_CERT_FILE.
		bdir := mkdir(t, filepath.Join(ws, "bk"))
		os.Chmod(bdir, 0o777)
		writeProbeScript(t, bdir, probes)
		// One RUN step runs the whole matrix (its output kept in the image).
		os.WriteFile(filepath.Join(bdir, "Dockerfile"), []byte("FROM "+base+"\n"+
			"COPY ca.pem probes.sh /\n"+
			"RUN SSL_CERT_FILE=/ca.pem sh /probes.sh > /results 2>&1\n"), 0o644)
		if out, err := sexec(id, `cp "$SSL_CERT_FILE" bk/ca.pem`); err != nil {
			t.Fatalf("copy the CA into the build context: %v %s", err, out)
		}
		for _, b := range []struct{ name, build, tag string }{
			{"BuildKit", "DOCKER_BUILDKIT=1 docker build --progress plain", "vaktest-bk"},
			{"classic builder", "DOCKER_BUILDKIT=0 docker build", "vaktest-classic"},
		} {
			out, err := sexec(id, b.build+" -t "+b.tag+" bk 2>&1 | tail -5 && "+
				"docker image inspect -f '{{.Id}}' "+b.tag+" && docker run --rm "+b.tag+" cat /results")
			t.Logf("%s build and its RUN step's results:\n%s", b.name, out)
			if err != nil {
				t.Fatalf("%s build inside the session: %v", b.name, err)
			}
			if b.tag == "vaktest-bk" && (strings.Contains(out, "Step 1/") || !strings.Contains(out, "#")) {
				// The classic builder prints "Step 1/3", BuildKit "#1 ...".
				t.Errorf("the build did not run on BuildKit:\n%s", out)
			}
			checkProbes(t, "a "+b.name+" RUN step", probes, out, nil)
			if c := testenv.CanaryCounts(t, canIP); c.Total != 0 {
				t.Errorf("the canary saw a %s RUN step's traffic: %+v", b.name, c)
			}
		}
		// The build's network and context rules, through the real CLI.
		if out, err := sexec(id, "DOCKER_BUILDKIT=1 docker build --network host bk"); err == nil || !strings.Contains(out, "networkmode") {
			t.Errorf("BuildKit build --network host: %v\n%s", err, out)
		}
		if out, err := sexec(id, "DOCKER_BUILDKIT=1 docker build https://allowed.test/ctx.tar"); err == nil || !strings.Contains(out, "remote context") {
			t.Errorf("BuildKit build of a remote context: %v\n%s", err, out)
		}
		// BuildKit's own control API (/grpc: a client there could ask for
		// the network.host entitlement) is not an endpoint of the guard.
		if out, err := sexec(id, `curl -s -o /dev/null -w '%{http_code}' --unix-socket /.vak/docker/docker.sock -X POST http://docker/grpc`); err != nil || out != "403" {
			t.Errorf("POST /grpc through the guard: %v %s (want 403)", err, out)
		}
	})

	t.Run("Compose", func(t *testing.T) {
		cdir := mkdir(t, filepath.Join(ws, "stack"))
		os.Chmod(cdir, 0o777)
		os.WriteFile(filepath.Join(cdir, "docker-compose.yml"), []byte(`version: "2.4"
services:
  web:
    image: `+base+`
    command: ["sh", "-c", "mkdir -p /w && echo hello-compose > /w/index.html && exec httpd -f -p 8080 -h /w"]
  client:
    build: ./client
    depends_on: [web]
    command: ["sleep", "600"]
`), 0o644)
		// The client is built by compose (docker-py's build: the classic
		// builder's /build query through the guard).
		mkdir(t, filepath.Join(cdir, "client"))
		writeProbeScript(t, filepath.Join(cdir, "client"), probes)
		os.WriteFile(filepath.Join(cdir, "client", "Dockerfile"), []byte("FROM "+base+"\nCOPY probes.sh /\nRUN echo built-by-compose > /built\n"), 0o644)
		const compose = "cd stack && docker-compose -p vaktc "
		t.Cleanup(func() { sexec(id, compose+"down -t 1") })
		if out, err := sexec(id, compose+"up -d"); err != nil {
			t.Fatalf("docker-compose up -d: %v\n%s", err, out)
		}
		if out, err := sexec(id, compose+"exec -T client cat /built"); err != nil || out != "built-by-compose" {
			t.Errorf("the compose-built client service: %v %q", err, out)
		}
		// The client reaches web by its service name (waiting for httpd).
		out, err := sexec(id, compose+`exec -T client sh -c 'i=0; while [ $i -lt 100 ]; do probe http http://web:8080/ && exit 0; i=$((i+1)); sleep 0.1; done; exit 1'`)
		if err != nil || !strings.Contains(out, "hello-compose") {
			t.Errorf("the client service reaching web by name: %v\n%s", err, out)
		}
		// The matrix from the service (the CA is the one the guard injected).
		out, err = sexec(id, compose+"exec -T client sh /probes.sh")
		t.Logf("compose client's egress matrix:\n%s", out)
		if err != nil {
			t.Fatalf("compose exec: %v", err)
		}
		checkProbes(t, "a compose service", probes, out, nil)
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 {
			t.Errorf("the canary saw a compose service's traffic: %+v", c)
		}
		if out, err := sexec(id, compose+"down -t 1"); err != nil {
			t.Fatalf("docker-compose down: %v\n%s", err, out)
		}
		out, err = sexec(id, "docker ps -aq --filter label=com.docker.compose.project=vaktc; docker network ls -q --filter name=vaktc")
		if err == nil && out == "" {
			// The built image stays (compose down keeps images): control
			// that the listing above can see something.
			if img, e := sexec(id, "docker images -q vaktc_client"); e != nil || img == "" {
				t.Errorf("control: the compose-built image is not listed: %v %q", e, img)
			}
		}
		if err != nil || out != "" {
			t.Errorf("docker-compose down left containers or networks: %v %q", err, out)
		}
	})

	t.Run("Testcontainers", func(t *testing.T) {
		out, err := sexec(id, "TESTCONTAINERS_RYUK_DISABLED=true ./tcprobe run "+base)
		t.Logf("tcprobe run:\n%s", out)
		if err != nil || !regexp.MustCompile(`(?m)^container [0-9a-f]+ endpoint http://\S+ status 200 body hello-testcontainers$`).MatchString(out) {
			t.Fatalf("testcontainers-go inside the session: %v", err)
		}
		m := regexp.MustCompile(`(?m)^terminated ([0-9a-f]+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatal("testcontainers-go did not terminate its container")
		}
		if out, err := sexec(id, "docker ps -aq --no-trunc --filter id="+m[1]); err != nil || out != "" {
			t.Errorf("the terminated container is still there: %v %q", err, out)
		}
	})

	t.Run("TestcontainersWithRyuk", func(t *testing.T) {
		// Ryuk's image is not buildable here: a stand-in speaking its
		// protocol (tcprobe ryuk), tagged as the image testcontainers-go
		// runs, built inside the session.
		rdir := mkdir(t, filepath.Join(ws, "ryuk"))
		os.Chmod(rdir, 0o777)
		os.WriteFile(filepath.Join(rdir, "Dockerfile"), []byte("FROM "+base+"\nCOPY tcprobe /tcprobe\nENTRYPOINT [\"/tcprobe\", \"ryuk\"]\n"), 0o644)
		if out, err := sexec(id, "cp tcprobe ryuk/ && DOCKER_BUILDKIT=0 docker build -q -t testcontainers/ryuk:0.14.0 ryuk"); err != nil {
			t.Fatalf("build the Ryuk stand-in: %v\n%s", err, out)
		}
		// Ryuk on: testcontainers-go starts the reaper with DOCKER_HOST's
		// path bound at /var/run/docker.sock; the program then exits
		// without terminating its container, which the reaper must remove.
		out, err := sexec(id, "RYUK_RECONNECTION_TIMEOUT=20s ./tcprobe leave "+base)
		t.Logf("tcprobe leave:\n%s", out)
		m := regexp.MustCompile(`(?m)^container ([0-9a-f]+) endpoint \S+ status 200 body hello-testcontainers$`).FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("testcontainers-go with Ryuk on: %v", err)
		}
		left := m[1]
		// The reaper got the reaper socket, not the guard's.
		binds, err := sexec(id, "docker inspect -f '{{json .HostConfig.Binds}}' $(docker ps -q --filter label=org.testcontainers.ryuk=true)")
		if err != nil || !strings.Contains(binds, taskenv.ContainerReaperSocket+":/var/run/docker.sock") || strings.Contains(binds, taskenv.ContainerDockerSocket+":") {
			t.Fatalf("the Ryuk container's binds: %v %s", err, binds)
		}
		// Control: the container is still there until the reaper acts.
		if out, err := sexec(id, "docker ps -aq --no-trunc --filter id="+left); err != nil || out == "" {
			t.Fatalf("control: the container testcontainers left is already gone: %v %q", err, out)
		}
		// The reaper removes it through the reaper socket (list by label,
		// remove), once its client has been gone for 20 s.
		if out, err := sexec(id, "i=0; while [ $i -lt 600 ]; do [ -z \"$(docker ps -aq --filter id="+left+")\" ] && exit 0; i=$((i+1)); sleep 0.2; done; docker ps -a; exit 1"); err != nil {
			t.Fatalf("the reaper did not remove the container testcontainers left: %v\n%s", err, out)
		}
	})

	t.Run("ReaperGetsTheFilteredSocket", func(t *testing.T) {
		reaperLines := func(out string) map[string]string {
			res := map[string]string{}
			for _, l := range strings.Split(out, "\n") {
				if k, v, ok := strings.Cut(l, " "); ok {
					res[k] = v
				}
			}
			return res
		}
		// Control: the same requests on the guard socket itself (the
		// agent's DOCKER_HOST) may create a container and exec.
		if out, err := sexec(id, "docker run -d --name vaktest-victim0 "+base+" sleep 600"); err != nil {
			t.Fatalf("start a container: %v %s", err, out)
		}
		out, err := sexec(id, "./tcprobe reaper vaktest-victim0 "+taskenv.ContainerDockerSocket)
		ctl := reaperLines(out)
		if err != nil || strings.HasPrefix(ctl["create-plain"], "403") || !strings.HasPrefix(ctl["exec"], "201") || !strings.HasPrefix(ctl["create"], "403") || !strings.HasPrefix(ctl["remove"], "204") {
			t.Fatalf("control: the guard socket (create allowed, exec allowed, privileged denied): %v\n%s", err, out)
		}
		// A container binding DOCKER_HOST's path at /var/run/docker.sock
		// (what Testcontainers does for Ryuk) gets the reaper socket: no
		// create, no exec, but list and remove.
		if out, err := sexec(id, "docker run -d --name vaktest-victim "+base+" sleep 600"); err != nil {
			t.Fatalf("start a container: %v %s", err, out)
		}
		out, err = sexec(id, "docker run --rm -v "+taskenv.ContainerDockerSocket+":/var/run/docker.sock -v "+ws+"/tcprobe:/tcprobe:ro "+base+" /tcprobe reaper vaktest-victim")
		t.Logf("reaper probe:\n%s", out)
		got := reaperLines(out)
		if err != nil {
			t.Fatalf("reaper probe: %v", err)
		}
		for k, want := range map[string]string{"ping": "200", "list": "200", "create": "403", "create-plain": "403", "exec": "403", "remove": "204"} {
			if !strings.HasPrefix(got[k], want) {
				t.Errorf("reaper socket %s = %q, want %s", k, got[k], want)
			}
		}
		if !strings.Contains(got["create-plain"], "reaper socket") {
			t.Errorf("the bound socket is not the reaper socket: create-plain = %q", got["create-plain"])
		}
		if out, err := sexec(id, "docker ps -aq --filter name=^vaktest-victim$"); err != nil || out != "" {
			t.Errorf("the reaper could not remove the container: %v %q", err, out)
		}
	})
}
