package dockerguard

import (
	"bufio"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"vak/internal/testenv"
)

// sendRaw writes raw to the socket and returns what comes back until the
// server closes the connection (raw says Connection: close) or wait ends
// (a request whose framing wants more bytes, or keeps the connection).
// The writing side stays open: the server cancels a request whose client
// has gone, so a half-closed connection could lose the answer.
func sendRaw(t testing.TB, sock, raw string, wait time.Duration) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, raw)
	c.SetReadDeadline(time.Now().Add(wait))
	b, _ := io.ReadAll(bufio.NewReader(c))
	return string(b)
}

var (
	rawReq    = testenv.RawRequest
	multipart = testenv.MultipartForm
)

// engineViolation names what in a forwarded request breaks the guard's
// parameter rules as the engine reads them (rec.Form: query, form and
// multipart bodies, first value where the handler uses FormValue, every
// value where it uses r.Form[k]), or "" if nothing does; and a form
// Content-Type reaching the engine at all.
func engineViolation(rec recorded) string {
	for _, ct := range rec.ContentType {
		if mt, _, _ := mime.ParseMediaType(ct); mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data" {
			return "the engine got Content-Type " + ct
		}
	}
	f := rec.Form
	switch {
	case strings.HasSuffix(rec.Path, "/images/create"):
		// r.Form.Get("fromSrc") when fromImage is empty.
		if src := f.Get("fromSrc"); f.Get("fromImage") == "" && src != "" && src != "-" {
			return "import from " + src
		}
	case strings.HasSuffix(rec.Path, "/build"):
		if r := f.Get("remote"); r != "" && !(r == "client-session" && f.Get("version") == "2") {
			return "remote " + r
		}
		if nm := f.Get("networkmode"); nm != "" && nm != "default" && nm != "bridge" && nm != "none" {
			return "networkmode " + nm
		}
		if cp := f.Get("cgroupparent"); cp != "" {
			return "cgroupparent " + cp
		}
		for _, so := range f["securityopt"] {
			if so != "" && so != "[]" && so != "null" {
				return "securityopt " + so
			}
		}
	}
	return ""
}

// checkForwarded fails t for every request the engine received since
// before (an index into e.up.reqs) that breaks the rules as the engine
// reads it, and returns how many there were.
func checkForwarded(t testing.TB, e *env, before int, what string) int {
	t.Helper()
	e.up.mu.Lock()
	defer e.up.mu.Unlock()
	got := e.up.reqs[before:]
	for _, r := range got {
		if v := engineViolation(r); v != "" {
			t.Errorf("%s: the engine got %s %s and reads: %s (form %v)", what, r.Method, r.Path, v, r.Form)
		}
	}
	return len(got)
}

func (e *env) count() int {
	e.up.mu.Lock()
	defer e.up.mu.Unlock()
	return len(e.up.reqs)
}

const (
	formCT    = "Content-Type: application/x-www-form-urlencoded"
	canaryURL = "http://canary.test/x.tar"
)

