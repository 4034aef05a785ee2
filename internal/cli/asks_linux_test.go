package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/egress/egresstest"
	"vak/internal/egress/ondemand"
	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// TestNativeProxiedAsk: with [network] ask = true, a request inside `vak
// run --network proxied` that no rule allows waits for an answer given
// with vak's own commands: `vak gateway allow --once` lets it through and
// the next identical one asks again; `deny` refuses it; nobody answering
// refuses it at ask_timeout; `allow --run` also covers later requests to
// the host; an unlisted host's CONNECT is held the same way. A request a
// rule allows is never asked about (control), the upstream sees exactly
// the allowed ones, and every outcome is in the receipts, which verify.
func TestNativeProxiedAsk(t *testing.T) {
	n := newNativeNet(t)
	up := newAskUpstream(t, "8s")
	api, cfgBody, served := up.api, up.cfgBody, up.served
	cfg := writeConfig(t, cfgBody)
	base := "https://api.test:" + strconv.Itoa(api.Port())
	curl := func(u, tag string) string {
		return `curl -sS --max-time 40 ` + u + `; echo "` + tag + `"` + "\n"
	}
	// The agent tries to answer its own asks through the admin socket of
	// the on-demand gateway, the whole time: it must not be able to (the
	// ask nobody answers still times out).
	sock := filepath.Join(n.state, "vak", ondemand.DirName, "admin.sock")
	attack := `(while :; do for id in $(curl -s --max-time 1 --unix-socket ` + sock + ` http://gateway/v1/asks | grep -o '"id":"[0-9a-f]*"' | cut -d'"' -f4); do ` +
		`curl -s --max-time 1 -X POST --unix-socket ` + sock + ` "http://gateway/v1/asks/$id/allow?scope=run" >> attack.log; done; ` +
		`curl -sS --max-time 1 --unix-socket ` + sock + ` http://gateway/v1/status >> attack.log 2>&1; sleep 0.1; done) &` + "\n"
	// (The --run answer comes last: it covers the host from then on.)
	script := attack + curl(base+"/open/x", "#1") + curl(base+"/asked/1", "#2") + curl(base+"/asked/1", "#3") +
		curl(base+"/asked/2", "#4") +
		curl(base+"/always/1", "#8") + curl(base+"/always/2", "#9") + curl(base+"/never/1", "#10") + curl(base+"/never/2", "#11") +
		curl("https://unlisted.test:"+strconv.Itoa(api.Port())+"/", "#7") +
		curl(base+"/asked/3", "#5") + curl(base+"/asked/4", "#6") +
		`echo "ATTACK-ANSWERS: $(grep -c '"allow"\|"session"' attack.log)"; echo "ATTACK-TRIES: $(grep -c 'Failed\|onnect' attack.log)"` + "\n"

	// The person: answers each ask as it appears, by what it asks about.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	answered := make(chan string, 16)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		seen1 := 0
		done := map[string]bool{}
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			code, out, _ := vakMain(t, cfg, "gateway", "asks")
			if code != 0 {
				continue
			}
			sc := bufio.NewScanner(strings.NewReader(out))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) < 5 || f[0] == "ID" || done[f[0]] {
					continue
				}
				id, target := f[0], f[len(f)-1]
				var args []string
				switch {
				case strings.HasSuffix(target, "/asked/1") && seen1 == 0:
					seen1++
					args = []string{"allow", id, "--once"}
				case strings.HasSuffix(target, "/asked/1"):
					args = []string{"deny", id}
				case strings.HasSuffix(target, "/asked/3"):
					args = []string{"allow", id, "--run"}
				case strings.Contains(target, "unlisted.test"):
					args = []string{"deny", id}
				case strings.HasSuffix(target, "/always/1"):
					args = []string{"allow", id, "--always"}
				case strings.HasSuffix(target, "/never/1"):
					args = []string{"deny", id, "--always"}
				default:
					continue // /asked/2: nobody answers
				}
				done[id] = true
				if code, out, errs := vakMain(t, cfg, append([]string{"gateway"}, args...)...); code != 0 {
					answered <- fmt.Sprintf("FAILED %v: %d %s %s", args, code, out, errs)
					continue
				}
				answered <- strings.Join(args[:1], " ") + " " + target
			}
		}
	}()
	start := time.Now()
	code, out, errs := vakMain(t, cfg, "run", "-w", n.ws, "--backend", "landlock", "--network", "proxied", "--", "sh", "-c", script)
	stop()
	<-finished // its last answer is sent before answered is read (and closed)
	if code != 0 {
		t.Fatalf("vak run: exit %d\n%s\n%s", code, out, errs)
	}
	close(answered)
	var log []string
	for a := range answered {
		log = append(log, a)
	}
	t.Logf("answers: %v (run took %v)\n%s", log, time.Since(start).Round(time.Millisecond), out)
	// What each request got: the line before its tag.
	got := map[string]string{}
	lines := strings.Split(out, "\n")
	for i := 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			got[lines[i]] = lines[i-1]
		}
	}
	if !strings.Contains(out, "ATTACK-ANSWERS: 0") || strings.Contains(out, "ATTACK-TRIES: 0\n") || !strings.Contains(out, "ATTACK-TRIES: ") {
		t.Errorf("the sandbox reached the admin socket, or never tried:\n%s", out)
	}
	// Control: from the host, the same request reaches the gateway.
	if b, err := exec.Command("curl", "-sS", "--max-time", "5", "--unix-socket", sock, "http://gateway/v1/status").CombinedOutput(); err != nil || !strings.Contains(string(b), `"session"`) {
		t.Errorf("control: the admin socket from the host: %v %s", err, b)
	}
	uid := "(admin socket, uid " + strconv.Itoa(os.Getuid()) + ", pid "
	for _, tc := range []struct{ tag, want string }{
		{"#1", "UPSTREAM /open/x"},
		{"#2", "UPSTREAM /asked/1"},
		{"#3", "GET api.test:" + strconv.Itoa(api.Port()) + ": no rule matches, and ask "},
		{"#3", " was denied " + uid},
		{"#4", " was not answered within 8s"},
		{"#5", "UPSTREAM /asked/3"},
		{"#6", "UPSTREAM /asked/4"},
		{"#7", "GET unlisted.test:" + strconv.Itoa(api.Port()) + ": no rule matches, and ask "},
		{"#7", " was denied " + uid},
		{"#8", "UPSTREAM /always/1"},
		{"#9", "UPSTREAM /always/2"},
		{"#10", " was denied " + uid},
		{"#11", ": rule 2 (asked "},
		{"#11", "api.test) denies"},
	} {
		if !strings.Contains(got[tc.tag], tc.want) {
			t.Errorf("request %s got %q, want %q\n%s\nanswers: %v", tc.tag, got[tc.tag], tc.want, out, log)
		}
	}
	if got := served(); got != "/open/x /asked/1 /always/1 /always/2 /asked/3 /asked/4" {
		t.Errorf("the upstream served %q, want only the allowed requests", got)
	}
	// The --always answers are rules in the user config now, after the
	// rules that were there, each with its comment; they decide after a
	// gateway restart, with nobody answering.
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	added := string(data)[len(cfgBody):]
	if strings.Count(added, "[[network.rules]]") != 2 || !strings.Contains(added, "# added by `vak gateway allow ") ||
		!strings.Contains(added, "paths = [\"/always/\"]") || !strings.Contains(added, "paths = [\"/never/\"]") ||
		!strings.Contains(added, "action = \"deny\"") || !strings.HasPrefix(string(data), cfgBody) {
		t.Errorf("the user config after the --always answers:\n%s", data)
	}
	stopOnDemand(t)
	code, out2, errs2 := vakMain(t, cfg, "run", "-w", n.ws, "--backend", "landlock", "--network", "proxied", "--", "sh", "-c",
		curl(base+"/always/3", "#12")+curl(base+"/never/3", "#13"))
	if code != 0 || !strings.Contains(out2, "UPSTREAM /always/3\n#12") || !strings.Contains(out2, "api.test) denies") || strings.Contains(out2, "no rule matches") {
		t.Errorf("after a restart, the added rules do not decide:\n%s\n%s", out2, errs2)
	}

	// The receipts: each outcome once, and the logs verify.
	code, lsOut, lsErr := vakMain(t, cfg, "receipts", "ls")
	if code != 0 || strings.Contains(lsOut+lsErr, "FAIL") {
		t.Fatalf("receipts ls: %d\n%s\n%s", code, lsOut, lsErr)
	}
	var all strings.Builder
	logs, _ := filepath.Glob(filepath.Join(n.state, "vak", "*", "receipts", "*.jsonl"))
	more, _ := filepath.Glob(filepath.Join(n.state, "vak", "receipts", "*.jsonl"))
	for _, f := range append(logs, more...) {
		b, _ := os.ReadFile(f)
		all.Write(b)
	}
	for _, want := range []string{"allowed once by ask", "was denied (admin socket", "was not answered within 8s", "allowed for this run by ask",
		"allowed for good by ask", "added to the user config"} {
		if c := strings.Count(all.String(), want); c < 1 {
			t.Errorf("no receipt records %q (logs %v)", want, append(logs, more...))
		}
	}
}

