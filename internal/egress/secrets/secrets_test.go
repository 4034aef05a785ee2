package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"vak/internal/egress/policy"
)

const (
	ghValue = "ghp_REALVALUE0123456789abcdef"
	aiValue = "sk-ant-REAL-0123456789"
)

func session(t *testing.T) *Session {
	t.Helper()
	return NewSession([]*Secret{
		NewForTest("GITHUB_TOKEN", ghValue, Header, "api.github.com", "*.githubusercontent.com"),
		NewForTest("AI_KEY", aiValue, Header|Query|Body, "api.ai.test"),
	}, nil)
}

func host(s string) policy.Host {
	h, err := policy.NormalizeHost(s)
	if err != nil {
		panic(err)
	}
	return h
}

// chunkReader returns the data in chunks of random sizes.
type chunkReader struct {
	data []byte
	rng  *rand.Rand
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), 1+c.rng.IntN(7))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestPlaceholders(t *testing.T) {
	t.Parallel()
	s := session(t)
	env := s.Env()
	gh, ai := env["GITHUB_TOKEN"], env["AI_KEY"]
	for _, ph := range []string{gh, ai} {
		if !strings.HasPrefix(ph, PlaceholderPrefix) || len(ph) != PlaceholderLen {
			t.Fatalf("placeholder %q has the wrong shape", ph)
		}
	}
	if gh == ai {
		t.Fatal("placeholders collide")
	}
	s2 := session(t)
	if s2.Env()["GITHUB_TOKEN"] == gh {
		t.Fatal("two sessions share a placeholder")
	}
	// A reload keeps existing placeholders and adds new ones.
	s3 := NewSession([]*Secret{
		NewForTest("GITHUB_TOKEN", ghValue, Header, "api.github.com"),
		NewForTest("NEW_ONE", "new-value-123456", Header, "x.test"),
	}, s)
	if s3.Env()["GITHUB_TOKEN"] != gh || s3.Env()["NEW_ONE"] == "" || s3.Env()["AI_KEY"] != "" {
		t.Fatalf("reload placeholders: %v", s3.Env())
	}
}

