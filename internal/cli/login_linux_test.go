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

	"vak/internal/agenthome"
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

// TestLoginImport: `vak login import claude` moves a host login into the
// store and writes the phantom login into the workspace's agent home; a
// native proxied run then reaches the API with the real token while the
// home holds only phantoms; `vak login rm` makes the phantom worthless.
// The import never writes through a link the agent left in its home, and
// refuses a fresh home, a missing [logins] entry and a file with no token.
func TestLoginImport(t *testing.T) {
	testenv.RequireLandlock(t)
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Cleanup(func() { stopOnDemand(t) })
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	var mu sync.Mutex
	var seen []string
	up := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.2", 0), ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		io.WriteString(w, "API-OK\n")
	}), "api.anthropic.com")
	const realAT = "sk-ant-oat01-HOSTREALx0123456789abcdefghijklmnopqrstuvwxyz"
	const realRT = "sk-ant-ort01-HOSTREALx0123456789abcdefghijklmnopqrstuvwxyz"
	src := filepath.Join(t.TempDir(), "credentials.json")
	os.WriteFile(src, []byte(`{"claudeAiOauth":{"accessToken":"`+realAT+`","refreshToken":"`+realRT+`","expiresAt":4102444800000,"scopes":["user:inference"]}}`), 0o600)
	base := `version = 1
[network]
policy = "proxied"
[[network.rules]]
hosts = ["api.anthropic.com"]
cidrs = ["127.0.0.2/32"]
[network.dns.overrides]
"api.anthropic.com" = ["127.0.0.2"]
[gateway]
extra_ca_bundles = [` + strconv.Quote(caFile) + `]
`
	ws := tempWorkspace(t)
	// Refusals first: no [logins] entry, a fresh home, a file with no token.
	noLogin := writeConfig(t, base)
	if code, _, errs := vakMain(t, noLogin, "login", "import", "claude", "--from", src, "-w", ws, "--home", "workspace"); code != ExitConfig || !strings.Contains(errs, `provider = "anthropic"`) {
		t.Errorf("import without [logins]: exit %d %s", code, errs)
	}
	cfg := writeConfig(t, base+"[logins.claude]\nprovider = \"anthropic\"\n")
	if code, _, errs := vakMain(t, cfg, "login", "import", "claude", "--from", src, "-w", ws, "--home", "fresh"); code != ExitUsage || !strings.Contains(errs, "fresh") {
		t.Errorf("import into a fresh home: exit %d %s", code, errs)
	}
	empty := filepath.Join(t.TempDir(), "empty.json")
	os.WriteFile(empty, []byte(`{}`), 0o600)
	if code, _, errs := vakMain(t, cfg, "login", "import", "claude", "--from", empty, "-w", ws, "--home", "workspace"); code != ExitUsage || !strings.Contains(errs, "no login token") {
		t.Errorf("import of a file without a login: exit %d %s", code, errs)
	}
	// The agent planted its home's .claude as a link to a host directory:
	// the import must not write through it.
	home, err := agenthome.Ensure(agenthome.Choice{Kind: agenthome.Workspace}, ws)
	if err != nil {
		t.Fatal(err)
	}
	victim := t.TempDir()
	if err := os.Symlink(victim, filepath.Join(home, ".claude")); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := vakMain(t, cfg, "login", "import", "claude", "--from", src, "-w", ws, "--home", "workspace"); code == 0 {
		t.Error("the import wrote through a link in the home")
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Fatalf("the import wrote into the link's target: %v", ents)
	}
	os.Remove(filepath.Join(home, ".claude"))

	code, out, errs := vakMain(t, cfg, "login", "import", "claude", "--from", src, "-w", ws, "--home", "workspace")
	if code != 0 || !strings.Contains(out, "imported 2 token(s) of login claude") {
		t.Fatalf("import: exit %d\n%s\n%s", code, out, errs)
	}
	data, err := os.ReadFile(filepath.Join(home, ".claude", ".credentials.json"))
	if err != nil || strings.Contains(string(data), "HOSTREAL") || !strings.Contains(string(data), `"sk-ant-oat01-`) {
		t.Fatalf("the home's login: %s %v", data, err)
	}
	if code, out, _ := vakMain(t, cfg, "login", "ls"); code != 0 || !strings.Contains(out, "claude") || !strings.Contains(out, "access_token 1, refresh_token 1") || strings.Contains(out, "HOSTREAL") {
		t.Errorf("login ls: %d\n%s", code, out)
	}
	api := "https://api.anthropic.com:" + strconv.Itoa(up.Port()) + "/v1/messages"
	script := `at=$(sed -n 's/.*"accessToken": *"\([^"]*\)".*/\1/p' "$HOME/.claude/.credentials.json"); curl -sS --max-time 10 -H "Authorization: Bearer $at" ` + api + `; grep -rc HOSTREAL "$HOME" | grep -v ':0$' | wc -l`
	code, out, errs = vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--network", "proxied", "--home", "workspace", "--", "sh", "-c", script)
	mu.Lock()
	got := strings.Join(seen, "\n")
	mu.Unlock()
	if code != 0 || !strings.Contains(out, "API-OK") || got != "Bearer "+realAT || strings.Contains(out, "HOSTREAL") || !strings.HasSuffix(strings.TrimSpace(out), "0") {
		t.Fatalf("run with the imported login: exit %d, the API saw %q\n%s\n%s", code, got, out, errs)
	}
	if code, out, _ := vakMain(t, cfg, "login", "rm", "claude"); code != 0 || !strings.Contains(out, "removed 2 token(s)") {
		t.Fatalf("login rm: %d %s", code, out)
	}
	// The gateway reloaded: the phantom is a plain string now, never the
	// real token.
	vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--network", "proxied", "--home", "workspace", "--", "sh", "-c", script)
	mu.Lock()
	defer mu.Unlock()
	if last := seen[len(seen)-1]; strings.Contains(last, "HOSTREAL") {
		t.Errorf("after login rm the API still got the real token")
	}
}

