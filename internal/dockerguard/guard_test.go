package dockerguard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is a real HTTP server on a unix socket standing in for the
// engine: it records what the guard forwards and answers the few lookups
// the guard makes (image env, container labels).
type upstream struct {
	mu   sync.Mutex
	reqs []recorded
}

var lookup = regexp.MustCompile(`^/(images|containers)/[^/]+/json$`)

type recorded struct {
	Method, Path string
	Body         []byte
	// ContentType is every Content-Type header the engine received.
	ContentType []string
	// Form is what the engine's handlers read as parameters: they call
	// Request.ParseForm (moby's httputils.ParseForm) or FormValue, which
	// parses the query and, by Content-Type, a form or multipart body
	// (engineForm).
	Form url.Values
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	form := engineForm(r, b)
	switch {
	case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/images/app:1/json"):
		w.Write([]byte(`{"Config":{"Env":["PATH=/bin","JAVA_TOOL_OPTIONS=-Xmx1g"]}}`))
		return
	case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/containers/ours/json"):
		w.Write([]byte(`{"Config":{"Labels":{"vak.owner":"t"}}}`))
		return
	case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/containers/foreign/json"):
		w.Write([]byte(`{"Config":{"Labels":{}}}`))
		return
	case r.Method == "GET" && lookup.MatchString(r.URL.Path):
		http.NotFound(w, r)
		return
	}
	u.mu.Lock()
	u.reqs = append(u.reqs, recorded{r.Method, r.URL.Path, b, r.Header.Values("Content-Type"), form})
	u.mu.Unlock()
	w.Write([]byte(`{"ok":true}`))
}

// engineForm parses r's parameters as the engine does, its body being b:
// /build's handler starts with FormValue, which parses a multipart body
// too; the others call ParseForm (query and urlencoded body). Both are
// what net/http does for the engine; FormValue's parse is the superset.
func engineForm(r *http.Request, b []byte) url.Values {
	c := r.Clone(r.Context())
	c.Body = io.NopCloser(bytes.NewReader(b))
	c.Form, c.PostForm, c.MultipartForm = nil, nil, nil
	c.FormValue("")
	if c.MultipartForm != nil {
		c.MultipartForm.RemoveAll()
	}
	return c.Form
}

func (u *upstream) last() (recorded, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		return recorded{}, 0
	}
	return u.reqs[len(u.reqs)-1], len(u.reqs)
}

type env struct {
	up            *upstream
	sock, reaper  string
	rawSock       string
	ws, trust     string
	client, rclnt *http.Client
}

func serve(t testing.TB, h http.Handler, sock string) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func setup(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{up: &upstream{}, ws: filepath.Join(dir, "ws"), trust: filepath.Join(dir, "trust")}
	os.MkdirAll(e.ws, 0o755)
	os.MkdirAll(e.trust, 0o755)
	raw := filepath.Join(dir, "raw.sock")
	serve(t, e.up, raw)
	e.rawSock = raw
	e.sock, e.reaper = filepath.Join(dir, "guard.sock"), filepath.Join(dir, "reaper.sock")
	g, err := New(Policy{
		Workspace: e.ws, TrustDir: e.trust,
		TrustEnv: []string{"SSL_CERT_FILE=" + e.trust + "/ca.pem", "JAVA_TOOL_OPTIONS=-Djavax.net.ssl.trustStore=" + e.trust + "/ca.jks"},
		Pool:     netip.MustParsePrefix("10.213.0.0/16"), DNS: netip.MustParseAddr("172.30.0.2"),
		Labels:      map[string]string{"vak.owner": "t"},
		GuardSocket: e.sock, ReaperSocket: e.reaper,
	}, raw)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, g, e.sock)
	serve(t, g.Reaper(), e.reaper)
	e.client, e.rclnt = unixClient(e.sock), unixClient(e.reaper)
	return e
}