// TestFormBodies: the engine reads parameters from a form body as well as
// from the query (net/http's ParseForm for application/x-www-form-urlencoded
// on POST/PUT/PATCH, FormValue's multipart parse on /build), the first
// Content-Type header, its media type lower-cased (strings.ToLower: "İ" is
// "i") even when its parameters do not parse. Each attack carries the
// parameter the guard refuses in the query in a body instead: it is
// denied (403 naming the form) and nothing reaches the engine. Controls:
// the same endpoints with their usual bodies are forwarded, and the engine
// gets the guard's one Content-Type, never a form.
func TestFormBodies(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		name, raw string
	}{
		{"import urlencoded", rawReq("POST", "/v1.41/images/create?repo=x", []string{formCT}, imp0, false)},
		{"import urlencoded charset upper case", rawReq("POST", "/v1.41/images/create?repo=x", []string{"Content-Type: Application/X-WWW-Form-URLEncoded; charset=UTF-8"}, imp0, false)},
		{"import urlencoded bad parameters", rawReq("POST", "/v1.41/images/create?repo=x", []string{"Content-Type: application/x-www-form-urlencoded; ;;garbage"}, imp0, false)},
		{"import urlencoded dotted capital I", rawReq("POST", "/v1.41/images/create?repo=x", []string{"Content-Type: applİcation/x-www-form-urlencoded"}, imp0, false)},
		{"import urlencoded chunked", rawReq("POST", "/v1.41/images/create?repo=x", []string{formCT}, imp0, true)},
		{"import urlencoded spaces", rawReq("POST", "/v1.41/images/create?repo=x", []string{"Content-Type:  application/x-www-form-urlencoded ;charset=x"}, imp0, false)},
		{"import form and another type", rawReq("POST", "/v1.41/images/create?repo=x", []string{formCT, "Content-Type: application/x-tar"}, imp0, false)},
		{"import another type and form", rawReq("POST", "/v1.41/images/create?repo=x", []string{"Content-Type: application/x-tar", formCT}, imp0, false)},
		{"import multipart", rawReq("POST", "/v1.41/images/create?repo=x", []string{"Content-Type: multipart/form-data; boundary=b"}, multipart("b", "fromSrc", canaryURL), false)},
		{"build remote urlencoded", rawReq("POST", "/v1.41/build?t=x", []string{formCT}, "remote=https://example.com/ctx.tar", false)},
		{"build network host urlencoded", rawReq("POST", "/v1.41/build?t=x", []string{formCT}, "networkmode=host&securityopt=seccomp%3Dunconfined", false)},
		{"build remote multipart", rawReq("POST", "/v1.41/build?t=x", []string{"Content-Type: multipart/form-data; boundary=b"}, multipart("b", "remote", "https://example.com/ctx.tar"), false)},
		{"build multipart upper case chunked", rawReq("POST", "/v1.41/build?t=x", []string{"Content-Type: MULTIPART/FORM-DATA; boundary=b"}, multipart("b", "networkmode", "host", "cgroupparent", "/"), true)},
		{"build remote client-session in a body", rawReq("POST", "/v1.41/build?remote=client-session", []string{formCT}, "version=2", false)},
		{"archive path urlencoded", rawReq("PUT", "/v1.41/containers/x/archive", []string{formCT}, "path=/etc", false)},
		{"create urlencoded", rawReq("POST", "/v1.41/containers/create", []string{formCT}, "name=x&platform=linux", false)},
		{"get with a form body", rawReq("GET", "/v1.41/images/json", []string{formCT}, "all=1", false)},
		{"patch with a form body", rawReq("PATCH", "/v1.41/images/create?repo=x", []string{formCT}, imp0, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.count()
			out := sendRaw(t, e.sock, tc.raw, 10*time.Second)
			if n := checkForwarded(t, e, before, tc.name); n != 0 {
				t.Errorf("forwarded %d request(s) to the engine:\n%s", n, out)
			}
			if !strings.Contains(out, " 403 ") && !strings.Contains(out, " 400 ") && !strings.Contains(out, " 404 ") {
				t.Errorf("not refused:\n%s", out)
			}
		})
	}
	// Controls: what clients send is forwarded with the guard's type.
	for _, tc := range []struct {
		name, raw string
		wantCT    []string // the Content-Type headers the engine gets
		body      string   // the body it gets ("" = not checked)
	}{
		{"import from stdin (the CLI's text/plain)", rawReq("POST", "/v1.41/images/create?fromSrc=-&repo=x&tag=1", []string{"Content-Type: text/plain"}, "TARBYTES", false), []string{"application/octet-stream"}, "TARBYTES"},
		{"import body that looks like a form, no type", rawReq("POST", "/v1.41/images/create?fromSrc=-&repo=x", nil, imp0, false), []string{"application/octet-stream"}, imp0},
		{"pull", rawReq("POST", "/v1.41/images/create?fromImage=app&tag=1", nil, "", false), nil, ""},
		{"build context chunked", rawReq("POST", "/v1.41/build?t=app&networkmode=default", []string{"Content-Type: application/x-tar"}, "CONTEXT", true), []string{"application/octet-stream"}, "CONTEXT"},
		{"buildkit build", rawReq("POST", "/v1.41/build?remote=client-session&version=2&session=s1", []string{"Content-Type: application/x-tar"}, "", false), nil, ""},
		{"load", rawReq("POST", "/v1.41/images/load?quiet=1", []string{"Content-Type: application/x-tar"}, "IMAGES", false), []string{"application/octet-stream"}, "IMAGES"},
		{"start, curl -d ''", rawReq("POST", "/v1.41/containers/x/start", []string{formCT}, "", false), nil, ""},
		{"create with a charset", rawReq("POST", "/v1.41/containers/create?name=x", []string{"Content-Type: application/json; charset=utf-8"}, `{"Image":"app:1"}`, false), []string{"application/json"}, ""},
		{"create without a type", rawReq("POST", "/v1.41/containers/create", nil, `{"Image":"app:1"}`, true), []string{"application/json"}, ""},
		{"disconnect", rawReq("POST", "/v1.41/networks/n/disconnect", []string{"Content-Type: application/json"}, `{"Container":"c","Force":true}`, false), []string{"application/json"}, `{"Container":"c","Force":true}`},
	} {
		t.Run("control "+tc.name, func(t *testing.T) {
			before := e.count()
			out := sendRaw(t, e.sock, tc.raw, 10*time.Second)
			if n := checkForwarded(t, e, before, tc.name); n != 1 || !strings.Contains(out, " 200 ") {
				t.Fatalf("forwarded %d request(s), want 1:\n%s", n, out)
			}
			got, _ := e.up.last()
			if !slices.Equal(got.ContentType, tc.wantCT) {
				t.Errorf("the engine got Content-Type %q, want %q", got.ContentType, tc.wantCT)
			}
			if tc.body != "" && string(got.Body) != tc.body {
				t.Errorf("the engine got body %q, want %q", got.Body, tc.body)
			}
		})
	}
}

