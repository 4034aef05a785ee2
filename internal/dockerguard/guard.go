// Package dockerguard is a Docker Engine API proxy that stands between the
// agent and a nested engine's raw socket (docs/nested-docker.md). It decodes every
// request it lets through into moby's own API types
// (github.com/moby/moby/api), denies what would break the sandbox with a
// 403 whose message names the field at fault, denies every endpoint and
// body field it does not know, and forwards its own re-encoding of what it
// checked (so the engine never sees bytes the guard did not decode: the
// CVE-2024-41110 class of "Content-Length: 0 with a body" or chunked
// bodies). The engine reads parameters from the query only, as the guard
// does: form and multipart bodies are refused and the engine gets the
// guard's Content-Type (params.go). On container create it injects the
// trust bind, the CA environment, the DNS server and owner labels. A bind
// of the guard's own socket (Testcontainers' Ryuk) is rewritten to a
// reaper socket that only lists and removes. See docs/nested-docker.md.
package dockerguard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Policy is what the guard allows and injects.
type Policy struct {
	// Workspace is the workspace path (the same in agent, sidecar and
	// inner containers); bind sources inside it are allowed.
	Workspace string
	// TrustDir is the trust directory, bound read-only into every inner
	// container (and allowed as a read-only bind source).
	TrustDir string
	// TrustEnv are the CA variables (NAME=value) set in every inner
	// container; JAVA_TOOL_OPTIONS and NODE_OPTIONS are merged with the
	// image's and the request's.
	TrustEnv []string
	// Pool is the inner address pool: network subnets and fixed addresses
	// must be inside it.
	Pool netip.Prefix
	// DNS is the resolver set in every inner container (the gateway).
	DNS netip.Addr
	// Labels go on every container, network and volume created.
	Labels map[string]string
	// GuardSocket is the path of the socket the agent uses (DOCKER_HOST);
	// a bind of it is rewritten to ReaperSocket.
	GuardSocket string
	// ReaperSocket is the filtered socket for reapers (Ryuk).
	ReaperSocket string
	// Env are variables (NAME=value) set in every inner container whose
	// request does not set NAME: the secret placeholders the trusted
	// config propagates (session.docker_placeholders). Empty by default:
	// inner containers get no placeholders.
	Env []string
	// StageDir, if set, is where workspace bind sources are staged
	// (stageBind: opened beneath the workspace and bind-mounted there, so
	// the engine mounts the object the guard checked). It must be on a
	// filesystem only the engine and the guard see; the guard needs
	// CAP_SYS_ADMIN in the engine's mount namespace. Empty: sources are
	// checked by resolving their symlinks, which the agent can race.
	StageDir string
}

// SafeCaps are the capabilities an inner container may add: Docker's
// defaults (adding one it already has changes nothing). Never SYS_ADMIN,
// NET_ADMIN, SYS_MODULE, SYS_PTRACE, DAC_READ_SEARCH, ...
var SafeCaps = map[string]bool{
	"AUDIT_WRITE": true, "CHOWN": true, "DAC_OVERRIDE": true, "FOWNER": true, "FSETID": true,
	"KILL": true, "MKNOD": true, "NET_BIND_SERVICE": true, "NET_RAW": true, "SETFCAP": true,
	"SETGID": true, "SETPCAP": true, "SETUID": true, "SYS_CHROOT": true,
}

// maxBody bounds a JSON request body the guard decodes.
const maxBody = 4 << 20

// Guard is the proxy.
type Guard struct {
	p      Policy
	proxy  *httputil.ReverseProxy
	client *http.Client
	reaper bool
	stage  *stageState
	// sessions ends the BuildKit sessions of denied builds (session.go).
	sessions *buildSessions
}

// stageState tracks the guard's staged bind sources (stageBind): a counter
// for their names, and how many requests in flight hold each one (a staged
// source is swept only when no container uses it and no request holds it).
type stageState struct {
	n        atomic.Uint64
	mu       sync.Mutex
	inflight map[string]int
}

func newStageState() *stageState { return &stageState{inflight: map[string]int{}} }

// stagedKey carries a request's *stagedReq in its context.
type stagedKey struct{}

// stagedReq lists what one request staged.
type stagedReq struct{ paths []string }