// do sends a request and reports whether the upstream received it.
func (e *env) do(t *testing.T, c *http.Client, method, path, body string) (code int, msg string, fwd *recorded) {
	t.Helper()
	_, before := e.up.last()
	req, _ := http.NewRequest(method, "http://docker"+path, strings.NewReader(body))
	if body == "" {
		req.Body = nil
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var m struct{ Message string }
	if json.Unmarshal(b, &m) == nil && m.Message != "" {
		b = []byte(m.Message)
	}
	if r, n := e.up.last(); n > before {
		return res.StatusCode, string(b), &r
	}
	return res.StatusCode, string(b), nil
}

func create(host string) string {
	return `{"Image":"app:1","Cmd":["true"],"HostConfig":{` + host + `}}`
}

// TestDenials: each rule with the offending request (403 naming the field,
// nothing forwarded) and a positive control (the same request without the
// offending part is forwarded).
func TestDenials(t *testing.T) {
	e := setup(t)
	os.Symlink("/", filepath.Join(e.ws, "escape"))
	os.MkdirAll(filepath.Join(e.ws, "data"), 0o755)
	type req struct{ method, path, body string }
	for _, tc := range []struct {
		name    string
		bad     req
		want    string
		control req
	}{
		{"privileged", req{"POST", "/v1.41/containers/create", create(`"Privileged":true`)}, "HostConfig.Privileged", req{"POST", "/v1.41/containers/create", create(`"Privileged":false`)}},
		{"cap SYS_ADMIN", req{"POST", "/containers/create", create(`"CapAdd":["SYS_ADMIN"]`)}, `CapAdd "SYS_ADMIN"`, req{"POST", "/containers/create", create(`"CapAdd":["NET_BIND_SERVICE"]`)}},
		{"cap NET_ADMIN", req{"POST", "/containers/create", create(`"CapAdd":["CAP_NET_ADMIN"]`)}, `CapAdd "CAP_NET_ADMIN"`, req{"POST", "/containers/create", create(`"CapAdd":["CAP_CHOWN"]`)}},
		{"cap ALL", req{"POST", "/containers/create", create(`"CapAdd":["ALL"]`)}, `CapAdd "ALL"`, req{"POST", "/containers/create", create(`"CapDrop":["ALL"]`)}},
		{"cap SYS_PTRACE", req{"POST", "/containers/create", create(`"CapAdd":["sys_ptrace"]`)}, `CapAdd "sys_ptrace"`, req{"POST", "/containers/create", create(``)}},
		{"net host", req{"POST", "/containers/create", create(`"NetworkMode":"host"`)}, "NetworkMode", req{"POST", "/containers/create", create(`"NetworkMode":"bridge"`)}},
		{"net foreign container", req{"POST", "/containers/create", create(`"NetworkMode":"container:foreign"`)}, "not a container of this sandbox", req{"POST", "/containers/create", create(`"NetworkMode":"container:ours"`)}},
		{"pid host", req{"POST", "/containers/create", create(`"PidMode":"host"`)}, "HostConfig.PidMode", req{"POST", "/containers/create", create(`"PidMode":""`)}},
		{"pid container", req{"POST", "/containers/create", create(`"PidMode":"container:ours"`)}, "HostConfig.PidMode", req{"POST", "/containers/create", create(``)}},
		{"ipc host", req{"POST", "/containers/create", create(`"IpcMode":"host"`)}, "HostConfig.IpcMode", req{"POST", "/containers/create", create(`"IpcMode":"private"`)}},
		{"uts host", req{"POST", "/containers/create", create(`"UTSMode":"host"`)}, "HostConfig.UTSMode", req{"POST", "/containers/create", create(``)}},
		{"userns host", req{"POST", "/containers/create", create(`"UsernsMode":"host"`)}, "HostConfig.UsernsMode", req{"POST", "/containers/create", create(``)}},
		{"cgroupns host", req{"POST", "/containers/create", create(`"CgroupnsMode":"host"`)}, "HostConfig.CgroupnsMode", req{"POST", "/containers/create", create(`"CgroupnsMode":"private"`)}},
		{"cgroup parent", req{"POST", "/containers/create", create(`"CgroupParent":"/"`)}, "CgroupParent", req{"POST", "/containers/create", create(``)}},
		{"devices", req{"POST", "/containers/create", create(`"Devices":[{"PathOnHost":"/dev/sda","PathInContainer":"/dev/sda","CgroupPermissions":"rwm"}]`)}, "HostConfig.Devices", req{"POST", "/containers/create", create(`"Devices":[]`)}},
		{"device cgroup rules", req{"POST", "/containers/create", create(`"DeviceCgroupRules":["b 254:0 rwm"]`)}, "DeviceCgroupRules", req{"POST", "/containers/create", create(``)}},
		{"device requests", req{"POST", "/containers/create", create(`"DeviceRequests":[{"Driver":"nvidia","Count":-1}]`)}, "DeviceRequests", req{"POST", "/containers/create", create(``)}},
		{"seccomp unconfined", req{"POST", "/containers/create", create(`"SecurityOpt":["seccomp=unconfined"]`)}, "SecurityOpt", req{"POST", "/containers/create", create(`"SecurityOpt":["no-new-privileges"]`)}},
		{"apparmor unconfined", req{"POST", "/containers/create", create(`"SecurityOpt":["apparmor=unconfined"]`)}, "SecurityOpt", req{"POST", "/containers/create", create(``)}},
		{"systempaths", req{"POST", "/containers/create", create(`"SecurityOpt":["systempaths=unconfined"]`)}, "SecurityOpt", req{"POST", "/containers/create", create(``)}},
		{"masked paths emptied", req{"POST", "/containers/create", create(`"MaskedPaths":[]`)}, "MaskedPaths", req{"POST", "/containers/create", create(``)}},
		{"sysctls", req{"POST", "/containers/create", create(`"Sysctls":{"net.ipv4.conf.all.route_localnet":"1"}`)}, "Sysctls", req{"POST", "/containers/create", create(`"Sysctls":{}`)}},
		{"bind root", req{"POST", "/containers/create", create(`"Binds":["/:/host"]`)}, "outside the workspace", req{"POST", "/containers/create", create(`"Binds":["WS/data:/data"]`)}},
		{"bind raw socket dir", req{"POST", "/containers/create", create(`"Binds":["/run/vak-dockerd:/x"]`)}, "outside the workspace", req{"POST", "/containers/create", create(`"Binds":["named:/x"]`)}},
		{"bind dotdot", req{"POST", "/containers/create", create(`"Binds":["WS/../..:/x"]`)}, "outside the workspace", req{"POST", "/containers/create", create(`"Binds":["WS:/x"]`)}},
		{"bind symlink out", req{"POST", "/containers/create", create(`"Binds":["WS/escape:/x"]`)}, "resolves to", req{"POST", "/containers/create", create(`"Binds":["WS/data:/x:ro"]`)}},
		{"bind trust rw", req{"POST", "/containers/create", create(`"Binds":["TRUST:/t"]`)}, "read-only", req{"POST", "/containers/create", create(`"Binds":["TRUST:/t:ro"]`)}},
		{"mount bind out", req{"POST", "/containers/create", create(`"Mounts":[{"Type":"bind","Source":"/var/lib/docker","Target":"/x"}]`)}, "outside the workspace", req{"POST", "/containers/create", create(`"Mounts":[{"Type":"bind","Source":"WS/data","Target":"/x"}]`)}},
		{"mount volume driver opts", req{"POST", "/containers/create", create(`"Mounts":[{"Type":"volume","Source":"v","Target":"/x","VolumeOptions":{"DriverConfig":{"Name":"local","Options":{"type":"none","o":"bind","device":"/"}}}}]`)}, "driver configuration", req{"POST", "/containers/create", create(`"Mounts":[{"Type":"volume","Source":"v","Target":"/x"}]`)}},
		{"mount npipe", req{"POST", "/containers/create", create(`"Mounts":[{"Type":"npipe","Source":"x","Target":"/x"}]`)}, `type "npipe"`, req{"POST", "/containers/create", create(`"Mounts":[{"Type":"tmpfs","Target":"/x"}]`)}},
		{"volume driver", req{"POST", "/containers/create", create(`"VolumeDriver":"nfs"`)}, "VolumeDriver", req{"POST", "/containers/create", create(``)}},
		{"volumes from", req{"POST", "/containers/create", create(`"VolumesFrom":["other"]`)}, "VolumesFrom", req{"POST", "/containers/create", create(``)}},
		{"log driver", req{"POST", "/containers/create", create(`"LogConfig":{"Type":"syslog","Config":{"syslog-address":"tcp://1.2.3.4:514"}}`)}, "LogConfig.Type", req{"POST", "/containers/create", create(`"LogConfig":{"Type":"json-file"}`)}},
		{"runtime", req{"POST", "/containers/create", create(`"Runtime":"io.containerd.runsc.v1"`)}, "Runtime", req{"POST", "/containers/create", create(`"Runtime":"runc"`)}},
		{"unknown field", req{"POST", "/containers/create", create(`"Privileged2":true`)}, "unknown field", req{"POST", "/containers/create", create(``)}},
		{"unknown top field", req{"POST", "/containers/create", `{"Image":"app:1","Frobnicate":1}`}, "unknown field", req{"POST", "/containers/create", `{"Image":"app:1"}`}},
		{"trailing data", req{"POST", "/containers/create", create(``) + `{"HostConfig":{"Privileged":true}}`}, "trailing data", req{"POST", "/containers/create", create(``)}},
		{"endpoint ip outside pool", req{"POST", "/containers/create", `{"Image":"app:1","NetworkingConfig":{"EndpointsConfig":{"n":{"IPAMConfig":{"IPv4Address":"172.17.0.9"}}}}}`}, "outside the pool", req{"POST", "/containers/create", `{"Image":"app:1","NetworkingConfig":{"EndpointsConfig":{"n":{"IPAMConfig":{"IPv4Address":"10.213.4.9"}}}}}`}},
		{"exec privileged", req{"POST", "/containers/x/exec", `{"Cmd":["sh"],"Privileged":true}`}, "exec Privileged", req{"POST", "/containers/x/exec", `{"Cmd":["sh"]}`}},
		{"start with hostconfig", req{"POST", "/containers/x/start", `{"Privileged":true}`}, "takes no body", req{"POST", "/containers/x/start", ``}},
		{"update devices", req{"POST", "/containers/x/update", `{"DeviceCgroupRules":["c *:* rwm"]}`}, "DeviceCgroupRules", req{"POST", "/containers/x/update", `{"Memory":1000000}`}},
		{"network driver", req{"POST", "/networks/create", `{"Name":"n","Driver":"macvlan"}`}, "Driver", req{"POST", "/networks/create", `{"Name":"n","Driver":"bridge"}`}},
		{"network bridge name", req{"POST", "/networks/create", `{"Name":"n","Options":{"com.docker.network.bridge.name":"eth0"}}`}, "com.docker.network.bridge.name", req{"POST", "/networks/create", `{"Name":"n","Options":{"com.docker.network.bridge.enable_icc":"true"}}`}},
		{"network subnet", req{"POST", "/networks/create", `{"Name":"n","IPAM":{"Config":[{"Subnet":"172.30.0.0/24"}]}}`}, "outside the pool", req{"POST", "/networks/create", `{"Name":"n","IPAM":{"Config":[{"Subnet":"10.213.9.0/24"}]}}`}},
		{"network subnet wider than pool", req{"POST", "/networks/create", `{"Name":"n","IPAM":{"Config":[{"Subnet":"10.0.0.0/8"}]}}`}, "outside the pool", req{"POST", "/networks/create", `{"Name":"n"}`}},
		{"network ipv6", req{"POST", "/networks/create", `{"Name":"n","EnableIPv6":true}`}, "EnableIPv6", req{"POST", "/networks/create", `{"Name":"n","EnableIPv6":false}`}},
		{"volume driver opts", req{"POST", "/volumes/create", `{"Name":"v","DriverOpts":{"type":"none","o":"bind","device":"/"}}`}, "DriverOpts", req{"POST", "/volumes/create", `{"Name":"v"}`}},
		{"volume driver", req{"POST", "/volumes/create", `{"Name":"v","Driver":"nfs"}`}, "Driver", req{"POST", "/volumes/create", `{"Name":"v","Driver":"local"}`}},
		{"build network host", req{"POST", "/build?networkmode=host", ""}, "networkmode", req{"POST", "/build?networkmode=default", ""}},
		{"build remote", req{"POST", "/build?remote=https://example.com/x.git", ""}, "remote", req{"POST", "/build?t=x", ""}},
		{"build client-session without BuildKit", req{"POST", "/build?remote=client-session", ""}, "remote", req{"POST", "/build?remote=client-session&version=2", ""}},
		{"network legacy field with a value", req{"POST", "/networks/create", `{"Name":"n","CheckDuplicate":true,"Driver":"overlay"}`}, "Driver", req{"POST", "/networks/create", `{"Name":"n","CheckDuplicate":true}`}},
		{"image import url", req{"POST", "/images/create?fromSrc=http://canary.test/x.tar", ""}, "fromSrc", req{"POST", "/images/create?fromImage=app&tag=1", ""}},
		{"image import url as a second value", req{"POST", "/images/create?fromSrc=-&fromSrc=http://canary.test/x.tar", ""}, "fromSrc", req{"POST", "/images/create?fromSrc=-&repo=x", ""}},
		{"build securityopt as a second value", req{"POST", "/build?securityopt=&securityopt=seccomp%3Dunconfined", ""}, "securityopt", req{"POST", "/build?t=x&t=y", ""}},
		{"query with a ; separator", req{"POST", "/images/create?repo=x;fromSrc=http://canary.test/x.tar", ""}, "query", req{"POST", "/images/create?repo=x&fromSrc=-", ""}},
		{"plugins", req{"GET", "/v1.41/plugins", ""}, "not allowed", req{"GET", "/v1.41/images/json", ""}},
		{"plugin install", req{"POST", "/plugins/pull?remote=x", ""}, "not allowed", req{"GET", "/info", ""}},
		{"swarm", req{"POST", "/swarm/init", `{}`}, "not allowed", req{"GET", "/version", ""}},
		{"services", req{"POST", "/services/create", `{}`}, "not allowed", req{"GET", "/containers/json", ""}},
		{"unknown endpoint", req{"POST", "/frobnicate", ""}, "not allowed", req{"GET", "/_ping", ""}},
		{"non-canonical path", req{"GET", "/v1.41/containers/../plugins", ""}, "", req{"GET", "/v1.41/containers/json", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fix := func(s string) string {
				return strings.NewReplacer("WS", e.ws, "TRUST", e.trust).Replace(s)
			}
			code, msg, fwd := e.do(t, e.client, tc.bad.method, tc.bad.path, fix(tc.bad.body))
			if code != http.StatusForbidden && code != http.StatusBadRequest && code != http.StatusNotFound && code != http.StatusMovedPermanently {
				t.Errorf("bad request answered %d %s", code, msg)
			}
			if fwd != nil {
				t.Errorf("bad request was forwarded: %s %s %s", fwd.Method, fwd.Path, fwd.Body)
			}
			if tc.want != "" && !strings.Contains(msg, tc.want) {
				t.Errorf("denial %q does not name %q", msg, tc.want)
			}
			code, msg, fwd = e.do(t, e.client, tc.control.method, tc.control.path, fix(tc.control.body))
			if code != http.StatusOK || fwd == nil {
				t.Errorf("control was not forwarded: %d %s", code, msg)
			}
		})
	}
}

// TestInjection: a create gets the trust bind, the CA env (merged with
// the image's JAVA_TOOL_OPTIONS), the DNS server and the owner labels, and
// what reaches the engine is the guard's re-encoding.
func TestInjection(t *testing.T) {
	e := setup(t)
	_, msg, fwd := e.do(t, e.client, "POST", "/v1.41/containers/create?name=x", `{"Image":"app:1","Env":["A=1"],"Labels":{"mine":"1"},"HostConfig":{}}`)
	if fwd == nil {
		t.Fatalf("not forwarded: %s", msg)
	}
	var got struct {
		Env        []string
		Labels     map[string]string
		HostConfig struct {
			Binds []string
			Dns   []string
		}
	}
	if err := json.Unmarshal(fwd.Body, &got); err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "SSL_CERT_FILE=" + e.trust + "/ca.pem", "JAVA_TOOL_OPTIONS=-Xmx1g -Djavax.net.ssl.trustStore=" + e.trust + "/ca.jks"}
	if fmt.Sprint(got.Env) != fmt.Sprint(want) {
		t.Errorf("env %v, want %v", got.Env, want)
	}
	if got.Labels["vak.owner"] != "t" || got.Labels["mine"] != "1" {
		t.Errorf("labels %v", got.Labels)
	}
	if fmt.Sprint(got.HostConfig.Binds) != fmt.Sprint([]string{e.trust + ":" + e.trust + ":ro"}) {
		t.Errorf("binds %v", got.HostConfig.Binds)
	}
	if fmt.Sprint(got.HostConfig.Dns) != "[172.30.0.2]" {
		t.Errorf("dns %v", got.HostConfig.Dns)
	}
}

