package dockerguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// ErrNoAnswer reports a socket on which no Docker engine answered Ping.
var ErrNoAnswer = errors.New("dockerguard: no Docker engine answered")

// Ping asks the Engine API served on the Unix socket for /info (what
// `docker info` asks) and returns the engine's ServerVersion. Asked of the
// guard's socket, an answer means the guard serves and the engine behind it
// answers: a claimed warm-pool pair is checked this way, from inside the
// session (`vak dockerguard ping`, run by the session's worker), without a
// `docker exec` into the sidecar. Errors wrap ErrNoAnswer.
func Ping(ctx context.Context, socket string) (string, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/info", nil)
	if err != nil {
		return "", err
	}
	res, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w on %s: %w", ErrNoAnswer, socket, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("%w on %s: %w", ErrNoAnswer, socket, err)
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%w on %s: GET /info: %s: %.200s", ErrNoAnswer, socket, res.Status, body)
	}
	var info struct{ ServerVersion string }
	if err := json.Unmarshal(body, &info); err != nil || info.ServerVersion == "" {
		return "", fmt.Errorf("%w on %s: GET /info answered without a server version", ErrNoAnswer, socket)
	}
	return info.ServerVersion, nil
}