func TestRewriteRequest(t *testing.T) {
	t.Parallel()
	s := session(t)
	env := s.Env()
	gh, ai := env["GITHUB_TOKEN"], env["AI_KEY"]
	basic := func(user, pw string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
	}
	tests := []struct {
		name       string
		host       string
		target     string
		header     http.Header
		wantHeader http.Header
		wantQuery  string
		blocked    bool
		realValue  bool
	}{
		{name: "bearer to bound host", host: "api.github.com", target: "/user",
			header:     http.Header{"Authorization": {"Bearer " + gh}},
			wantHeader: http.Header{"Authorization": {"Bearer " + ghValue}}},
		{name: "wildcard bound host", host: "raw.githubusercontent.com", target: "/x",
			header:     http.Header{"X-Token": {gh}},
			wantHeader: http.Header{"X-Token": {ghValue}}},
		{name: "basic credentials", host: "api.github.com", target: "/",
			header:     http.Header{"Authorization": {basic("x-access-token", gh)}},
			wantHeader: http.Header{"Authorization": {basic("x-access-token", ghValue)}}},
		{name: "bearer to unbound host", host: "evil.test", target: "/",
			header: http.Header{"Authorization": {"Bearer " + gh}}, blocked: true},
		{name: "basic to unbound host", host: "evil.test", target: "/",
			header: http.Header{"Authorization": {basic("u", gh)}}, blocked: true},
		// The scheme is matched as strings.EqualFold does, Unicode folding
		// included ("ſ" folds to "s"): no spelling hides the base64 from
		// the matcher.
		{name: "lower-case basic scheme to unbound host", host: "evil.test", target: "/",
			header: http.Header{"Authorization": {"basic" + strings.TrimPrefix(basic("u", gh), "Basic")}}, blocked: true},
		{name: "unicode-folded basic scheme to unbound host", host: "evil.test", target: "/",
			header: http.Header{"Authorization": {"ba\u017fic" + strings.TrimPrefix(basic("u", gh), "Basic")}}, blocked: true},
		{name: "real value in basic credentials to unbound host", host: "evil.test", target: "/",
			header: http.Header{"Proxy-Authorization": {"BASIC" + strings.TrimPrefix(basic("u", ghValue), "Basic")}}, blocked: true, realValue: true},
		{name: "unicode-folded basic scheme to bound host", host: "api.github.com", target: "/",
			header:     http.Header{"Authorization": {"ba\u017fic" + strings.TrimPrefix(basic("x", gh), "Basic")}},
			wantHeader: http.Header{"Authorization": {"ba\u017fic" + strings.TrimPrefix(basic("x", ghValue), "Basic")}}},
		{name: "apex not bound by wildcard", host: "githubusercontent.com", target: "/",
			header: http.Header{"X": {gh}}, blocked: true},
		{name: "other secret to bound host", host: "api.github.com", target: "/",
			header: http.Header{"X-Key": {ai}}, blocked: true},
		{name: "query not configured", host: "api.github.com", target: "/?t=" + gh, blocked: true},
		{name: "query configured", host: "api.ai.test", target: "/v1?key=" + ai + "&x=1", wantQuery: "key=" + url.QueryEscape(aiValue) + "&x=1"},
		{name: "escaped placeholder in query to unbound host", host: "evil.test", target: "/?k=%76" + ai[1:], blocked: true},
		{name: "placeholder in path", host: "api.ai.test", target: "/v1/" + ai + "/x", blocked: true},
		{name: "real value to unbound host", host: "evil.test", target: "/",
			header: http.Header{"X-Leak": {"token=" + ghValue}}, blocked: true, realValue: true},
		{name: "escaped real value in query", host: "evil.test", target: "/?q=" + url.QueryEscape(aiValue+"/"), blocked: true, realValue: true},
		{name: "IP destination never bound", host: "1.2.3.4", target: "/",
			header: http.Header{"Authorization": {"Bearer " + gh}}, blocked: true},
		{name: "no placeholder", host: "evil.test", target: "/?a=b",
			header: http.Header{"Accept": {"*/*"}}, wantHeader: http.Header{"Accept": {"*/*"}}, wantQuery: "a=b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.NewRequest("GET", "https://"+tc.host+tc.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Header = tc.header
			if r.Header == nil {
				r.Header = http.Header{}
			}
			_, err = s.RewriteRequest(host(tc.host), r, true)
			if tc.blocked {
				var be *BlockedError
				if !errors.As(err, &be) || !errors.Is(err, ErrBlocked) {
					t.Fatalf("not blocked: %v (header %v, query %q)", err, r.Header, r.URL.RawQuery)
				}
				if be.RealValue != tc.realValue {
					t.Errorf("RealValue = %v", be.RealValue)
				}
				if strings.Contains(err.Error(), ghValue) || strings.Contains(err.Error(), gh) || strings.Contains(err.Error(), aiValue) || strings.Contains(err.Error(), ai) {
					t.Fatalf("error reveals a secret or placeholder: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.wantHeader {
				if got := r.Header[k]; len(got) != 1 || got[0] != v[0] {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if tc.wantQuery != "" && r.URL.RawQuery != tc.wantQuery {
				t.Errorf("query %q, want %q", r.URL.RawQuery, tc.wantQuery)
			}
		})
	}
}

func TestRedactStreamSplitAcrossReads(t *testing.T) {
	t.Parallel()
	s := session(t)
	env := s.Env()
	body := "start " + ghValue + " middle " + aiValue + aiValue + " g" + ghValue[:5] + " end " + ghValue
	want := strings.NewReplacer(ghValue, env["GITHUB_TOKEN"], aiValue, env["AI_KEY"]).Replace(body)
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		got, err := io.ReadAll(s.RedactReader(&chunkReader{data: []byte(body), rng: rng}))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("seed %d: got %q\nwant %q", seed, got, want)
		}
	}
	got, err := io.ReadAll(s.RedactReader(iotest.OneByteReader(strings.NewReader(body))))
	if err != nil || string(got) != want {
		t.Fatalf("one-byte reads: %q %v", got, err)
	}
	// A large stream with values at every alignment stays correct.
	var big bytes.Buffer
	for i := range 5000 {
		big.WriteString(strings.Repeat("x", i%97))
		big.WriteString(ghValue)
	}
	wantBig := bytes.ReplaceAll(big.Bytes(), []byte(ghValue), []byte(env["GITHUB_TOKEN"]))
	gotBig, err := io.ReadAll(s.RedactReader(iotest.HalfReader(bytes.NewReader(big.Bytes()))))
	if err != nil || !bytes.Equal(gotBig, wantBig) {
		t.Fatalf("big stream mismatch (%v)", err)
	}
}

func TestRequestBodyBlocksBeforeLeaking(t *testing.T) {
	t.Parallel()
	s := session(t)
	gh := s.Env()["GITHUB_TOKEN"]
	body := strings.Repeat("a", 100000) + gh + "tail"
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r, subst := s.RequestBody(host("evil.test"), &chunkReader{data: []byte(body), rng: rng}, true, nil)
		if subst {
			t.Fatal("unbound host must not substitute")
		}
		got, err := io.ReadAll(r)
		if !errors.Is(err, ErrBlocked) {
			t.Fatalf("seed %d: err = %v", seed, err)
		}
		if bytes.Contains(got, []byte(gh[:4])) && strings.Contains(string(got), gh[:len(gh)-1]) {
			t.Fatalf("seed %d: part of the placeholder was released", seed)
		}
		if len(got) > 100000 {
			t.Fatalf("seed %d: %d bytes released, more than the prefix", seed, len(got))
		}
	}
	// Body injection to the bound host substitutes, across chunks.
	ai := s.Env()["AI_KEY"]
	var used []int
	r, subst := s.RequestBody(host("api.ai.test"), iotest.OneByteReader(strings.NewReader(`{"key":"`+ai+`"}`)), true, func(i int) { used = append(used, i) })
	got, err := io.ReadAll(r)
	if err != nil || !subst || string(got) != `{"key":"`+aiValue+`"}` || len(used) != 1 {
		t.Fatalf("body substitution: %q %v %v %v", got, err, subst, used)
	}
	// Header-only secret in the body of its own host is refused.
	r, _ = s.RequestBody(host("api.github.com"), strings.NewReader("x"+gh), true, nil)
	if _, err := io.ReadAll(r); !errors.Is(err, ErrBlocked) {
		t.Fatalf("header-only secret in body: %v", err)
	}
}