// TestQueryParams: the query is read as the engine reads it. Every value
// of a parameter the guard checks is checked (the engine reads
// securityopt as a list, and a check of the first value only lets the
// second through); a query the engine would parse differently (a ";"
// separator, a broken escape) is refused; escaped keys are decoded as the
// engine does; keys are case-sensitive on both sides, so a key in another
// case is a parameter the engine ignores (control).
func TestQueryParams(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		name, target, want string
	}{
		{"securityopt second value", "/v1.41/build?securityopt=&securityopt=seccomp%3Dunconfined", "securityopt"},
		{"securityopt list", "/v1.41/build?securityopt=%5B%5D&securityopt=apparmor%3Dunconfined", "securityopt"},
		{"networkmode second value", "/v1.41/build?networkmode=bridge&networkmode=host", "networkmode"},
		{"remote second value", "/v1.41/build?remote=client-session&version=2&remote=https%3A%2F%2Fexample.com%2Fx.tar", "remote"},
		{"cgroupparent second value", "/v1.41/build?cgroupparent=&cgroupparent=%2F", "cgroupparent"},
		{"fromSrc second value", "/v1.41/images/create?fromSrc=-&fromSrc=" + canaryURL, "fromSrc"},
		{"fromSrc escaped key", "/v1.41/images/create?repo=x&from%53rc=" + canaryURL, "fromSrc"},
		{"fromSrc plus-encoded value", "/v1.41/images/create?repo=x&fromSrc=http://canary.test/x+y.tar", "fromSrc"},
		{"semicolon separator", "/v1.41/images/create?repo=x;fromSrc=" + canaryURL, "query"},
		{"semicolon separator build", "/v1.41/build?t=x;networkmode=host", "query"},
		{"broken escape", "/v1.41/images/create?repo=x&fromSrc=%zz", "query"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.count()
			out := sendRaw(t, e.sock, rawReq("POST", tc.target, nil, "", false), 10*time.Second)
			if n := checkForwarded(t, e, before, tc.name); n != 0 {
				t.Errorf("forwarded %d request(s):\n%s", n, out)
			}
			if !strings.Contains(out, " 403 ") || !strings.Contains(out, tc.want) {
				t.Errorf("not refused naming %q:\n%s", tc.want, out)
			}
		})
	}
	for _, target := range []string{
		"/v1.41/images/create?repo=x&FromSrc=" + canaryURL,
		"/v1.41/build?t=x&NetworkMode=host&Remote=https%3A%2F%2Fexample.com%2F",
		"/v1.41/build?t=x&t=y&networkmode=none&securityopt=",
		"/v1.41/images/create?fromImage=app&tag=1&fromSrc=-",
	} {
		t.Run("control "+target, func(t *testing.T) {
			before := e.count()
			out := sendRaw(t, e.sock, rawReq("POST", target, nil, "", false), 10*time.Second)
			if n := checkForwarded(t, e, before, target); n != 1 || !strings.Contains(out, " 200 ") {
				t.Errorf("forwarded %d request(s), want 1:\n%s", n, out)
			}
		})
	}
}

