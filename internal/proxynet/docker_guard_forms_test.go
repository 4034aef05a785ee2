package proxynet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/dockerd"
	"vak/internal/shellquote"
	"vak/internal/taskenv"
	"vak/internal/testenv"
)

// The engine reads parameters from a form body as well as from the query;
// the guard checks the query. Through vak's own path (a --docker session,
// `vak session exec`, the agent's DOCKER_HOST), requests that carry the
// parameters the guard refuses in the query (an import from a URL, a
// remote build context with host networking) in an urlencoded or a
// multipart body, in the Content-Type spellings the engine's net/http
// takes for a form, are refused by the guard, and the URL they name is
// never fetched: the hermetic upstream (allowed.test, which the gateway
// lets the engine reach) records none of their paths. Controls: the same
// bytes sent to the raw socket from inside the sidecar make the engine
// (Debian's 20.10) fetch every one of those paths, so the upstream counts
// and the attacks are real; and through the guard, docker import from
// stdin, docker build and a pull (which reaches allowed.test's registry
// API) keep working.
func TestDockerSessionGuardFormBodies(t *testing.T) {
	e := newDindEnv(t)
	id := e.session(e.cfg, "forms")
	dir := filepath.Join(e.ws, "forms")
	mkdir(t, dir)
	// The host's static probe, in the workspace: the session and the
	// sidecar (which share the workspace path) send each request with it,
	// byte for byte (probe unix SOCKET FILE).
	probe, err := os.ReadFile(testenv.Probe(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe"), probe, 0o755); err != nil {
		t.Fatal(err)
	}
	send := func(sock, name string) []string {
		return []string{filepath.Join(dir, "probe"), "unix", sock, filepath.Join(dir, name+".http")}
	}
	// Debian's 20.10 /build peeks at the body (up to 4 KiB) before its
	// handler parses the form, so a short form body is swallowed there;
	// padding carries the parameters past it (an unused field; a
	// multipart preamble, in short lines as the multipart reader wants).
	pad := strings.Repeat("a", 8192)
	const url = "https://allowed.test/"
	form := "Content-Type: application/x-www-form-urlencoded"
	attacks := []struct{ name, path, raw string }{
		{"import-urlencoded", "form-import.tar", testenv.RawRequest("POST", "/v1.41/images/create?repo=vaktest-form", []string{form}, "fromSrc="+url+"form-import.tar", false)},
		{"import-urlencoded-chunked-charset", "form-import-chunked.tar", testenv.RawRequest("POST", "/v1.41/images/create?repo=vaktest-form", []string{"Content-Type: Application/X-WWW-Form-URLEncoded; charset=UTF-8"}, "fromSrc="+url+"form-import-chunked.tar", true)},
		{"import-urlencoded-dotted-capital-i", "form-import-dotted.tar", testenv.RawRequest("POST", "/v1.41/images/create?repo=vaktest-form", []string{"Content-Type: applİcation/x-www-form-urlencoded"}, "fromSrc="+url+"form-import-dotted.tar", false)},
		{"build-remote-urlencoded", "form-build.tar", testenv.RawRequest("POST", "/v1.41/build?t=vaktest-form", []string{form}, "pad="+pad+"&networkmode=host&remote="+url+"form-build.tar", false)},
		{"build-remote-multipart", "multipart-build.tar", testenv.RawRequest("POST", "/v1.41/build?t=vaktest-form", []string{"Content-Type: multipart/form-data; boundary=vak"}, strings.Repeat("a\r\n", 4096)+testenv.MultipartForm("vak", "remote", url+"multipart-build.tar"), false)},
	}
	for _, a := range attacks {
		if err := os.WriteFile(filepath.Join(dir, a.name+".http"), []byte(a.raw), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fetched := func() map[string]int {
		got := map[string]int{}
		for _, r := range testenv.UpstreamRequests(t, e.upIP).Requests {
			got[strings.TrimPrefix(r.Path, "/")]++
		}
		return got
	}
	testenv.ResetUpstream(t, e.upIP)
	t.Run("Refused", func(t *testing.T) {
		for _, a := range attacks {
			out, err := e.exec(id, shellquote.Join(send(taskenv.ContainerDockerSocket, a.name)))
			if err != nil || !strings.Contains(out, " 403 ") || !strings.Contains(out, "vak dockerguard: denied") || !strings.Contains(out, "send parameters in the query") {
				t.Errorf("%s through the guard: %v\n%s", a.name, err, out)
			}
		}
		got := fetched()
		for _, a := range attacks {
			if got[a.path] != 0 {
				t.Errorf("%s: the engine fetched %s %d time(s) through the guard", a.name, a.path, got[a.path])
			}
		}
	})
	t.Run("ControlRawSocket", func(t *testing.T) {
		for _, a := range attacks {
			out, err := dockerOut(append([]string{"exec", e.sidecar(id)}, send(dockerd.RawSocket, a.name)...)...)
			t.Logf("%s through the raw socket: %v\n%s", a.name, err, out)
		}
		got := fetched()
		for _, a := range attacks {
			if got[a.path] == 0 {
				t.Errorf("control: %s through the raw socket did not make the engine fetch %s (fetched: %v): the test shows nothing", a.name, a.path, got)
			}
		}
		e.raw(id, "image", "rm", "-f", "vaktest-form")
	})
	t.Run("AllowedStillWork", func(t *testing.T) {
		script := `set -e; mkdir -p forms/ctx; echo imported > forms/ctx/f
tar -C forms/ctx -c f | docker import - vaktest-imported:1
printf 'FROM ` + e.base + `\nCOPY f /f\nRUN cat /f\n' > forms/ctx/Dockerfile
DOCKER_BUILDKIT=0 docker build -t vaktest-built:1 forms/ctx
docker run --rm vaktest-built:1 cat /f`
		if out, err := e.exec(id, script); err != nil || !strings.Contains(out, "imported") {
			t.Fatalf("docker import -, build and run through the guard: %v\n%s", err, out)
		}
		testenv.ResetUpstream(t, e.upIP)
		out, _ := e.exec(id, "docker pull allowed.test/vaktest/none:1")
		if strings.Contains(out, "vak dockerguard") {
			t.Errorf("the guard refused a pull: %s", out)
		}
		if got := fetched(); got["v2/"] == 0 {
			t.Errorf("control: the pull did not reach allowed.test's registry API (fetched %v): %s", got, out)
		}
	})
}