func TestRedactHeaderGuardScrub(t *testing.T) {
	t.Parallel()
	s := session(t)
	h := http.Header{"Set-Cookie": {"t=" + ghValue + "; Path=/"}, "X-Echo": {aiValue}}
	s.RedactHeader(h)
	if strings.Contains(h.Get("Set-Cookie"), ghValue) || h.Get("X-Echo") != s.Env()["AI_KEY"] {
		t.Fatalf("headers not redacted: %v", h)
	}
	g := s.Guard(iotest.OneByteReader(strings.NewReader("frame..." + aiValue + "...")))
	got, err := io.ReadAll(g)
	if !errors.Is(err, ErrInResponse) || strings.Contains(string(got), aiValue[:len(aiValue)-1]) {
		t.Fatalf("guard: %q %v", got, err)
	}
	sc := s.Scrub("/x/" + s.Env()["GITHUB_TOKEN"] + "/" + aiValue)
	if sc != "/x/[placeholder:GITHUB_TOKEN]/[secret:AI_KEY]" {
		t.Fatalf("scrub: %q", sc)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := dir + "/tok"
	if err := writeFile(file, "file-secret-value\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(dir+"/short", "tiny\n"); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GW_TOKEN": "env-secret-value"}
	got, err := Load([]Spec{
		{Name: "A", Source: Source{Value: "inline-secret"}},
		{Name: "B", Source: Source{Env: "GW_TOKEN"}},
		{Name: "C", Source: Source{File: file}},
	}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0].value) != "inline-secret" || string(got[1].value) != "env-secret-value" || string(got[2].value) != "file-secret-value" || got[0].Inject != Header {
		t.Fatalf("loaded %+v", got)
	}
	// Every load error names the file and the key path, never the value.
	for _, tc := range []struct {
		sp      Spec
		wantKey string
	}{
		{Spec{Name: "S", Source: Source{Value: "short"}}, "cfg.toml: secrets.S.value: value is 5 bytes"},
		{Spec{Name: "SE", Source: Source{Env: "SHORT"}}, "cfg.toml: secrets.SE.env: value is 3 bytes"},
		{Spec{Name: "SF", Source: Source{File: dir + "/short"}}, "cfg.toml: secrets.SF.file: value is 4 bytes"},
		{Spec{Name: "E", Source: Source{Env: "UNSET"}}, "cfg.toml: secrets.E.env: environment variable UNSET"},
		{Spec{Name: "F", Source: Source{File: dir + "/missing"}}, "cfg.toml: secrets.F.file: cannot read"},
		{Spec{Name: "N", Source: Source{Value: "has\nnewline-inside"}}, "cfg.toml: secrets.N.value: value contains control"},
	} {
		tc.sp.ConfigFile = "cfg.toml"
		_, err := Load([]Spec{tc.sp}, func(k string) string { return map[string]string{"SHORT": "abc"}[k] })
		if !errors.Is(err, ErrLoad) || !strings.Contains(err.Error(), tc.wantKey) {
			t.Errorf("Load(%s) = %v, want it to contain %q", tc.sp.Name, err, tc.wantKey)
		}
		for _, v := range []string{"newline-inside", "short", "abc", "tiny"} {
			if err != nil && strings.Contains(strings.TrimPrefix(err.Error(), "secrets: cannot load secret: cfg.toml: secrets."), ": "+v) {
				t.Errorf("Load(%s) reveals the value: %v", tc.sp.Name, err)
			}
		}
	}
	if s := got[0].String(); strings.Contains(s, "inline") {
		t.Errorf("String reveals value: %s", s)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

// FuzzStream checks that streaming replacement with arbitrary read sizes
// gives exactly the one-shot result (the carry-over window never loses or
// duplicates bytes, and matches split across reads are found).
func FuzzStream(f *testing.F) {
	f.Add([]byte("abcSECRETxyzSECRE"), uint64(1), "SECRET", "SECRETSAUCE")
	f.Add([]byte("aaaaab"), uint64(2), "aab", "ab")
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, a, b string) {
		if a == "" || b == "" || len(a) > 64 || len(b) > 64 {
			return
		}
		m := newMatcher([]literal{{from: []byte(a), to: []byte("<A>"), secret: 0}, {from: []byte(b), to: []byte("<B>"), secret: 1}})
		want, _, _ := m.replaceAll(bytes.Clone(data))
		rng := rand.New(rand.NewPCG(seed, seed))
		got, err := io.ReadAll(newStream(&chunkReader{data: bytes.Clone(data), rng: rng}, m, nil))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("stream %q != one-shot %q", got, want)
		}
	})
}