// New returns the agent-facing guard forwarding to the raw socket.
func New(p Policy, rawSocket string) (*Guard, error) {
	if !strings.HasPrefix(p.Workspace, "/") || !strings.HasPrefix(p.TrustDir, "/") {
		return nil, fmt.Errorf("dockerguard: workspace %q and trust dir %q must be absolute", p.Workspace, p.TrustDir)
	}
	if !p.Pool.IsValid() || !p.DNS.IsValid() {
		return nil, errors.New("dockerguard: the policy needs the inner pool and the DNS server")
	}
	// Connections to the raw socket are kept for reuse (the default keeps
	// two per host: a compose or Testcontainers burst would dial anew).
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", rawSocket)
	}, MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	if p.StageDir != "" {
		if !strings.HasPrefix(p.StageDir, "/") {
			return nil, fmt.Errorf("dockerguard: stage dir %q must be absolute", p.StageDir)
		}
		if err := prepareStage(p.StageDir); err != nil {
			return nil, err
		}
	}
	g := &Guard{p: p, client: &http.Client{Transport: tr}, stage: newStageState(), sessions: newBuildSessions()}
	g.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
			r.Out.Host = "docker"
		},
		Transport: tr,
		// No periodic flushing: a response with a length goes out in one
		// write; streams (logs -f, events, pull and build progress: no
		// Content-Length) and upgraded connections are flushed on every
		// write by ReverseProxy itself.
		FlushInterval: 0,
		// A build the engine refuses at once leaves its BuildKit session
		// as a denied one does (session.go).
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode >= 400 && strings.HasSuffix(res.Request.URL.Path, "/build") {
				g.sessions.deny(res.Request.URL.Query().Get("session"))
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusBadGateway, "vak dockerguard: the nested Docker engine is not answering: "+err.Error())
		},
	}
	return g, nil
}

// Reaper returns the filtered handler for the reaper socket: it shares the
// upstream but allows only pinging, listing and removing.
func (g *Guard) Reaper() http.Handler {
	return &Guard{p: g.p, proxy: g.proxy, client: g.client, reaper: true, stage: g.stage, sessions: g.sessions}
}

// Denied is a request the guard refuses.
type Denied struct{ Reason string }

func (d *Denied) Error() string { return "vak dockerguard: denied: " + d.Reason }

func deny(f string, a ...any) error { return &Denied{Reason: fmt.Sprintf(f, a...)} }

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

