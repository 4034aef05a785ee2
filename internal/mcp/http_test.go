package mcp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/sandbox"
)

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func serveHTTP(t *testing.T, f *fixture, addr string) *Listener {
	t.Helper()
	l, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeHTTP(ctx, l, f.srv.HTTPHandler(l)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	})
	return l
}

// headerTransport adds a header to every request.
type headerTransport struct {
	base       http.RoundTripper
	key, value string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.key, h.value)
	return h.base.RoundTrip(r)
}

func connectHTTP(t *testing.T, url string, hc *http.Client) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestHTTPBearerToken(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	l := serveHTTP(t, f, "127.0.0.1:0")
	if len(l.Token) != 64 || !strings.HasPrefix(l.URL, "http://127.0.0.1:") {
		t.Fatalf("listener %+v", l)
	}
	for _, tc := range []struct{ name, auth string }{
		{"no token", ""},
		{"wrong token", "Bearer " + strings.Repeat("0", 64)},
		{"token prefix", "Bearer " + l.Token[:32]},
		{"token with suffix", "Bearer " + l.Token + "x"},
		{"no scheme", l.Token},
		{"basic", "Basic " + l.Token},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", l.URL, strings.NewReader(initialize))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), l.Token) {
				t.Fatalf("status %d, body %q", resp.StatusCode, body)
			}
		})
	}
	// The SDK client without the token is refused too.
	_, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: l.URL}, nil)
	if err == nil {
		t.Fatal("an SDK client without the token connected")
	}
	// Control: with the token the same request works end to end.
	cs := connectHTTP(t, l.URL, &http.Client{Transport: headerTransport{http.DefaultTransport, "Authorization", "Bearer " + l.Token}})
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo over-http"}})
	if err != nil || res.IsError || !strings.Contains(text(res), "over-http") {
		t.Fatalf("with the token: %v %+v", err, res)
	}
}

func TestListenRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:80", "example.com:80", "nonsense"} {
		if l, err := Listen(addr); !errors.Is(err, ErrListen) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Listen(%q) = %v, want ErrListen", addr, err)
		}
	}
	l, err := Listen("localhost:0")
	if err != nil {
		t.Fatalf("control: localhost: %v", err)
	}
	l.Close()
}

// TestUnixSocketPeer: the socket is 0600, and a peer of another uid that
// gets past the mode (here: the test widens it) is refused by its uid.
func TestUnixSocketPeer(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	dir, err := os.MkdirTemp("", "vak-mcp-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "mcp.sock")
	l := serveHTTP(t, f, "unix:"+sock)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	// Control: our own uid is served.
	cs := connectHTTP(t, l.URL, hc)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo over-unix"}})
	if err != nil || res.IsError || !strings.Contains(text(res), "over-unix") {
		t.Fatalf("same uid: %v %+v", err, res)
	}

	u, err := user.Lookup("vakuser")
	curl, cerr := exec.LookPath("curl")
	if os.Getuid() != 0 || err != nil || cerr != nil {
		t.Skip("another uid needs root, the user vakuser and curl")
	}
	as := func(uid string) (string, error) {
		args := []string{"-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", sock, "-X", "POST",
			"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream", "-d", initialize, "http://localhost/mcp"}
		cmd := exec.Command(curl, args...)
		if uid != "" {
			cmd = exec.Command("runuser", append([]string{"-u", u.Username, "--", curl}, args...)...)
		}
		out, err := cmd.Output()
		return string(out), err
	}
	// The mode alone keeps the other uid out.
	if code, err := as(u.Uid); err == nil || code == "200" {
		t.Fatalf("uid %s connected to a 0600 socket: %q %v", u.Uid, code, err)
	}
	// Past the mode, the peer check refuses it; our uid is still served.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if code, err := as(u.Uid); err != nil || code != "403" {
		t.Fatalf("uid %s through a widened socket: %q %v, want 403", u.Uid, code, err)
	}
	if code, err := as(""); err != nil || code != "200" {
		t.Fatalf("control: own uid with curl: %q %v", code, err)
	}
}

// TestHTTPRequestLimit: over HTTP a request body takes the limit of stdio
// and the worker (wire.MaxRequestBytes), not the SDK's 4 MiB default: a
// write_file of 8 MiB works, one of 17,000,000 bytes gets an answer (413;
// the SDK's client then closes its session), and the server goes on.
func TestHTTPRequestLimit(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	l := serveHTTP(t, f, "127.0.0.1:0")
	cs := connectHTTP(t, l.URL, &http.Client{Transport: headerTransport{http.DefaultTransport, "Authorization", "Bearer " + l.Token}})
	ctx := context.Background()
	content := strings.Repeat("a", 8<<20)
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "8m.txt", "content": content}})
	if err != nil {
		t.Fatalf("write_file of 8 MiB over HTTP: %v", err)
	}
	if res.IsError {
		t.Fatalf("write_file of 8 MiB over HTTP: %s", text(res))
	}
	if st, err := os.Stat(filepath.Join(f.ws, "8m.txt")); err != nil || st.Size() != int64(len(content)) {
		t.Fatalf("8m.txt: %v %v", st, err)
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "17m.txt", "content": strings.Repeat("a", 17_000_000)}})
	if err == nil || !strings.Contains(err.Error(), "413") && !strings.Contains(err.Error(), "Too Large") {
		t.Fatalf("write_file of 17,000,000 bytes over HTTP: %v, want 413", err)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "17m.txt")); err == nil {
		t.Fatal("the oversized write was carried out")
	}
	cs = connectHTTP(t, l.URL, &http.Client{Transport: headerTransport{http.DefaultTransport, "Authorization", "Bearer " + l.Token}})
	if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo still"}}); err != nil || res.IsError {
		t.Fatalf("after it: %v %+v", err, res)
	}
}