// TestDockerLoginImport: a login imported on the host reaches the gateway
// container of a docker-backed run (the host store's tokens go into its
// volume and it merges them into its own store): the agent home holds only
// phantoms, the API gets the real token. `vak login rm` makes the phantom
// worthless at the next run, on the same gateway (merged removal, no
// rebuild), and importing again makes it work again.
func TestDockerLoginImport(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	img := testenv.Image(t)
	m := newDockerMock(t, "login-import")
	ws, mockIP, label, caFile, ca := m.ws, m.ip, m.label, m.caFile, m.ca
	var mu sync.Mutex
	var seen []string
	up := egresstest.StartTLS(t, egresstest.Listen(t, mockIP, 0), ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		io.WriteString(w, "API-OK\n")
	}), "api.anthropic.com")
	lastSeen := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return ""
		}
		return seen[len(seen)-1]
	}
	cfg := writeConfig(t, fmt.Sprintf(`version = 1
[sandbox]
backend = "docker"
image = %q
[session]
run_network_idle = "10m"
[network]
policy = "proxied"
[[network.rules]]
hosts = ["api.anthropic.com"]
cidrs = ["%[2]s/32"]
[network.dns.overrides]
"api.anthropic.com" = ["%[2]s"]
[gateway]
extra_ca_bundles = [%[3]q]
[logins.claude]
provider = "anthropic"
`, img, mockIP, caFile))
	login := func(gen string) string {
		at := "sk-ant-oat01-HOSTREAL" + gen + "x0123456789abcdefghijklmnopqrstuvwxyz"
		src := filepath.Join(t.TempDir(), "credentials.json")
		os.WriteFile(src, []byte(`{"claudeAiOauth":{"accessToken":"`+at+`","refreshToken":"sk-ant-ort01-HOSTREAL`+gen+`x0123456789abcdefghijklmnopqrstuvwxyz","expiresAt":4102444800000,"scopes":["user:inference"]}}`), 0o600)
		if code, out, errs := vakMain(t, cfg, "login", "import", "claude", "--from", src, "-w", ws, "--home", "workspace"); code != 0 || !strings.Contains(out, "imported 2 token(s)") {
			t.Fatalf("import: exit %d\n%s\n%s", code, out, errs)
		}
		return at
	}
	api := "https://api.anthropic.com:" + strconv.Itoa(up.Port()) + "/v1/messages"
	script := `at=$(sed -n 's/.*"accessToken": *"\([^"]*\)".*/\1/p' "$HOME/.claude/.credentials.json"); ./probe http -H "Authorization: Bearer $at" ` + api + ` 10s; echo; echo "REAL in the home: $(grep -rl HOSTREAL "$HOME" | wc -l)"`
	run := func() (string, string) {
		t.Helper()
		code, out, errs := vakMain(t, cfg, "run", "--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", label,
			"-w", ws, "--network", "proxied", "--home", "workspace", "--", "sh", "-c", script)
		if strings.Contains(out, "HOSTREAL") || strings.Contains(errs, "HOSTREAL") {
			t.Fatalf("a real token reached the sandbox or vak's output:\n%s\n%s", out, errs)
		}
		if code != 0 || !strings.Contains(out, "REAL in the home: 0") {
			t.Fatalf("vak run: exit %d\n%s\n%s", code, out, errs)
		}
		return out, errs
	}
	gateway := func() string {
		return testenv.Docker(t, "ps", "-q", "--filter", "label="+label, "--filter", "label=vak.kind=proxynet", "--filter", "name=vak-gw-")
	}

	real1 := login("A")
	if out, errs := run(); !strings.Contains(out, "API-OK") || lastSeen() != "Bearer "+real1 {
		t.Fatalf("run with the imported login: the API saw %q\n%s\n%s", lastSeen(), out, errs)
	}
	gw := gateway()
	if gw == "" {
		t.Fatal("no gateway container kept warm after the run")
	}
	if code, out, _ := vakMain(t, cfg, "login", "rm", "claude"); code != 0 || !strings.Contains(out, "removed 2 token(s)") {
		t.Fatalf("login rm: %d %s", code, out)
	}
	if out, errs := run(); strings.Contains(lastSeen(), "HOSTREAL") || gateway() != gw {
		t.Fatalf("after login rm (gateway %s, now %s) the API saw %q\n%s\n%s", gw, gateway(), lastSeen(), out, errs)
	}
	real2 := login("B")
	if out, errs := run(); !strings.Contains(out, "API-OK") || lastSeen() != "Bearer "+real2 || gateway() != gw {
		t.Fatalf("run with the login imported again: the API saw %q (gateway %s, now %s)\n%s\n%s", lastSeen(), gw, gateway(), out, errs)
	}
}
