package cli

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"vak/internal/egress/egresstest"
	"vak/internal/testenv"
)

// EnvRequireGH makes a missing gh (Debian's package) a failure.
const EnvRequireGH = "VAK_REQUIRE_GH"

// TestRunProxiedGHImportedLogin: a gh login kept on the host
// (hosts.yml) is imported with `vak login import gh`; the real gh in `vak
// run --network proxied` then calls the GitHub API (a mock) with the real
// token while the agent home holds only the phantom. gh's API host is
// fixed (https://api.github.com), so the mock listens on 443: as an
// unprivileged user only while net.ipv4.ip_unprivileged_port_start allows
// it (scripts/test-nonroot lowers it for this test's leg).
func TestRunProxiedGHImportedLogin(t *testing.T) {
	testenv.RequireLandlock(t)
	gh, err := exec.LookPath("gh")
	if err != nil {
		testenv.Missing(t, EnvRequireGH, "no gh (apt-get install gh)")
	}
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Cleanup(func() { stopOnDemand(t) })
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	const mockIP = "127.0.0.6"
	const real = "gho_REALx0123456789abcdefghijklmnopqrstuv"
	var mu sync.Mutex
	var seen []string
	tlsMock(t, ca, mockIP, 443, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "token "+real {
			w.WriteHeader(401)
			fmt.Fprint(w, `{"message":"Bad credentials"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"login":"mock-octocat","id":1}`)
	}), "api.github.com", "github.com")
	cfg := writeConfig(t, `version = 1
[sandbox]
read = [`+strconv.Quote(filepath.Dir(gh))+`]
[network]
policy = "proxied"
[[network.rules]]
hosts = ["api.github.com"]
cidrs = ["`+mockIP+`/32"]
[network.dns.overrides]
"api.github.com" = ["`+mockIP+`"]
[gateway]
extra_ca_bundles = [`+strconv.Quote(caFile)+`]
[logins.gh]
provider = "github"
[session]
run_network_idle = "0"
`)
	src := filepath.Join(t.TempDir(), "hosts.yml")
	os.WriteFile(src, []byte("github.com:\n    oauth_token: "+real+"\n    user: mock-octocat\n    git_protocol: https\n"), 0o600)
	ws := tempWorkspace(t)
	if code, out, errs := vakMain(t, cfg, "login", "import", "gh", "--from", src, "-w", ws, "--home", "workspace"); code != 0 {
		t.Fatalf("import: exit %d %s %s", code, out, errs)
	}
	code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--network", "proxied", "--home", "workspace", "--",
		"sh", "-c", `GH_NO_UPDATE_NOTIFIER=1 `+gh+` api user --jq .login; echo gh-rc=$?; grep -rl REALx "$HOME" | wc -l`)
	mu.Lock()
	defer mu.Unlock()
	if code != 0 || !strings.Contains(out, "mock-octocat\ngh-rc=0\n0") || strings.Contains(out+errs, real) {
		t.Fatalf("gh api user: exit %d\n%s\n%s\nthe mock saw %q", code, out, errs, seen)
	}
	if len(seen) == 0 || seen[len(seen)-1] != "GET /user token "+real {
		t.Errorf("the mock saw %q, want the real token", seen)
	}
}