var versionPrefix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^/v[0-9]+\.[0-9]+(/|$)`) })

// ServeHTTP checks and forwards one request.
func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if m := versionPrefix().FindString(path); m != "" {
		path = "/" + strings.TrimPrefix(path[len(m):], "/")
	}
	if strings.Contains(path, "//") || strings.Contains(path, "/../") || strings.HasSuffix(path, "/..") {
		writeError(w, http.StatusForbidden, deny("path %q is not canonical", r.URL.Path).Error())
		return
	}
	if g.p.StageDir != "" && !g.reaper {
		held := &stagedReq{}
		r = r.WithContext(context.WithValue(r.Context(), stagedKey{}, held))
		// Once the engine has answered, what this request staged is
		// either used by the container it created or swept later.
		defer g.release(held, false)
	}
	if err := g.check(r, path); err != nil {
		if held, ok := r.Context().Value(stagedKey{}).(*stagedReq); ok {
			g.release(held, true) // never reached the engine
		}
		if path == "/build" {
			// The client would wait for the build's session forever
			// (session.go).
			g.sessions.deny(query(r).Get("session"))
		}
		code := http.StatusForbidden
		var d *Denied
		if !errors.As(err, &d) {
			code = http.StatusBadRequest
		}
		writeError(w, code, err.Error())
		return
	}
	if path == "/session" {
		id := r.Header.Get(sessionHeader)
		if g.sessions.isDenied(id) {
			endSession(w)
			return
		}
		w = &hijackHook{ResponseWriter: w, hijacked: func(c net.Conn) net.Conn { return g.sessions.track(id, c) }}
	}
	g.proxy.ServeHTTP(w, r)
}

type route struct {
	method string
	re     *regexp.Regexp
	check  func(g *Guard, r *http.Request, m []string) error
	reaper bool // allowed on the reaper socket too
}

const id = `([^/]+)`

func rt(method, pattern string, check func(*Guard, *http.Request, []string) error, reaper bool) route {
	return route{method, regexp.MustCompile("^" + strings.ReplaceAll(pattern, "{id}", id) + "$"), check, reaper}
}

// streams are endpoints whose bodies are archives or raw streams, not
// configuration: they are forwarded as they come.
func stream(*Guard, *http.Request, []string) error { return nil }

// noBody: the endpoint takes no configuration body.
func noBody(_ *Guard, r *http.Request, _ []string) error {
	if r.Body == nil || r.Body == http.NoBody {
		// net/http gives a request without a body (no framing, or
		// Content-Length: 0) NoBody: bytes after it are the next request
		// on the connection, parsed and checked as such.
		return nil
	}
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && string(t) != "{}" && string(t) != "null" {
		return deny("%s %s takes no body (got %d bytes)", r.Method, r.URL.Path, len(b))
	}
	setBody(r, nil)
	return nil
}

// routes are compiled on first use, not when any vak process starts (every
// vak process links this package: the worker's start-up is measured).
var routes = sync.OnceValue(func() []route {
	return []route{
		rt("GET", "/_ping", noBody, true), rt("HEAD", "/_ping", noBody, true),
		rt("GET", "/version", noBody, true), rt("GET", "/info", noBody, true),
		rt("GET", "/events", noBody, false), rt("GET", "/system/df", noBody, false),

		rt("GET", "/containers/json", noBody, true),
		rt("POST", "/containers/create", (*Guard).containerCreate, false),
		rt("GET", "/containers/{id}/(json|logs|top|stats|changes|export|archive)", noBody, true),
		rt("HEAD", "/containers/{id}/archive", noBody, false),
		rt("PUT", "/containers/{id}/archive", stream, false),
		rt("POST", "/containers/{id}/start", noBody, false),
		rt("POST", "/containers/{id}/(stop|restart|kill|wait|pause|unpause|rename|resize|attach)", noBody, false),
		rt("POST", "/containers/{id}/update", (*Guard).containerUpdate, false),
		rt("POST", "/containers/{id}/exec", (*Guard).execCreate, false),
		rt("DELETE", "/containers/{id}", noBody, true),
		rt("POST", "/containers/prune", noBody, true),
		rt("POST", "/exec/{id}/start", (*Guard).execStart, false),
		rt("POST", "/exec/{id}/resize", noBody, false),
		rt("GET", "/exec/{id}/json", noBody, false),

		rt("GET", "/images/json", noBody, true),
		rt("GET", "/images/(.+)/(json|history)", noBody, false),
		rt("POST", "/images/create", (*Guard).imageCreate, false),
		rt("POST", "/images/load", stream, false),
		rt("GET", "/images/get", noBody, false),
		rt("GET", "/images/(.+)/get", noBody, false),
		rt("POST", "/images/(.+)/(tag|push)", noBody, false),
		rt("DELETE", "/images/(.+)", noBody, true),
		rt("POST", "/images/prune", noBody, true),
		rt("POST", "/build", (*Guard).build, false),
		rt("POST", "/build/prune", noBody, true),
		rt("POST", "/session", noBody, false),

		rt("GET", "/networks", noBody, true),
		rt("GET", "/networks/{id}", noBody, true),
		rt("POST", "/networks/create", (*Guard).networkCreate, false),
		rt("POST", "/networks/{id}/connect", (*Guard).networkConnect, false),
		rt("POST", "/networks/{id}/disconnect", (*Guard).networkDisconnect, false),
		rt("DELETE", "/networks/{id}", noBody, true),
		rt("POST", "/networks/prune", noBody, true),

		rt("GET", "/volumes", noBody, true),
		rt("GET", "/volumes/{id}", noBody, true),
		rt("POST", "/volumes/create", (*Guard).volumeCreate, false),
		rt("DELETE", "/volumes/{id}", noBody, true),
		rt("POST", "/volumes/prune", noBody, true),
	}
})

func (g *Guard) check(r *http.Request, path string) error {
	if err := checkParams(r); err != nil {
		return err
	}
	for _, rt := range routes() {
		if r.Method != rt.method {
			continue
		}
		m := rt.re.FindStringSubmatch(path)
		if m == nil {
			continue
		}
		if g.reaper && !rt.reaper {
			return deny("the reaper socket does not allow %s %s", r.Method, path)
		}
		if err := rt.check(g, r, m); err != nil {
			return err
		}
		forwardType(r)
		return nil
	}
	return deny("endpoint %s %s is not allowed (unknown endpoints are denied: plugins, swarm, services, secrets, configs, ...)", r.Method, path)
}

// readBody reads the whole body, whatever its framing (Content-Length,
// chunked, none).
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("vak dockerguard: read request body: %w", err)
	}
	if len(b) > maxBody {
		return nil, deny("request body over %d bytes", maxBody)
	}
	return b, nil
}

// setBody replaces the body with exactly b (JSON the guard encoded, or
// nothing), framed by Content-Length.
func setBody(r *http.Request, b []byte) {
	r.Body = encodedBody{bytes.NewReader(b)}
	r.ContentLength = int64(len(b))
	r.TransferEncoding = nil
	r.Header.Del("Transfer-Encoding")
	if len(b) == 0 {
		r.Body = http.NoBody
		r.Header.Del("Content-Length")
	} else {
		r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	}
}

// decodeStrict decodes exactly one JSON value into v, denying unknown
// fields and trailing data.
func decodeStrict(b []byte, v any, what string) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return deny("%s: empty body", what)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return deny("%s: %v", what, err)
	}
	if dec.More() {
		return deny("%s: trailing data after the JSON body", what)
	}
	if _, err := dec.Token(); err != io.EOF {
		return deny("%s: trailing data after the JSON body", what)
	}
	return nil
}

// rewrite decodes the body into v (after dropping legacy fields older
// clients send with zero values), lets fix check and change it, and sets
// the body to v's encoding.
func rewrite[T any](r *http.Request, what string, legacy map[string][]string, fix func(*T) error) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if b, err = dropLegacy(b, legacy, what); err != nil {
		return err
	}
	var v T
	if err := decodeStrict(b, &v, what); err != nil {
		return err
	}
	if err := fix(&v); err != nil {
		return err
	}
	out, err := json.Marshal(&v)
	if err != nil {
		return fmt.Errorf("vak dockerguard: encode %s: %w", what, err)
	}
	setBody(r, out)
	return nil
}

// dropLegacy removes fields that older clients (Docker 20.10's CLI,
// docker-compose 1.29) still send but moby's current types no longer
// have, when they hold zero values; a non-zero value is denied (the guard
// cannot judge it), except for names ending in "*", which are harmless
// with any value and always dropped. legacy maps a JSON object path ("" = top level,
// "HostConfig") to the field names.
func dropLegacy(b []byte, legacy map[string][]string, what string) ([]byte, error) {
	if len(legacy) == 0 || len(bytes.TrimSpace(b)) == 0 {
		return b, nil
	}
	var top map[string]json.RawMessage
	if err := decodeStrict(b, &top, what); err != nil {
		return nil, err
	}
	changed := false
	for obj, names := range legacy {
		m := top
		var sub map[string]json.RawMessage
		if obj != "" {
			raw, ok := top[obj]
			if !ok || string(raw) == "null" {
				continue
			}
			if err := json.Unmarshal(raw, &sub); err != nil {
				return nil, deny("%s.%s: %v", what, obj, err)
			}
			m = sub
		}
		for _, n := range names {
			n, anyValue := strings.CutSuffix(n, "*")
			for k, v := range m {
				if !strings.EqualFold(k, n) {
					continue
				}
				if anyValue {
					delete(m, k)
					changed = true
					continue
				}
				switch strings.TrimSpace(string(v)) {
				case "0", "null", `""`, "false", "[]", "{}":
					delete(m, k)
					changed = true
				default:
					return nil, deny("%s: field %s%s is not supported (value %s)", what, prefix(obj), k, v)
				}
			}
		}
		if obj != "" && changed {
			nb, _ := json.Marshal(sub)
			top[obj] = nb
		}
	}
	if !changed {
		return b, nil
	}
	return json.Marshal(top)
}

func prefix(obj string) string {
	if obj == "" {
		return ""
	}
	return obj + "."
}

func query(r *http.Request) url.Values { return r.URL.Query() }
