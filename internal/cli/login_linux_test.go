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
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Cleanup(func() { stopOnDemand(t) })
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	var mu sync.Mutex
	gen := 0
	var seen []string
	tokens := func(g int) (string, string) {
		return fmt.Sprintf("corp-at-REAL%02d-%s", g, strings.Repeat("k", 32)), fmt.Sprintf("corp-rt-REAL%02d-%s", g, strings.Repeat("q", 32))
	}
	up := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.2", 0), ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
[network]
policy = "proxied"
[[network.rules]]
name = "corp"
hosts = ["auth.corp.test", "api.corp.test", "other.corp.test"]
cidrs = ["127.0.0.2/32"]
[network.dns.overrides]
"auth.corp.test" = ["127.0.0.2"]
"api.corp.test" = ["127.0.0.2"]
"other.corp.test" = ["127.0.0.2"]
[gateway]
extra_ca_bundles = [%q]
[logins.corp]
token_urls = ["https://auth.corp.test/oauth/token"]
api_hosts = ["api.corp.test"]
`, caFile))
	ws := tempWorkspace(t)
	base := "https://%s:" + strconv.Itoa(up.Port())
	tok := fmt.Sprintf(base, "auth.corp.test") + "/oauth/token"
	field := func(f string) string {
		return `$(sed -n 's/.*"` + f + `":"\([^"]*\)".*/\1/p' .login/creds.json)`
	}
	script := `mkdir -p .login
curl -sS --max-time 10 -H 'Content-Type: application/json' -d '{"grant_type":"authorization_code","code":"c"}' ` + tok + ` > .login/creds.json
echo "ACCESS=` + field("access_token") + `"
curl -sS --max-time 10 -H "Authorization: Bearer ` + field("access_token") + `" ` + fmt.Sprintf(base, "api.corp.test") + `/v1/me
curl -sS --max-time 10 -H "Authorization: Bearer ` + field("access_token") + `" ` + fmt.Sprintf(base, "other.corp.test") + `/v1/me; echo
curl -sS --max-time 10 -H 'Content-Type: application/json' -d "{\"grant_type\":\"refresh_token\",\"refresh_token\":\"` + field("refresh_token") + `\"}" ` + tok + ` > .login/creds2.json && mv .login/creds2.json .login/creds.json
curl -sS --max-time 10 -H "Authorization: Bearer ` + field("access_token") + `" ` + fmt.Sprintf(base, "api.corp.test") + `/v1/me
echo "REAL in the workspace: $(grep -rl REAL . | wc -l), in the environment: $(env | grep -c REAL)"
`
	code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--network", "proxied", "--", "sh", "-c", script)
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
