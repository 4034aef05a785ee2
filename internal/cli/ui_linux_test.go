package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// TestUIBrowser: `vak ui` in a real headless browser (Debian's chromium,
// driven through the DevTools protocol). A request inside `vak run
// --network proxied` shows up on the open page as a live decision without
// a reload; a held request's card appears, clicking "Allow once" lets it
// through and clicking "Deny" on the next one refuses it, and the receipts
// name the page as the channel. An agent-chosen path that looks like
// markup stays text. The sandbox cannot reach the page, with the token,
// by address or by name (its loopback is its own; the gateway never
// connects to loopback); requests without the token or with a
// foreign Host or Origin are refused (their controls succeed).
// Screenshots are kept in $VAK_TEST_ARTIFACTS/uidN (else the test's temp
// dir).
func TestUIBrowser(t *testing.T) {
	chrome := requireChromium(t)
	n := newNativeNet(t)
	up := newAskUpstream(t, "20s")
	cfg := writeConfig(t, up.cfgBody)
	base := "https://api.test:" + strconv.Itoa(up.api.Port())

	pageURL, uiErr := startUI(t, cfg)
	pageBase, token, _ := strings.Cut(pageURL, "/?token=")
	port := pageBase[strings.LastIndex(pageBase, ":")+1:]

	bctx, cancel := browser(t, chrome)
	defer cancel()
	// Each step has a minute (deriving from the browser's context; the
	// browser lives as long as that).
	do := func(steps ...chromedp.Action[chromedp.Void]) error {
		ctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		return chromedp.Do(ctx, steps...)
	}
	ctx := bctx
	if err := do(chromedp.Navigate(pageURL), chromedp.WaitVisible(chromedp.CSS(`#conn.on`))); err != nil {
		t.Fatalf("open the page: %v\nvak ui: %s", err, uiErr.String())
	}
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || strings.Contains(loc, token) {
		t.Errorf("the token stays in the address bar: %q %v", loc, err)
	}

	// The agent: a request a rule allows (with a path that looks like
	// markup), one the person allows from the page, one denied there,
	// and tries at the page itself.
	curl := func(u, tag string) string { return `curl -sS --max-time 60 '` + u + `'; echo "` + tag + `"` + "\n" }
	xss := "/open/%3Cimg%20src=x%20onerror=window.pwned=1%3E"
	script := `sleep 1` + "\n" + curl(base+"/open/live", "#1") + curl(base+xss, "#2") + curl(base+"/asked/ui", "#3") + curl(base+"/asked/ui", "#4") +
		`curl -sS --max-time 3 '` + pageURL + `' && echo UI-REACHED-127 || echo UI-REFUSED-127` + "\n" +
		`curl -sS --max-time 3 --cookie vak_ui_` + port + `=` + token + ` 'http://localhost:` + port + `/api/state' && echo UI-REACHED-LOCALHOST || echo UI-REFUSED-LOCALHOST` + "\n"
	type result struct {
		code      int
		out, errs string
	}
	runDone := make(chan result, 1)
	go func() {
		code, out, errs := vakMain(t, cfg, "run", "-w", n.ws, "--backend", "landlock", "--network", "proxied", "--", "sh", "-c", script)
		runDone <- result{code, out, errs}
	}()

	// A live decision, without a reload: the page notes when it added the
	// row; the receipt when the gateway decided.
	if err := do(chromedp.WaitVisible(chromedp.CSS(`tr.decision[data-path="/open/live"]`))); err != nil {
		t.Fatalf("no live decision on the page: %v\nvak ui: %s", err, uiErr.String())
	}
	seen, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const r = document.querySelector('tr.decision[data-path="/open/live"]'); return r.dataset.seen + " " + r.dataset.time })()`))
	if f := strings.Fields(seen); len(f) == 2 {
		at, _ := strconv.ParseInt(f[0], 10, 64)
		dec, err := time.Parse(time.RFC3339Nano, f[1])
		if err == nil {
			t.Logf("decision on the page %v after the gateway decided", time.UnixMilli(at).Sub(dec).Round(time.Millisecond))
		}
	}

	// The ask: its card, Allow once.
	card := `.ask[data-target$="/asked/ui"]`
	shot := func(name string) {
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Errorf("screenshot: %v", err)
			return
		}
		dir := t.TempDir()
		if a := os.Getenv("VAK_TEST_ARTIFACTS"); a != "" {
			dir = filepath.Join(a, "uid"+strconv.Itoa(os.Getuid()))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Error(err)
			}
		}
		f := filepath.Join(dir, "ui-"+name+".png")
		if err := os.WriteFile(f, buf, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshot: %s", f)
	}
	if err := do(chromedp.WaitVisible(chromedp.CSS(card))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("asks").outerHTML + document.getElementById("gateways").outerHTML`))
		var r result
		select {
		case r = <-runDone:
		case <-time.After(30 * time.Second):
		}
		t.Fatalf("no ask on the page: %v\n%s\nvak ui: %s\nvak run: %+v", err, html, uiErr.String(), r)
	}
	// (The page lists a log that appeared soon after its first record.
	// Its newest record may be listed before the checkpoint that signs
	// it, which the gateway writes a few milliseconds later: the page,
	// refreshed every 3 s, must then say "verified, signed".)
	if err := do(chromedp.WaitVisible(chromedp.CSS(`#receipts tbody tr`))); err != nil {
		t.Errorf("the receipts log is not listed: %v", err)
	} else {
		var v string
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			v, err = chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#receipts tbody tr`)))
			if err == nil && strings.Contains(v, "verified, signed") {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the receipts log's verification, 15 s on: %q %v", v, err)
				break
			}
		}
	}
	shot("ask")
	id, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(card), "data-id"))
	first := id.Value
	if err != nil || first == "" {
		t.Fatalf("the ask's id: %q %v", first, err)
	}
	if err := do(chromedp.Click(chromedp.CSS(card+` button[data-action="allow-once"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card))); err != nil {
		t.Fatalf("allow once: %v\nvak ui: %s", err, uiErr.String())
	}
	// The same request again asks again: Deny. (Its card is the second
	// ask's: the answered one never comes back, even from a state
	// snapshot taken before the answer.)
	second := `.ask[data-target$="/asked/ui"]:not([data-id="` + first + `"])`
	if err := do(chromedp.WaitVisible(chromedp.CSS(second)),
		chromedp.Click(chromedp.CSS(second+` button[data-action="deny"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card))); err != nil {
		t.Fatalf("deny: %v\nvak ui: %s", err, uiErr.String())
	}
	var res result
	select {
	case res = <-runDone:
	case <-time.After(3 * time.Minute):
		t.Fatal("vak run did not end")
	}
	if err := do(chromedp.WaitVisible(chromedp.CSS(`tr.decision[data-path="/asked/ui"]`))); err != nil {
		t.Errorf("the answered request is not among the decisions: %v", err)
	}
	shot("decisions")
	got := map[string]string{}
	lines := strings.Split(res.out, "\n")
	for i := 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			got[lines[i]] = lines[i-1]
		}
	}
	t.Logf("vak run: %d\n%s\n%s", res.code, res.out, res.errs)
	uid := strconv.Itoa(os.Getuid())
	for _, tc := range []struct{ tag, want string }{
		{"#1", "UPSTREAM /open/live"},
		{"#2", "UPSTREAM /open/<img"},
		{"#3", "UPSTREAM /asked/ui"},
		{"#4", " was denied (admin socket, uid " + uid + ", pid "},
		{"#4", ", via vak ui, pid "},
	} {
		if !strings.Contains(got[tc.tag], tc.want) {
			t.Errorf("request %s got %q, want %q", tc.tag, got[tc.tag], tc.want)
		}
	}
	if !strings.Contains(res.out, "UI-REFUSED-127") || !strings.Contains(res.out, "UI-REFUSED-LOCALHOST") || strings.Contains(res.out, "UI-REACHED") {
		t.Errorf("the sandbox reached the page:\n%s", res.out)
	}
	// The markup-like path is text on the page: no element, no script ran.
	pwned, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.pwned === 1 || document.querySelectorAll("#decisions img, #asks img").length > 0`))
	xssText, err2 := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr.decision[data-path^="/open/<img"]`)))
	if err = errors.Join(err, err2); err != nil || pwned || !strings.Contains(xssText, "<img src=x onerror=") {
		t.Errorf("the agent's path became markup: pwned=%v text=%q err=%v", pwned, xssText, err)
	}

	// The page's guards, from the host: a request without the token, with
	// another Host, or an answer with a foreign Origin is refused.
	hc := &http.Client{Timeout: 10 * time.Second}
	send := func(method, path string, hdr ...string) int {
		req, _ := http.NewRequest(method, pageBase+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
			} else {
				req.Header.Set(hdr[i], hdr[i+1])
			}
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	cookie := "vak_ui_" + port + "=" + token
	for _, tc := range []struct {
		name   string
		status int
		method string
		path   string
		hdr    []string
	}{
		{"no token", 403, "GET", "/api/state", nil},
		{"rebinding Host", 421, "GET", "/api/state", []string{"Cookie", cookie, "Host", "rebind.example:" + port}},
		{"foreign Origin", 403, "POST", "/api/asks/native/x/allow?scope=once", []string{"Cookie", cookie, "X-Vak-Token", token, "Origin", "http://evil.example"}},
		{"control: state", 200, "GET", "/api/state", []string{"Cookie", cookie}},
		{"control: answer reaches the gateway (no such ask)", 409, "POST", "/api/asks/native/x/allow?scope=once", []string{"Cookie", cookie, "X-Vak-Token", token, "Origin", pageBase}},
	} {
		if got := send(tc.method, tc.path, tc.hdr...); got != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.status)
		}
	}
	// The receipts say through which channel each answer came.
	var all strings.Builder
	logs, _ := filepath.Glob(filepath.Join(n.state, "vak", "*", "receipts", "*.jsonl"))
	more, _ := filepath.Glob(filepath.Join(n.state, "vak", "receipts", "*.jsonl"))
	for _, f := range append(logs, more...) {
		b, _ := os.ReadFile(f)
		all.Write(b)
	}
	for _, want := range []string{"allowed once by ask", "via vak ui, pid"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("no receipt records %q", want)
		}
	}
}