// askUpstream is the upstream of the ask tests: api.test and
// unlisted.test on 127.0.0.2, recording the paths it serves, and a user
// config (cfgBody) that asks before refusing, with ask_timeout, and
// allows only api.test's /open/.
type askUpstream struct {
	api     *egresstest.Server
	cfgBody string
	served  func() string
}

func newAskUpstream(t *testing.T, timeout string) askUpstream {
	t.Helper()
	var mu sync.Mutex
	var paths []string
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	api := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.2", 0), ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		fmt.Fprintf(w, "UPSTREAM %s\n", r.URL.Path)
	}), "api.test", "unlisted.test")
	body := fmt.Sprintf(`version = 1
[network]
policy = "proxied"
ask = true
ask_timeout = %q
[[network.rules]]
name = "open part"
hosts = ["api.test"]
cidrs = ["127.0.0.2/32"]
paths = ["/open/"]
[network.dns.overrides]
"api.test" = ["127.0.0.2"]
"unlisted.test" = ["127.0.0.2"]
[gateway]
extra_ca_bundles = [%q]
`, timeout, caFile)
	return askUpstream{api: api, cfgBody: body, served: func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(paths, " ")
	}}
}

// TestMCPNativeProxiedAsk: under `vak mcp --network proxied` with asking
// on, an ask raised by a bash call is put to the client as an MCP
// elicitation (the person answers in the agent's own client; the model
// cannot): "allow once" lets the request through, declining denies it,
// and the receipts say the answer came via MCP elicitation. A client
// without elicitation support gets no question: the request waits for
// vak gateway allow and, unanswered, is refused at ask_timeout.
func TestMCPNativeProxiedAsk(t *testing.T) {
	n := newNativeNet(t)
	up := newAskUpstream(t, "4s")
	cfg := writeConfig(t, up.cfgBody)
	base := "https://api.test:" + strconv.Itoa(up.api.Port())
	var mu sync.Mutex
	var questions []string
	answers := map[string]*sdk.ElicitResult{
		"/asked/1": {Action: "accept", Content: map[string]any{"decision": "allow once"}},
		"/asked/2": {Action: "decline"},
	}
	connect := func(elicit bool) (*sdk.ClientSession, *wire.TailBuffer) {
		t.Helper()
		stderr := wire.NewTailBuffer(64 << 10)
		cmd := exec.Command(workerExecutable, "--config", cfg, "mcp", "--workspace", n.ws, "--backend", "landlock", "--network", "proxied")
		cmd.Stderr = stderr
		var opts *sdk.ClientOptions
		if elicit {
			opts = &sdk.ClientOptions{ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
				mu.Lock()
				questions = append(questions, req.Params.Message)
				mu.Unlock()
				for p, a := range answers {
					if strings.Contains(req.Params.Message, p+",") {
						return a, nil
					}
				}
				return &sdk.ElicitResult{Action: "cancel"}, nil
			}}
		}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "asktest", Version: "1"}, opts).Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v\nstderr: %s", err, stderr.String())
		}
		t.Cleanup(func() { cs.Close() })
		return cs, stderr
	}
	bash := func(cs *sdk.ClientSession, command string) string {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Stdout string `json:"stdout"`
		}
		data, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(data, &out)
		return out.Stdout
	}
	cs, stderr := connect(true)
	if out := bash(cs, "curl -sS --max-time 30 "+base+"/asked/1"); !strings.Contains(out, "UPSTREAM /asked/1") {
		t.Errorf("allowed once through the elicitation: %q\nstderr: %s", out, stderr.String())
	}
	if out := bash(cs, "curl -sS --max-time 30 "+base+"/asked/2"); !strings.Contains(out, "was denied (admin socket, uid ") || !strings.Contains(out, "via MCP elicitation (client asktest)") {
		t.Errorf("declined through the elicitation: %q\nstderr: %s", out, stderr.String())
	}
	mu.Lock()
	q := strings.Join(questions, "\n")
	mu.Unlock()
	if strings.Count(q, "The sandbox wants to reach GET api.test:") != 2 || !strings.Contains(q, "/asked/1,") {
		t.Errorf("the elicitations: %q", q)
	}
	cs.Close()

	plain, _ := connect(false)
	if out := bash(plain, "curl -sS --max-time 30 "+base+"/asked/3"); !strings.Contains(out, "was not answered within 4s") {
		t.Errorf("a client without elicitation: %q", out)
	}
	if got := up.served(); got != "/asked/1" {
		t.Errorf("the upstream served %q, want only /asked/1", got)
	}
}