// fuzzTargets are the requests FuzzRequestParams sends: the endpoints whose
// parameters the guard checks, a stream, a JSON body and none.
var fuzzTargets = []string{
	"POST /v1.41/images/create", "POST /v1.41/build", "PUT /v1.41/containers/x/archive",
	"POST /v1.41/containers/create", "POST /v1.41/containers/x/start",
}

// FuzzRequestParams: whatever the agent sends to an endpoint (query,
// headers, body, framing, more requests after it on the connection), no
// request reaches the engine with a form Content-Type or with a parameter
// the guard refuses, as the engine reads it.
func FuzzRequestParams(f *testing.F) {
	f.Add(uint8(0), "repo=x", formCT, imp0)
	f.Add(uint8(0), "repo=x", "Content-Type: applİcation/x-www-form-urlencoded", imp0)
	f.Add(uint8(0), "repo=x", formCT+"\r\nTransfer-Encoding: chunked", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(imp0), imp0))
	f.Add(uint8(0), "repo=x;fromSrc=http://c/x", "", "")
	f.Add(uint8(0), "from%53rc=http://c/x", "", "")
	f.Add(uint8(1), "t=x", "Content-Type: multipart/form-data; boundary=b", multipart("b", "remote", "http://c/x"))
	f.Add(uint8(1), "securityopt=&securityopt=seccomp%3Dunconfined", "", "")
	f.Add(uint8(1), "t=x", "Content-Type: text/plain\r\nContent-Type: application/x-www-form-urlencoded", "networkmode=host")
	f.Add(uint8(1), "remote=client-session&version=2", "", "")
	f.Add(uint8(2), "path=/", formCT, "path=/etc")
	f.Add(uint8(3), "name=x", "Content-Type: application/json", `{"Image":"app:1"}`)
	f.Add(uint8(4), "", formCT, "")
	e := setup(f)
	f.Fuzz(func(t *testing.T, which uint8, query, headers, body string) {
		target := fuzzTargets[int(which)%len(fuzzTargets)]
		raw := target + "?" + query + " HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n"
		if headers != "" {
			raw += headers + "\r\n"
		}
		if h := strings.ToLower(headers); !strings.Contains(h, "transfer-encoding") && !strings.Contains(h, "content-length") {
			raw += fmt.Sprintf("Content-Length: %d\r\n", len(body))
		}
		raw += "\r\n" + body
		before := e.count()
		// A short wait for the answer: a request the fuzzer framed to
		// want more bytes only stalls.
		sendRaw(t, e.sock, raw, time.Second)
		checkForwarded(t, e, before, "fuzz")
	})
}

// imp0 is an import-from-URL form body (a fuzz seed).
const imp0 = "fromSrc=http://canary.test/x.tar"

// The engine's own reading of a request (engineForm) sees what the
// attacks carry: without it the tests above would pass vacuously.
func TestEngineFormSeesBodies(t *testing.T) {
	for _, tc := range []struct {
		ct, path, body, key, want string
	}{
		{"application/x-www-form-urlencoded", "/images/create?repo=x", imp0, "fromSrc", "http://canary.test/x.tar"},
		{"applİcation/x-www-form-urlencoded; ;;", "/images/create?repo=x", imp0, "fromSrc", "http://canary.test/x.tar"},
		{"multipart/form-data; boundary=b", "/build?t=x", multipart("b", "remote", "http://c/x"), "remote", "http://c/x"},
	} {
		r, _ := http.NewRequest("POST", "http://docker"+tc.path, strings.NewReader(tc.body))
		r.Header.Set("Content-Type", tc.ct)
		if got := engineForm(r, []byte(tc.body)).Get(tc.key); got != tc.want {
			t.Errorf("%s %q: the engine reads %s=%q, want %q", tc.path, tc.ct, tc.key, got, tc.want)
		}
	}
}