// startUI starts `vak ui` with the user config cfg, as a user does, and
// returns the address it printed and its stderr.
func startUI(t *testing.T, cfg string) (string, *wire.TailBuffer) {
	t.Helper()
	ui := exec.Command(workerExecutable, "--config", cfg, "ui")
	uiErr := wire.NewTailBuffer(64 << 10)
	ui.Stderr = uiErr
	stdout, err := ui.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ui.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ui.Process.Kill(); ui.Wait() })
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "vak ui: open "); ok {
				urlc <- u
			}
		}
	}()
	select {
	case u := <-urlc:
		return u, uiErr
	case <-time.After(30 * time.Second):
		t.Fatalf("vak ui printed no address; stderr:\n%s", uiErr.String())
	}
	return "", nil
}

// requireChromium finds Debian's chromium (VAK_REQUIRE_BROWSER=1: its
// absence fails the test).
func requireChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "VAK_REQUIRE_BROWSER", "no chromium on PATH (Debian: apt install chromium)")
	return ""
}

// browser starts a headless chromium for the test.
func browser(t *testing.T, path string) (context.Context, context.CancelFunc) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // tests run as root too; the page is the test's own
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(f string, a ...any) { t.Logf("chromedp: "+f, a...) }))
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		acancel()
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, func() { cancel(); acancel() }
}