// TestBodyFraming is the CVE-2024-41110 class: a body the declared framing
// hides (Content-Length: 0) or chunks must not reach the engine unchecked.
func TestBodyFraming(t *testing.T) {
	e := setup(t)
	bad := `{"Image":"app:1","HostConfig":{"Privileged":true}}`
	// A request whose framing leaves bytes over keeps the connection
	// waiting for a next request: the wait bounds the read only.
	send := func(raw string) string { return sendRaw(t, e.sock, raw, 5*time.Second) }
	for name, raw := range map[string]string{
		"content-length 0 with a body": "POST /v1.41/containers/create HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" + bad,
		"chunked":                      fmt.Sprintf("POST /v1.41/containers/create HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(bad), bad),
		"no length, no chunking":       "POST /v1.41/containers/create HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + bad,
	} {
		out := send(raw)
		e.up.mu.Lock()
		for _, r := range e.up.reqs {
			if strings.Contains(string(r.Body), "Privileged\":true") {
				t.Errorf("%s: a privileged create reached the engine: %s", name, r.Body)
			}
		}
		e.up.mu.Unlock()
		if strings.Contains(out, " 200 ") {
			t.Errorf("%s: answered 200: %s", name, out)
		}
	}
	// Control: the same chunked framing with an allowed body is forwarded.
	good := `{"Image":"app:1","HostConfig":{}}`
	out := send(fmt.Sprintf("POST /v1.41/containers/create HTTP/1.1\r\nHost: docker\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(good), good))
	if !strings.Contains(out, " 200 ") {
		t.Errorf("control: chunked allowed create not forwarded: %s", out)
	}
}

// TestReaperSocket: a bind of the guard's socket (Ryuk) is rewritten to
// the reaper socket, which lists and removes but cannot create.
func TestReaperSocket(t *testing.T) {
	e := setup(t)
	_, msg, fwd := e.do(t, e.client, "POST", "/containers/create", create(`"Binds":["`+e.sock+`:/var/run/docker.sock"]`))
	if fwd == nil || !strings.Contains(string(fwd.Body), e.reaper+":/var/run/docker.sock") || strings.Contains(string(fwd.Body), e.sock+":") {
		t.Fatalf("guard socket bind not rewritten to the reaper socket: %s %v", msg, fwd)
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/containers/create", create(``)}, {"POST", "/containers/x/exec", `{"Cmd":["sh"]}`},
		{"POST", "/images/create?fromImage=x", ""}, {"POST", "/networks/create", `{"Name":"n"}`},
	} {
		if code, _, fwd := e.do(t, e.rclnt, r.method, r.path, r.body); code != http.StatusForbidden || fwd != nil {
			t.Errorf("reaper socket allowed %s %s (%d)", r.method, r.path, code)
		}
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/_ping"}, {"GET", "/containers/json?filters=x"}, {"DELETE", "/containers/x?force=1"},
		{"DELETE", "/networks/n"}, {"DELETE", "/volumes/v"}, {"DELETE", "/images/i"},
	} {
		if code, msg, fwd := e.do(t, e.rclnt, r.method, r.path, ""); code != http.StatusOK || fwd == nil {
			t.Errorf("reaper socket refused %s %s: %d %s", r.method, r.path, code, msg)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	for _, tc := range []struct{ image, req, trust, want []string }{
		{nil, nil, []string{"SSL_CERT_FILE=/t"}, []string{"SSL_CERT_FILE=/t"}},
		{nil, []string{"SSL_CERT_FILE=/mine"}, []string{"SSL_CERT_FILE=/t"}, []string{"SSL_CERT_FILE=/t"}},
		{[]string{"NODE_OPTIONS=--max-old-space-size=1"}, nil, []string{"NODE_OPTIONS=--use-openssl-ca"}, []string{"NODE_OPTIONS=--max-old-space-size=1 --use-openssl-ca"}},
		{[]string{"NODE_OPTIONS=--a"}, []string{"NODE_OPTIONS=--b"}, []string{"NODE_OPTIONS=--c"}, []string{"NODE_OPTIONS=--b --c"}},
	} {
		if got := MergeEnv(tc.image, tc.req, tc.trust); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("MergeEnv(%v, %v, %v) = %v, want %v", tc.image, tc.req, tc.trust, got, tc.want)
		}
	}
}

// FuzzContainerCreate: whatever the body, a create that reaches the engine
// is never privileged, never adds a capability outside SafeCaps and never
// binds a path outside the workspace and trust dir.
func FuzzContainerCreate(f *testing.F) {
	f.Add(create(`"Privileged":true`))
	f.Add(create(`"CapAdd":["SYS_ADMIN"],"Binds":["/:/h"]`))
	f.Add(`{"Image":"x","HostConfig":{"privileged":true,"Privileged":false}}`)
	f.Add(`{"Image":"x","hostconfig":{"Binds":["/etc:/e"]}}`)
	f.Fuzz(func(t *testing.T, body string) {
		e := setup(t)
		_, _, fwd := e.do(t, e.client, "POST", "/containers/create", body)
		if fwd == nil {
			return
		}
		var c struct {
			HostConfig struct {
				Privileged bool
				CapAdd     []string
				Binds      []string
			}
		}
		if err := json.Unmarshal(fwd.Body, &c); err != nil {
			t.Fatalf("forwarded body does not decode: %v", err)
		}
		if c.HostConfig.Privileged {
			t.Fatalf("privileged create forwarded: %s", fwd.Body)
		}
		for _, cp := range c.HostConfig.CapAdd {
			if !SafeCaps[strings.TrimPrefix(strings.ToUpper(cp), "CAP_")] {
				t.Fatalf("cap %s forwarded", cp)
			}
		}
		for _, b := range c.HostConfig.Binds {
			src := strings.Split(b, ":")[0]
			if strings.HasPrefix(src, "/") && !within(src, e.ws) && !within(src, e.trust) {
				t.Fatalf("bind %s forwarded", b)
			}
		}
	})
}