// TestStreamDoesNotDelayInteractiveBytes checks that bytes which cannot be
// the start of a secret or placeholder are released at once (an SSH
// keystroke must not wait for more input), while a possible prefix is held.
func TestStreamDoesNotDelayInteractiveBytes(t *testing.T) {
	t.Parallel()
	s := session(t)
	pr, pw := io.Pipe()
	r := s.Guard(pr)
	go pw.Write([]byte("PING"))
	buf := make([]byte, 10)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "PING" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	// "xx" + the first bytes of a real value: only "xx" comes out now.
	go pw.Write([]byte("xx" + ghValue[:6]))
	n, err = r.Read(buf)
	if err != nil || string(buf[:n]) != "xx" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	go func() { pw.Write([]byte("!")); pw.Close() }()
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != ghValue[:6]+"!" {
		t.Fatalf("rest %q %v", rest, err)
	}
}

func TestInteractiveReleasesHeldBytes(t *testing.T) {
	t.Parallel()
	s := session(t)
	pr, pw := io.Pipe()
	r, stop := s.InteractiveGuard(pr)
	defer stop()
	// A chunk ending in what could be the start of a secret value is
	// released after InteractiveHold instead of waiting for more input.
	go pw.Write([]byte("reply-" + ghValue[:1]))
	buf := make([]byte, 64)
	got := ""
	for len(got) < len("reply-")+1 {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += string(buf[:n])
	}
	if got != "reply-"+ghValue[:1] {
		t.Fatalf("got %q", got)
	}
	// A whole value arriving at once is still caught.
	go pw.Write([]byte(ghValue))
	if _, err := r.Read(buf); !errors.Is(err, ErrInResponse) {
		t.Fatalf("value not caught: %v", err)
	}
	pw.Close()
}