// TestDockerAsk: a docker-backed `vak run --network proxied` with asking
// on: the request no rule allows waits in the topology's gateway
// container, `vak gateway asks -w` lists it there and `vak gateway allow
// -w` lets it through (the receipt names the relay); the next one,
// denied with `deny -w`, gets 403. The sandbox container has no path to
// the gateway's admin socket (it lives in the gateway's own volume).
func TestDockerAsk(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	img := testenv.Image(t)
	m := newDockerMock(t, "ask")
	ws, mockIP, label := m.ws, m.ip, m.label
	var mu sync.Mutex
	var served []string
	up := egresstest.StartTLS(t, egresstest.Listen(t, mockIP, 0), m.ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
		fmt.Fprintf(w, "UPSTREAM %s\n", r.URL.Path)
	}), "api.test")
	cfg := writeConfig(t, m.askConfig(img, "20s"))
	base := "https://api.test:" + strconv.Itoa(up.Port())
	script := `./probe http ` + base + `/asked/1 30s; echo "#1"; ./probe http ` + base + `/asked/2 30s; echo "#2"; ls /data/vak/gateway.sock 2>&1; echo "#3"`
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	answered := make(chan string, 8)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done := map[string]bool{}
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			code, out, _ := vakMain(t, cfg, "gateway", "asks", "-w", ws)
			if code != 0 {
				continue
			}
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) < 5 || f[0] == "ID" || done[f[0]] {
					continue
				}
				id, target := f[0], f[len(f)-1]
				args := []string{"gateway", "allow", id, "-w", ws}
				if strings.HasSuffix(target, "/asked/2") {
					args = []string{"gateway", "deny", id, "-w", ws}
				}
				done[id] = true
				code, out, errs := vakMain(t, cfg, args...)
				answered <- fmt.Sprintf("%v: %d %s %s", args[1:3], code, strings.TrimSpace(out), strings.TrimSpace(errs))
			}
		}
	}()
	code, out, errs := vakMain(t, cfg, "run", "--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", label,
		"-w", ws, "--network", "proxied", "--", "sh", "-c", script)
	stop()
	<-finished // its last answer is sent before answered is read
	var log []string
	for len(answered) > 0 {
		log = append(log, <-answered)
	}
	if code != 0 {
		t.Fatalf("vak run: exit %d\n%s\n%s\nanswers: %v", code, out, errs, log)
	}
	got := map[string]string{}
	lines := strings.Split(out, "\n")
	for i := 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			got[lines[i]] = lines[i-1]
		}
	}
	via := "via docker exec by host uid " + strconv.Itoa(os.Getuid())
	if !strings.Contains(got["#1"], "UPSTREAM /asked/1") || !strings.Contains(got["#2"], "was denied (admin socket") ||
		!strings.Contains(got["#2"], via) || !strings.Contains(got["#3"], "No such file") {
		t.Fatalf("the sandbox got:\n%s\nanswers: %v\nstderr: %s", out, log, errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(served, " ") != "/asked/1" {
		t.Errorf("the upstream served %v", served)
	}
}

// dockerMock is the fixture of a docker-backed proxied test whose mock
// upstream runs on the host: a workspace holding the probe tool, a test
// network on whose gateway address (ip) the mock listens, a label for the
// run's objects (removed when t ends), and a CA whose certificate
// (caFile) the gateway container can read.
type dockerMock struct {
	ws, ip, label, caFile string
	ca                    *egresstest.CA
}

// askConfig is the user config of the docker ask tests: the image, a
// proxied network that asks (with askTimeout) about what its one rule,
// api.test's /open/, does not allow.
func (m dockerMock) askConfig(img, askTimeout string) string {
	return fmt.Sprintf(`version = 1
[sandbox]
backend = "docker"
image = %q
[session]
run_network_idle = "10m"
[network]
policy = "proxied"
ask = true
ask_timeout = %q
[[network.rules]]
hosts = ["api.test"]
cidrs = ["%s/32"]
paths = ["/open/"]
[network.dns.overrides]
"api.test" = [%q]
[gateway]
extra_ca_bundles = [%q]
`, img, askTimeout, m.ip, m.ip, m.caFile)
}

func newDockerMock(t *testing.T, name string) dockerMock {
	t.Helper()
	netName := testenv.CreateNetwork(t, testenv.UniqueName(name))
	m := dockerMock{ws: tempWorkspace(t), label: "vak.test.run=" + name + "-" + testenv.TestID(t), ca: egresstest.NewCA(t)}
	m.ip = testenv.Docker(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", netName)
	t.Cleanup(func() { removeLabelled(t, m.label) })
	probe, err := os.ReadFile(testenv.Probe(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.ws, "probe"), probe, 0o755); err != nil {
		t.Fatal(err)
	}
	caDir := t.TempDir()
	os.Chmod(caDir, 0o755) // the gateway container reads it as another uid
	m.caFile = m.ca.WritePEM(t, caDir)
	os.Chmod(m.caFile, 0o644)
	return m
}

// TestDockerUIAsk: vak ui finds the gateway container of a docker-backed
// workspace while a proxied `vak run` uses it, shows its asks, and answers
// them in that container: allow once lets the request through, deny
// refuses the next, and the receipts name the page and docker exec; an
// "always" answer is refused there (not built for containers) and changes
// nothing. The container cannot reach the page.
func TestDockerUIAsk(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	img := testenv.Image(t)
	m := newDockerMock(t, "uiask")
	up := egresstest.StartTLS(t, egresstest.Listen(t, m.ip, 0), m.ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "UPSTREAM %s\n", r.URL.Path)
	}), "api.test")
	cfg := writeConfig(t, m.askConfig(img, "30s"))
	pageURL, uiErr := startUI(t, cfg)
	pageBase, token, _ := strings.Cut(pageURL, "/?token=")
	cookie := "vak_ui_" + pageBase[strings.LastIndex(pageBase, ":")+1:] + "=" + token
	base := "https://api.test:" + strconv.Itoa(up.Port())
	script := `./probe http ` + base + `/asked/1 40s; echo "#1"; ./probe http ` + base + `/asked/2 40s; echo "#2"; ` +
		`./probe http ` + pageBase + `/api/state 3s; echo "#3"`

	// The person, at the page's API (what its buttons send).
	hc := &http.Client{Timeout: 60 * time.Second}
	call := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, pageBase+path, nil)
		req.Header.Set("Cookie", cookie)
		req.Header.Set("Origin", pageBase)
		req.Header.Set("X-Vak-Token", token)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	answered := make(chan string, 8)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done := map[string]bool{}
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			_, body := call("GET", "/api/state")
			var st struct {
				Gateways []struct{ Name, Workspace string }
				Asks     []struct {
					Gateway string
					Ask     struct{ ID, Path string }
				}
			}
			if json.Unmarshal([]byte(body), &st) != nil {
				continue
			}
			for _, a := range st.Asks {
				if done[a.Ask.ID] || !strings.HasPrefix(a.Gateway, "docker-") {
					continue
				}
				done[a.Ask.ID] = true
				p := "/api/asks/" + a.Gateway + "/" + a.Ask.ID
				if a.Ask.Path == "/asked/2" {
					code, body := call("POST", p+"/allow?scope=always")
					answered <- fmt.Sprintf("always %s: %d %s", a.Ask.Path, code, body)
					code, body = call("POST", p+"/deny")
					answered <- fmt.Sprintf("deny %s: %d %s", a.Ask.Path, code, body)
					continue
				}
				code, body := call("POST", p+"/allow?scope=once")
				answered <- fmt.Sprintf("once %s: %d %s", a.Ask.Path, code, body)
			}
		}
	}()
	code, out, errs := vakMain(t, cfg, "run", "--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", m.label,
		"-w", m.ws, "--network", "proxied", "--", "sh", "-c", script)
	stop()
	<-finished // its last answer is sent before answered is read
	var log []string
	for len(answered) > 0 {
		log = append(log, <-answered)
	}
	if code != 0 {
		t.Fatalf("vak run: exit %d\n%s\n%s\nanswers: %v\nvak ui: %s", code, out, errs, log, uiErr.String())
	}
	got := map[string]string{}
	lines := strings.Split(out, "\n")
	for i := 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			got[lines[i]] = lines[i-1]
		}
	}
	via := "via vak ui, pid "
	if !strings.Contains(got["#1"], "UPSTREAM /asked/1") || !strings.Contains(got["#2"], "was denied (admin socket") ||
		!strings.Contains(got["#2"], via) || !strings.Contains(got["#2"], "docker exec by host uid "+strconv.Itoa(os.Getuid())) ||
		!strings.HasPrefix(got["#3"], "FAIL ") {
		t.Errorf("the sandbox got:\n%s\nanswers: %v\nvak ui: %s", out, log, uiErr.String())
	}
	t.Logf("the sandbox got:\n%s\nanswers: %v", out, log)
	joined := strings.Join(log, "\n")
	if !strings.Contains(joined, "once /asked/1: 200") || !strings.Contains(joined, "always /asked/2: 409") ||
		!strings.Contains(joined, "not built yet") || !strings.Contains(joined, "deny /asked/2: 200") {
		t.Errorf("the answers through the page: %v", log)
	}
	if data, err := os.ReadFile(cfg); err != nil || strings.Contains(string(data), "asked ") {
		t.Errorf("the refused always answer changed the config: %v\n%s", err, data)
	}
}
