package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"vak/internal/egress/policy"
	"vak/internal/egress/proxy"
	"vak/internal/egress/secrets"
)

// The third floor, "floor relay + records + checks": the records floor
// doing, besides, the checks vak's design makes on every request and
// response, with vak's own policy and secrets packages and the gateway's
// proxy.RemoveHopByHop, in the relay's bare loop (no exchange, no receipts
// package, no HTTP/1 server of vak's):
//
//   - the Host header parsed and normalised (policy.ParseAuthority) and
//     held to the CONNECT authority it came through;
//   - the path checked (policy.CanonicalPath), the name checked for
//     placeholders (CheckName), the policy decided (Policy.Decide);
//   - hop-by-hop headers removed, Accept-Encoding narrowed to what the
//     redactor can read;
//   - foreign credentials refused (ForeignCredential) and every header
//     scanned and the placeholder substituted (RewriteRequest);
//   - the client watched while the request is upstream (a timer armed
//     and stopped per request, as vak watches only requests that take
//     longer than that);
//   - the response's headers and body redacted (RedactHeader,
//     RedactReader) and its length re-framed, since redaction may change
//     it; the record's path scrubbed.
//
// What vak costs above this floor is its plumbing, not its checks.

// watchDelay is when the floor would start watching the client: vak's
// (internal/egress/proxy, bgReadDelay).
const watchDelay = 20 * time.Millisecond

// relayBuffered is how much of a response body of unknown length the floor
// holds to send it with a Content-Length (net/http's and vak's value).
const relayBuffered = 2048

// relayChecks is the floor's policy and secrets: one allow rule and one
// header secret, the configuration startVak gives vak.
type relayChecks struct {
	pol  *policy.Policy
	sess *secrets.Session
}

// newRelayChecks builds the floor's policy and secrets, the secret under
// the given placeholder (the bench client's Authorization carries it).
func newRelayChecks(placeholder string, upPort uint16) *relayChecks {
	pol, err := policy.New([]policy.Rule{{
		Name: "bench", Action: policy.Allow, Proto: policy.ProtoHTTP,
		Hosts:   []policy.HostPattern{policy.MustHostPattern(benchHost)},
		CIDRs:   []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Methods: []string{http.MethodGet, http.MethodPost},
		Ports:   []uint16{upPort},
	}})
	if err != nil {
		log.Fatal(err)
	}
	secs, err := secrets.Load([]secrets.Spec{{
		Name: "BENCH_TOKEN", Source: secrets.Source{Value: secretValue},
		Hosts: []policy.HostPattern{policy.MustHostPattern(benchHost)}, Inject: secrets.Header,
	}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	sess := secrets.NewSession(secs, secrets.SeedSession(map[string]string{"BENCH_TOKEN": placeholder}))
	if got := sess.Env()["BENCH_TOKEN"]; got != placeholder {
		log.Fatalf("checks floor: placeholder %q not taken (got %q)", placeholder, got)
	}
	return &relayChecks{pol: pol, sess: sess}
}

// errRefused is a request the checks floor would answer itself (the bench
// sends none: a refusal ends the connection and shows as an error).
var errRefused = errors.New("checks floor: request refused")

// request checks req, which came through a tunnel to host:port, and
// rewrites it for upstream. It returns the path for the record and the
// stop of the client watch.
func (c *relayChecks) request(req *http.Request, host policy.Host, port uint16) (string, func() bool, error) {
	h, p, err := policy.ParseAuthority(req.Host, port)
	if err != nil || h != host || p != port {
		return "", nil, fmt.Errorf("%w: Host %q", errRefused, req.Host)
	}
	if err := policy.CanonicalPath(req.URL.Path); err != nil {
		return "", nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	if err := c.sess.CheckName(h.Name); err != nil {
		return "", nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	d := c.pol.Decide(policy.Request{Proto: policy.ProtoHTTP, Host: h, Port: p, Method: req.Method, Path: req.URL.Path})
	if !d.Allow {
		return "", nil, fmt.Errorf("%w: %s", errRefused, d.Reason)
	}
	proxy.RemoveHopByHop(req.Header)
	req.Header.Set("Accept-Encoding", "gzip")
	if !d.AllowForeignCredentials {
		if err := c.sess.ForeignCredential(h, req.Header); err != nil {
			return "", nil, fmt.Errorf("%w: %w", errRefused, err)
		}
	}
	if _, err := c.sess.RewriteRequest(h, req, true); err != nil {
		return "", nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	watch := time.AfterFunc(watchDelay, func() {})
	return c.sess.Scrub(req.URL.Path), watch.Stop, nil
}

// response redacts resp's headers and body and re-frames it: a body that
// ends within relayBuffered bytes goes out with its length, a longer one
// chunked.
func (c *relayChecks) response(resp *http.Response) error {
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return fmt.Errorf("checks floor: %q-encoded response", ce)
	}
	proxy.RemoveHopByHop(resp.Header)
	c.sess.RedactHeader(resp.Header)
	resp.Header.Del("Content-Length")
	body := c.sess.RedactReader(resp.Body)
	var buf bytes.Buffer
	n, err := io.CopyN(&buf, body, relayBuffered+1)
	switch {
	case err == io.EOF:
		resp.ContentLength, resp.TransferEncoding, resp.Body = n, nil, io.NopCloser(&buf)
	case err != nil:
		return err
	default:
		resp.ContentLength, resp.TransferEncoding, resp.Body = -1, []string{"chunked"}, struct {
			io.Reader
			io.Closer
		}{io.MultiReader(&buf, body), resp.Body}
	}
	return nil
}
