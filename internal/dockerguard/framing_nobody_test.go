package dockerguard

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A body on an endpoint that takes none (an old client's HostConfig on
// start: Privileged) must not reach the engine, however it is framed;
// a request net/http parses as bodiless (Content-Length: 0, no framing)
// is forwarded without reading, and the bytes after it are parsed as the
// next request, not passed on.
func TestNoBodyFraming(t *testing.T) {
	e := setup(t)
	bad := `{"Privileged":true,"Binds":["/:/host"]}`
	// A request whose framing leaves bytes over keeps the connection
	// waiting for a next request: the wait bounds the read only.
	send := func(raw string) string { return sendRaw(t, e.sock, raw, 5*time.Second) }
	const head = "POST /v1.41/containers/x/start HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
	for name, raw := range map[string]string{
		"content-length 0 with a body": head + "Content-Length: 0\r\nConnection: close\r\n\r\n" + bad,
		"content-length":               head + fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(bad)) + bad,
		"chunked":                      head + fmt.Sprintf("Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(bad), bad),
		"no length, no chunking":       head + "Connection: close\r\n\r\n" + bad,
	} {
		out := send(raw)
		e.up.mu.Lock()
		for _, r := range e.up.reqs {
			if strings.Contains(string(r.Body), "Privileged") || strings.Contains(r.Path, "Privileged") {
				t.Errorf("%s: the body reached the engine: %s %s %s", name, r.Method, r.Path, r.Body)
			}
		}
		e.up.reqs = nil
		e.up.mu.Unlock()
		t.Logf("%s: %s", name, strings.SplitN(out, "\r\n", 2)[0])
	}
	// Control: a start without a body is forwarded.
	out := send(head + "Content-Length: 0\r\nConnection: close\r\n\r\n")
	e.up.mu.Lock()
	n := len(e.up.reqs)
	e.up.mu.Unlock()
	if !strings.Contains(out, " 200 ") || n != 1 {
		t.Errorf("control: a bodiless start was not forwarded (%d requests): %s", n, out)
	}
}
