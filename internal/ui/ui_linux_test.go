package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vak/internal/egress/asks"
	"vak/internal/receipts"
)

// page is a running page of a test.
type page struct {
	url, base, token, host string
	answered               chan string
}

func startPage(t *testing.T, o Options) *page {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	o.Ready = func(u string) { ready <- u }
	p := &page{answered: make(chan string, 4)}
	if o.Answer == nil {
		o.Answer = func(_ context.Context, gw Gateway, id string, allow, always bool, scope asks.Scope) (string, error) {
			p.answered <- gw.Name + " " + id + " " + strconv.FormatBool(allow) + " " + string(scope)
			return "answered", nil
		}
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	select {
	case p.url = <-ready:
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	}
	p.base, p.token, _ = strings.Cut(p.url, "/?token=")
	p.host = strings.TrimPrefix(p.base, "http://")
	return p
}

// do sends one request to the page: cookie names whether the token
// cookie goes with it.
func (p *page) do(t *testing.T, method, path string, cookie bool, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, p.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cookie {
		req.AddCookie(&http.Cookie{Name: "vak_ui_" + p.host[strings.LastIndex(p.host, ":")+1:], Value: p.token})
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && b.Len() < 4096 {
		b.WriteString(sc.Text() + "\n")
	}
	return resp.StatusCode, b.String()
}

// TestPageRefuses: every request without the token, through another host
// name, or a change without the page's Origin and token header is refused
// before it reaches a handler; the same requests with them get through
// (controls), and the address's token is traded for a cookie and dropped
// from the address.
func TestPageRefuses(t *testing.T) {
	p := startPage(t, Options{Gateways: []Gateway{{Name: "native", Socket: filepath.Join(t.TempDir(), "none.sock")}}})
	origin := map[string]string{"Origin": p.base, "X-Vak-Token": p.token}
	answer := "/api/asks/native/abc/allow?scope=once"
	for _, tc := range []struct {
		name         string
		method, path string
		cookie       bool
		hdr          map[string]string
		status       int
		want         string
	}{
		{"state, no token", "GET", "/api/state", false, nil, 403, "no token"},
		{"events, no token", "GET", "/api/events", false, nil, 403, "no token"},
		{"index, wrong token", "GET", "/?token=" + strings.Repeat("0", 64), false, nil, 403, "wrong token"},
		{"index, token as a cookie of another name", "GET", "/", false, map[string]string{"Cookie": "vak_ui=" + p.token}, 403, "no token"},
		{"rebinding: another Host", "GET", "/api/state", true, map[string]string{"Host": "attacker.example:" + p.host[strings.LastIndex(p.host, ":")+1:]}, 421, "does not name this page"},
		{"rebinding: Host without the port", "GET", "/api/state", true, map[string]string{"Host": "127.0.0.1"}, 421, "does not name this page"},
		{"cross-site GET", "GET", "/api/state", true, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "another site"},
		{"answer, no Origin", "POST", answer, true, map[string]string{"X-Vak-Token": p.token}, 403, "Origin"},
		{"answer, foreign Origin", "POST", answer, true, map[string]string{"Origin": "http://attacker.example", "X-Vak-Token": p.token}, 403, "Origin"},
		{"answer, Origin null", "POST", answer, true, map[string]string{"Origin": "null", "X-Vak-Token": p.token}, 403, "Origin"},
		{"answer, no token header", "POST", answer, true, map[string]string{"Origin": p.base}, 403, "no token header"},
		{"answer, wrong token header", "POST", answer, true, map[string]string{"Origin": p.base, "X-Vak-Token": p.token[:63] + "x"}, 403, "no token header"},
		{"answer, no cookie", "POST", answer, false, origin, 403, "no token"},
		{"answer, bad scope", "POST", "/api/asks/native/abc/allow?scope=forever", true, origin, 400, "scope"},
		{"answer, unknown gateway", "POST", "/api/asks/other/abc/allow?scope=once", true, origin, 404, "no gateway"},
		// Controls.
		{"control: index with the token", "GET", "/?token=" + p.token, false, nil, 303, ""},
		{"control: index with the cookie", "GET", "/", true, nil, 200, `content="` + p.token + `"`},
		{"control: localhost names it too", "GET", "/api/state", true, map[string]string{"Host": "localhost:" + p.host[strings.LastIndex(p.host, ":")+1:]}, 200, `"gateways"`},
		{"control: state", "GET", "/api/state", true, nil, 200, `"name":"native"`},
		{"control: answer", "POST", answer, true, origin, 200, `"done":"answered"`},
		{"control: deny always", "POST", "/api/asks/native/abc/deny?scope=always", true, origin, 200, `"done":"answered"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := p.do(t, tc.method, tc.path, tc.cookie, tc.hdr)
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, status, body, tc.status, tc.want)
			}
		})
	}
	for _, want := range []string{"native abc true once", "native abc false always"} {
		select {
		case got := <-p.answered:
			if got != want {
				t.Errorf("answered %q, want %q", got, want)
			}
		default:
			t.Errorf("not answered: %q", want)
		}
	}
	select {
	case got := <-p.answered:
		t.Errorf("a refused request was answered: %q", got)
	default:
	}
}

// TestPageOtherUser: a connection from another user's process is refused
// even with the token. The owner is made another uid than this test's
// (every user can run this), and as root a real process of another user
// (nobody) is refused while root's own request is served (control).
func TestPageOtherUser(t *testing.T) {
	other := os.Getuid() + 1
	p := startPage(t, Options{OwnerUID: &other})
	if status, body := p.do(t, "GET", "/api/state", true, nil); status != 403 || !strings.Contains(body, "belongs to uid "+strconv.Itoa(other)) {
		t.Errorf("a request of uid %d to uid %d's page: %d %s", os.Getuid(), other, status, body)
	}
	own := startPage(t, Options{})
	if status, body := own.do(t, "GET", "/api/state", true, nil); status != 200 {
		t.Fatalf("control: own request: %d %s", status, body)
	}
	if os.Getuid() != 0 {
		return
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	cmd := exec.Command(curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cookie", "vak_ui_"+own.host[strings.LastIndex(own.host, ":")+1:]+"="+own.token, own.base+"/api/state")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil || string(out) != "403" {
		t.Errorf("nobody with the token: %v %s, want 403", err, out)
	}
}

// TestLiveDecisions: a record appended to a receipts log reaches an open
// event stream as a "decision", a record already there when the page
// started is in the backlog, and a half-written line waits for its end.
func TestLiveDecisions(t *testing.T) {
	dir := t.TempDir()
	logf := filepath.Join(dir, "sub", "s.jsonl")
	l, err := receipts.Open(logf)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Append(receipts.Record{Protocol: "https", Method: "GET", Host: "before.test", Port: 443, Path: "/x", Rule: 0, Decision: "allow"})
	p := startPage(t, Options{ReceiptsDirs: []string{dir}, Poll: 50 * time.Millisecond})
	req, _ := http.NewRequest("GET", p.base+"/api/events", nil)
	req.AddCookie(&http.Cookie{Name: "vak_ui_" + p.host[strings.LastIndex(p.host, ":")+1:], Value: p.token})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
		close(events)
	}()
	next := func() decisionView {
		t.Helper()
		select {
		case d := <-events:
			var v decisionView
			if err := json.Unmarshal([]byte(d), &v); err != nil {
				t.Fatalf("%v: %s", err, d)
			}
			return v
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return decisionView{}
	}
	if d := next(); d.Host != "before.test" || d.Log != filepath.Join("sub", "s.jsonl") {
		t.Errorf("backlog: %+v", d)
	}
	f, err := os.OpenFile(filepath.Join(dir, "sub", "raw.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(`{"seq":0,"protocol":"https","host":"half`)
	l.Append(receipts.Record{Protocol: "https", Method: "POST", Host: "<img src=x onerror=alert(1)>", Port: 443, Path: "/y", Rule: -1, Decision: "deny"})
	if d := next(); d.Host != "<img src=x onerror=alert(1)>" || d.Decision != "deny" {
		t.Errorf("live: %+v", d)
	}
	f.WriteString(`.test","rule":-1,"decision":"deny"}` + "\n")
	if d := next(); d.Host != "half.test" {
		t.Errorf("the completed line: %+v", d)
	}
}

func TestParseProcAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0100007F:1F90", "127.0.0.1:8080"},
		{"00000000000000000000000001000000:0050", "[::1]:80"},
		{"0000000000000000FFFF00000100007F:0016", "[::ffff:127.0.0.1]:22"},
	} {
		got, err := parseProcAddr(tc.in)
		if err != nil || got != netip.MustParseAddrPort(tc.want) {
			t.Errorf("parseProcAddr(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007:1F90", "zz00007F:1F90", "0100007F:1FFFFF"} {
		if _, err := parseProcAddr(bad); err == nil {
			t.Errorf("parseProcAddr(%q): no error", bad)
		}
	}
}

func TestServeRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0"} {
		if err := Serve(context.Background(), Options{Listen: addr}); err == nil || !strings.Contains(err.Error(), "loopback only") {
			t.Errorf("Serve on %s: %v", addr, err)
		}
	}
}

// TestDiscoveredGateways: a gateway Discover finds is followed (its asks
// are in the state and answerable through the page), and when Discover no
// longer finds it, it and its asks go.
func TestDiscoveredGateways(t *testing.T) {
	var mu sync.Mutex
	present := true
	ws := "/work/app"
	follow := func(ctx context.Context, fn func(asks.Event) error) error {
		if err := fn(asks.Event{Kind: "ask", Ask: asks.Ask{ID: "a1", Method: "GET", Host: "x.test", Port: 443, Path: "/p"}}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	discover := func(context.Context) ([]Gateway, error) {
		mu.Lock()
		defer mu.Unlock()
		if !present {
			return nil, nil
		}
		return []Gateway{{Name: "docker-k1", Workspace: ws, Follow: follow}}, nil
	}
	p := startPage(t, Options{Discover: discover, DiscoverEvery: 20 * time.Millisecond})
	type st struct {
		Gateways []gatewayState
		Asks     []gatewayAskView
	}
	state := func() st {
		_, body := p.do(t, "GET", "/api/state", true, nil)
		var s st
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return s
	}
	waitFor := func(what string, ok func(st) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := state()
			if ok(s) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("never %s: %+v", what, s)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("followed", func(s st) bool {
		return len(s.Gateways) == 1 && s.Gateways[0].Running && s.Gateways[0].Workspace == ws && len(s.Asks) == 1 && s.Asks[0].Ask.ID == "a1"
	})
	origin := map[string]string{"Origin": p.base, "X-Vak-Token": p.token}
	if status, body := p.do(t, "POST", "/api/asks/docker-k1/a1/allow?scope=run", true, origin); status != 200 {
		t.Errorf("answer: %d %s", status, body)
	}
	if got := <-p.answered; got != "docker-k1 a1 true run" {
		t.Errorf("answered %q", got)
	}
	mu.Lock()
	present = false
	mu.Unlock()
	waitFor("gone", func(s st) bool { return len(s.Gateways) == 0 && len(s.Asks) == 0 })
	if status, _ := p.do(t, "POST", "/api/asks/docker-k1/a1/allow?scope=run", true, origin); status != 404 {
		t.Errorf("an answer to a gone gateway: %d, want 404", status)
	}
}
