package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"vak/internal/egress/egresstest"
	"vak/internal/testenv"
)

// TestNativeProxiedLoginPhantoms: an OAuth login done inside `vak run
// --network proxied` (curl against a mock provider configured as
// [logins.corp]) leaves only phantoms in the sandbox: the client stores
// the token response in the workspace, and neither that file, the
// command's output, its environment nor anything else in the workspace
// holds a real token; the access phantom reaches the API host as the real
// token, the refresh phantom reaches the token endpoint as the real
// refresh token, and the access phantom toward another allowed host is
// refused before it arrives there.
func TestNativeProxiedLoginPhantoms(t *testing.T) {
	testenv.RequireLandlock(t)
	proxiedLoginPhantoms(t, "landlock")
}

// TestDockerProxiedLoginPhantoms is TestNativeProxiedLoginPhantoms on the
// docker backend: the gateway is the topology's gateway container (its
// login store in the container's state), the client the probe tool in the
// test image; the mock provider listens on the host side of a test
// network.
func TestDockerProxiedLoginPhantoms(t *testing.T) {
	proxiedLoginPhantoms(t, "docker")
}

// proxiedLoginPhantoms is the login test on backend.
func proxiedLoginPhantoms(t *testing.T, backend string) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	docker := backend == "docker"
	mockIP, sandboxCfg := "127.0.0.2", ""
	var runArgs []string
	ws := tempWorkspace(t)
	if docker {
		img := testenv.Image(t)
		netName := testenv.CreateNetwork(t, testenv.UniqueName("login-mock"))
		mockIP = testenv.Docker(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", netName)
		label := "vak.test.run=login-docker-" + testenv.TestID(t)
		runArgs = []string{"--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", label}
		t.Cleanup(func() { removeLabelled(t, label) })
		sandboxCfg = "[sandbox]\nbackend = \"docker\"\nimage = " + strconv.Quote(img) + "\n[session]\nrun_network_idle = \"0\"\n"
		data, err := os.ReadFile(testenv.Probe(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "probe"), data, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Cleanup(func() { stopOnDemand(t) })
	}
	ca := egresstest.NewCA(t)
	caDir := t.TempDir()
	os.Chmod(caDir, 0o755) // the gateway container reads it as another uid
	caFile := ca.WritePEM(t, caDir)
	os.Chmod(caFile, 0o644)
	var mu sync.Mutex
	gen := 0
	var seen []string
	tokens := func(g int) (string, string) {
		return fmt.Sprintf("corp-at-REAL%02d-%s", g, strings.Repeat("k", 32)), fmt.Sprintf("corp-rt-REAL%02d-%s", g, strings.Repeat("q", 32))
	}
	up := egresstest.StartTLS(t, egresstest.Listen(t, mockIP, 0), ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		host := strings.Split(r.Host, ":")[0]
		if host == "auth.corp.test" {
			var req map[string]string
			json.NewDecoder(r.Body).Decode(&req)
			seen = append(seen, "token "+req["grant_type"]+" "+req["refresh_token"])
			if _, cur := tokens(gen); req["grant_type"] == "refresh_token" && req["refresh_token"] != cur {
				w.WriteHeader(400)
				io.WriteString(w, `{"error":"invalid_grant"}`)
				return
			}
			gen++
			a, rt := tokens(gen)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"access_token":%q,"refresh_token":%q,"token_type":"Bearer","expires_in":3600}`, a, rt)
			return
		}
		seen = append(seen, host+" "+r.Header.Get("Authorization"))
		fmt.Fprintf(w, "API-%s-OK\n", host)
	}), "auth.corp.test", "api.corp.test", "other.corp.test")
	cfg := writeConfig(t, fmt.Sprintf(`version = 1
%s[network]
policy = "proxied"
[[network.rules]]
name = "corp"
hosts = ["auth.corp.test", "api.corp.test", "other.corp.test"]
cidrs = ["%[2]s/32"]
[network.dns.overrides]
"auth.corp.test" = ["%[2]s"]
"api.corp.test" = ["%[2]s"]
"other.corp.test" = ["%[2]s"]
[gateway]
extra_ca_bundles = [%[3]q]
[logins.corp]
token_urls = ["https://auth.corp.test/oauth/token"]
api_hosts = ["api.corp.test"]
`, sandboxCfg, mockIP, caFile))
	base := "https://%s:" + strconv.Itoa(up.Port())
	tok := fmt.Sprintf(base, "auth.corp.test") + "/oauth/token"
	field := func(f string) string {
		return `$(sed -n 's/.*"` + f + `":"\([^"]*\)".*/\1/p' .login/creds.json)`
	}
	// The client: curl on the native backend; in the test image, which has
	// no curl, the probe tool (its output is "OK STATUS BODY").
	post := func(url, body string) string {
		if docker {
			return `./probe http -H 'Content-Type: application/json' -d '` + body + `' ` + url + ` 10s | sed 's/^OK [0-9]* //'`
		}
		return `curl -sS --max-time 10 -H 'Content-Type: application/json' -d '` + body + `' ` + url
	}
	get := func(url, auth string) string {
		if docker {
			return `./probe http -H "Authorization: Bearer ` + auth + `" ` + url + ` 10s`
		}
		return `curl -sS --max-time 10 -H "Authorization: Bearer ` + auth + `" ` + url
	}
	script := `mkdir -p .login
` + post(tok, `{"grant_type":"authorization_code","code":"c"}`) + ` > .login/creds.json
echo "ACCESS=` + field("access_token") + `"
` + get(fmt.Sprintf(base, "api.corp.test")+"/v1/me", field("access_token")) + `
` + get(fmt.Sprintf(base, "other.corp.test")+"/v1/me", field("access_token")) + `; echo
rt=` + field("refresh_token") + `
` + post(tok, `{"grant_type":"refresh_token","refresh_token":"'"$rt"'"}`) + ` > .login/creds2.json && mv .login/creds2.json .login/creds.json
` + get(fmt.Sprintf(base, "api.corp.test")+"/v1/me", field("access_token")) + `
echo "REAL in the workspace: $(grep -rlE 'REAL[0-9]{2}-' . | wc -l), in the environment: $(env | grep -cE 'REAL[0-9]{2}-')"
`
	args := append(append([]string{"run"}, runArgs...), "-w", ws, "--backend", backend, "--network", "proxied", "--", "sh", "-c", script)
	code, out, errs := vakMain(t, cfg, args...)
	if code != 0 {
		t.Fatalf("vak run: exit %d\n%s\n%s", code, out, errs)
	}
	if strings.Contains(out, "REAL0") || strings.Contains(errs, "REAL0") {
		t.Fatalf("a real token reached the sandbox or vak's output:\n%s\n%s", out, errs)
	}
	if !strings.Contains(out, "ACCESS=corp-at-") || strings.Count(out, "API-api.corp.test-OK") != 2 ||
		!strings.Contains(out, "in request header Authorization to other.corp.test is not allowed") ||
		!strings.Contains(out, "REAL in the workspace: 0, in the environment: 0") {
		t.Fatalf("want the login, two API calls, the phantom refused toward other.corp.test and nothing real in the sandbox:\n%s\n%s", out, errs)
	}
	a1, r1 := tokens(1)
	a2, _ := tokens(2)
	mu.Lock()
	want := []string{"token authorization_code ", "api.corp.test Bearer " + a1, "token refresh_token " + r1, "api.corp.test Bearer " + a2}
	got := strings.Join(seen, "\n")
	mu.Unlock()
	if got != strings.Join(want, "\n") {
		t.Errorf("the provider saw:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	data, err := os.ReadFile(filepath.Join(ws, ".login", "creds.json"))
	if err != nil || strings.Contains(string(data), "REAL") || !strings.Contains(string(data), "corp-rt-") {
		t.Errorf("the client's stored login: %s %v", data, err)
	}
}
