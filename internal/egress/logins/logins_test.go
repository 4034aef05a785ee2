package logins

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
)

// jwt is a JWT-shaped token with the given claims and a fake signature.
func jwt(claims string) string {
	e := base64.RawURLEncoding.EncodeToString
	return e([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + e([]byte(claims)) + "." + strings.Repeat("s1gNaTuRe", 38)
}

func TestPhantomShape(t *testing.T) {
	id := jwt(`{"email":"dev@example.com","exp":1999999999}`)
	for _, tc := range []struct {
		name, real string
		check      func(t *testing.T, ph string)
	}{
		{"anthropic access", "sk-ant-oat01-" + strings.Repeat("Ab3_", 24), func(t *testing.T, ph string) {
			if !strings.HasPrefix(ph, "sk-ant-oat01-") || len(ph) != len("sk-ant-oat01-")+96 {
				t.Errorf("%q: prefix or length changed", ph)
			}
		}},
		{"github", "gho_" + strings.Repeat("x9", 18), func(t *testing.T, ph string) {
			if !strings.HasPrefix(ph, "gho_") || len(ph) != 40 {
				t.Errorf("%q", ph)
			}
		}},
		{"hex", strings.Repeat("0f", 20), func(t *testing.T, ph string) {
			if len(ph) != 40 || strings.Trim(ph, hexLow) != "" {
				t.Errorf("%q: not 40 hex characters", ph)
			}
		}},
		{"short opaque", "abcdefgh12", func(t *testing.T, ph string) {
			if len(ph) < minRandom {
				t.Errorf("%q: fewer than %d random characters", ph, minRandom)
			}
		}},
		{"jwt", id, func(t *testing.T, ph string) {
			p, r := strings.Split(ph, "."), strings.Split(id, ".")
			if len(p) != 3 || p[0] != r[0] || p[1] != r[1] || p[2] == r[2] || len(p[2]) != len(r[2]) {
				t.Errorf("%q: not the same header and claims with another signature", ph)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := Phantom(tc.real), Phantom(tc.real)
			if a == tc.real || a == b {
				t.Fatalf("phantoms %q %q of %q are not fresh", a, b, tc.real)
			}
			tc.check(t, a)
		})
	}
}

func TestRewrite(t *testing.T) {
	access, refresh := "sk-ant-oat01-"+strings.Repeat("A", 40), "sk-ant-ort01-"+strings.Repeat("B", 40)
	id := jwt(`{"sub":"u1"}`)
	t.Run("json", func(t *testing.T) {
		body := `{"token_type":"Bearer","access_token":"` + access + `","expires_in":28800,"refresh_token":"` + refresh + `","id_token":"` + id + `","scope":"user:inference","account":{"uuid":"x"}}`
		out, toks, err := Rewrite("claude", []byte(body), "application/json; charset=utf-8", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(toks) != 3 {
			t.Fatalf("%d tokens", len(toks))
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks {
			if strings.Contains(string(out), tk.Real) || m[tk.Field] != tk.Phantom || tk.Login != "claude" {
				t.Errorf("%s: real value left or phantom missing: %s", tk.Field, out)
			}
		}
		if m["expires_in"] != float64(28800) || m["scope"] != "user:inference" || m["account"].(map[string]any)["uuid"] != "x" {
			t.Errorf("other fields changed: %s", out)
		}
	})
	t.Run("json escapes", func(t *testing.T) {
		// The real value written with JSON escapes: the rewrite decodes
		// it, so it is found and replaced all the same.
		esc := strings.ReplaceAll(access, "-", `\u002d`)
		out, toks, err := Rewrite("claude", []byte(`{"access_token":"`+esc+`"}`), "application/json", nil)
		if err != nil || len(toks) != 1 || toks[0].Real != access || strings.Contains(string(out), "oat01") && !strings.Contains(string(out), toks[0].Phantom) {
			t.Fatalf("%v %v %s", toks, err, out)
		}
	})
	t.Run("duplicate keys", func(t *testing.T) {
		// Clients take the last of two keys, Go too; the output has one.
		out, toks, err := Rewrite("claude", []byte(`{"access_token":"`+strings.Repeat("Z", 30)+`","access_token":"`+access+`"}`), "application/json", nil)
		if err != nil || len(toks) != 1 || toks[0].Real != access || strings.Count(string(out), "access_token") != 1 {
			t.Fatalf("%v %v %s", toks, err, out)
		}
	})
	t.Run("form", func(t *testing.T) {
		gho := "gho_" + strings.Repeat("q", 36)
		out, toks, err := Rewrite("gh", []byte("access_token="+gho+"&scope=repo&token_type=bearer"), "application/x-www-form-urlencoded", nil)
		if err != nil || len(toks) != 1 {
			t.Fatal(toks, err)
		}
		q, _ := url.ParseQuery(string(out))
		if q.Get("access_token") != toks[0].Phantom || q.Get("scope") != "repo" || strings.Contains(string(out), gho) {
			t.Fatalf("%s", out)
		}
		// Without a content type, form bodies are recognised too.
		if _, toks, err := Rewrite("gh", []byte("access_token="+gho), "", nil); err != nil || len(toks) != 1 {
			t.Fatal(toks, err)
		}
	})
	t.Run("known", func(t *testing.T) {
		_, toks, err := Rewrite("claude", []byte(`{"refresh_token":"`+refresh+`"}`), "application/json", func(f, real string) string {
			if f == "refresh_token" && real == refresh {
				return "sk-ant-ort01-kept-phantom-0123456789"
			}
			return ""
		})
		if err != nil || toks[0].Phantom != "sk-ant-ort01-kept-phantom-0123456789" {
			t.Fatal(toks, err)
		}
	})
	for _, tc := range []struct{ name, ct, body string }{
		{"copy in another field", "application/json", `{"access_token":"` + access + `","debug":"issued ` + access + `"}`},
		{"copy in a nested key", "application/json", `{"access_token":"` + access + `","x":{"` + access + `":1}}`},
		{"too short", "application/json", `{"access_token":"abc"}`},
		{"spaces", "application/json", `{"access_token":"abc def ghi jkl"}`},
		{"form twice", "application/x-www-form-urlencoded", "access_token=" + access + "&access_token=" + refresh},
		{"form copy", "application/x-www-form-urlencoded", "access_token=" + access + "&note=" + access},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			if out, _, err := Rewrite("claude", []byte(tc.body), tc.ct, nil); !errors.Is(err, ErrUnrewritable) {
				t.Fatalf("err %v, out %s", err, out)
			}
		})
	}
	for _, body := range []string{`{"error":"invalid_grant"}`, `[1,2]`, `<html>`, ``, `{"access_token":null}`} {
		if out, toks, err := Rewrite("claude", []byte(body), "application/json", nil); err != nil || toks != nil || string(out) != body {
			t.Errorf("%q: %q %v %v (want it unchanged)", body, out, toks, err)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	e, err := ParseEndpoint("https://SSO.corp.example/OAuth2//token/")
	if err != nil || e.Host != "sso.corp.example" || e.Path != "/oauth2/token" {
		t.Fatal(e, err)
	}
	for _, bad := range []string{"http://sso.example/token", "https://sso.example", "https://sso.example/", "https://u@sso.example/t",
		"https://sso.example/t?x=1", "https://sso.example:8443/t", "https://10.0.0.1/t", "https://[::1]/t", "https://*.example/t", "sso.example/t"} {
		if _, err := ParseEndpoint(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	p := Provider{Name: "x", Endpoints: []Endpoint{e}}
	for path, want := range map[string]bool{"/oauth2/token": true, "//OAuth2/token/": true, "/oauth2/./token": true, "/oauth2/token2": false, "/oauth2": false} {
		if got := p.Match(policy.Host{Name: "sso.corp.example"}, path); got != want {
			t.Errorf("Match(%q) = %v", path, got)
		}
	}
	if p.Match(policy.Host{Name: "other.example"}, "/oauth2/token") {
		t.Error("another host matched")
	}
}

func TestStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", StoreFile)
	st, err := OpenStore(path)
	if err != nil || len(st.Tokens()) != 0 {
		t.Fatal(err)
	}
	tok := func(field, real string) Token {
		return Token{Login: "claude", Field: field, Phantom: Phantom(real), Real: real}
	}
	a := tok("access_token", "sk-ant-oat01-"+strings.Repeat("a", 30))
	r := tok("refresh_token", "sk-ant-ort01-"+strings.Repeat("r", 30))
	if err := st.Add(a, r); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store file: %v %v", fi, err)
	}
	if st.Known("claude", "refresh_token", r.Real) != r.Phantom || st.Known("other", "refresh_token", r.Real) != "" {
		t.Error("Known")
	}
	for i := range KeepPerField + 2 {
		if err := st.Add(tok("access_token", "sk-ant-oat01-"+strings.Repeat(string(rune('b'+i)), 30))); err != nil {
			t.Fatal(err)
		}
	}
	// A token seen again moves to the end instead of being duplicated.
	if err := st.Add(r); err != nil {
		t.Fatal(err)
	}
	re, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	toks := re.Tokens()
	n := map[string]int{}
	for _, tk := range toks {
		n[tk.Field]++
		if tk.Real == a.Real {
			t.Error("the oldest access token was kept past KeepPerField")
		}
	}
	if n["access_token"] != KeepPerField || n["refresh_token"] != 1 || toks[len(toks)-1].Real != r.Real {
		t.Fatalf("kept %v, last %s", n, toks[len(toks)-1].Field)
	}
	prov := []Provider{{Name: "claude", Endpoints: Builtins["anthropic"].Endpoints, APIHosts: []policy.HostPattern{policy.MustHostPattern("api.anthropic.com")}}}
	secs, err := re.Secrets(prov)
	if err != nil || len(secs) != len(toks) {
		t.Fatal(len(secs), err)
	}
	sess := secrets.NewSession(secs, nil)
	if len(sess.Env()) != 0 {
		t.Errorf("login tokens reached the sandbox's environment: %v", sess.Env())
	}
	if secs, _ := re.Secrets(nil); len(secs) != 0 {
		t.Error("tokens of an unconfigured login became secrets")
	}
	if n, err := re.Remove("claude"); err != nil || n != len(toks) {
		t.Fatal(n, err)
	}
	os.WriteFile(path, []byte("{not json"), 0o600)
	if _, err := OpenStore(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("corrupt store: %v", err)
	}
}

// FuzzRewrite: whatever a token endpoint answers, a rewritten body holds
// none of the real tokens it replaced, in any form a client decodes.
func FuzzRewrite(f *testing.F) {
	f.Add([]byte(`{"access_token":"sk-ant-oat01-AAAAAAAAAAAAAAAAAAAAAAAA","refresh_token":"sk-ant-ort01-BBBBBBBBBBBBBBBBBBBBB"}`), "application/json")
	f.Add([]byte("access_token=gho_0123456789abcdef0123&scope=repo"), "application/x-www-form-urlencoded")
	f.Add([]byte(`{"id_token":"`+jwt(`{"a":1}`)+`","x":["a"]}`), "")
	f.Add([]byte(`{"access_token":"\u0041\u0041\u0041\u0041\u0041\u0041\u0041\u0041\u0041"}`), "text/json")
	f.Fuzz(func(t *testing.T, body []byte, ct string) {
		out, toks, err := Rewrite("l", body, ct, nil)
		if err != nil {
			if !errors.Is(err, ErrUnrewritable) {
				t.Fatalf("error %v is not ErrUnrewritable", err)
			}
			return
		}
		if len(toks) == 0 {
			if string(out) != string(body) {
				t.Fatal("a body without tokens changed")
			}
			return
		}
		var decoded []string
		var v any
		if json.Unmarshal(out, &v) == nil {
			var walk func(any)
			walk = func(v any) {
				switch x := v.(type) {
				case string:
					decoded = append(decoded, x)
				case []any:
					for _, e := range x {
						walk(e)
					}
				case map[string]any:
					for k, e := range x {
						decoded = append(decoded, k)
						walk(e)
					}
				}
			}
			walk(v)
		} else if q, err := url.ParseQuery(string(out)); err == nil {
			for k, vs := range q {
				decoded = append(decoded, k)
				decoded = append(decoded, vs...)
			}
		} else {
			t.Fatalf("rewritten body parses neither as JSON nor as a form: %q", out)
		}
		decoded = append(decoded, string(out))
		for _, tk := range toks {
			for _, d := range decoded {
				if strings.Contains(d, tk.Real) {
					t.Fatalf("real %s left in %q", tk.Field, out)
				}
			}
		}
	})
}

func TestTypePrefix(t *testing.T) {
	for real, want := range map[string]string{
		"sk-ant-oat01-" + strings.Repeat("Q", 30):       "sk-ant-oat01-",
		"sk-ant-oat01-ab-cd_" + strings.Repeat("Q", 30): "sk-ant-oat01-ab-", // four segments at most
		"gho_" + strings.Repeat("Q", 30):                "gho_",
		"github_pat_" + strings.Repeat("Q", 30):         "", // a six-letter segment ends the prefix before it
		"REAL-" + strings.Repeat("q", 30):               "", // upper case is not a type prefix
		"ab-" + strings.Repeat("q", 10):                 "", // too little would be left
		strings.Repeat("q", 30):                         "",
	} {
		if got := real[:typePrefix(real)]; got != want {
			t.Errorf("typePrefix(%.16s...) = %q, want %q", real, got, want)
		}
	}
}

// Two processes' stores on one file (a gateway learning tokens while an
// import adds some): neither change is lost, and each sees the other's.
func TestStoreShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), StoreFile)
	a, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	ta := Token{Login: "claude", Field: "access_token", Phantom: "sk-ant-oat01-" + strings.Repeat("p", 24), Real: "sk-ant-oat01-" + strings.Repeat("r", 24)}
	tb := Token{Login: "gh", Field: "access_token", Phantom: "gho_" + strings.Repeat("p", 24), Real: "gho_" + strings.Repeat("r", 24)}
	if err := a.Add(ta); err != nil {
		t.Fatal(err)
	}
	if b.Known("claude", "access_token", ta.Real) != ta.Phantom {
		t.Fatal("the second store does not see the first one's token")
	}
	if err := b.Add(tb); err != nil {
		t.Fatal(err)
	}
	if got := a.Tokens(); len(got) != 2 {
		t.Fatalf("after both adds the first store holds %d tokens", len(got))
	}
	if n, err := a.Remove("gh"); err != nil || n != 1 || len(b.Tokens()) != 1 {
		t.Fatalf("remove: %d %v, the other store holds %d", n, err, len(b.Tokens()))
	}
}

// A gateway with a store of its own merges the host store's Export: it
// gets the imported tokens, keeps what its own refreshes replaced them
// with, takes a newer import as the newest, and forgets a removed login.
func TestStoreMerge(t *testing.T) {
	dir := t.TempDir()
	host, err := OpenStore(filepath.Join(dir, "host", StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := OpenStore(filepath.Join(dir, "gateway", StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	tok := func(login, field string, c byte) Token {
		real := "sk-ant-oat01-" + strings.Repeat(string(c), 30)
		return Token{Login: login, Field: field, Phantom: Phantom(real), Real: real}
	}
	merge := func() {
		t.Helper()
		data, err := host.Export([]string{"claude", "gh"})
		if err != nil {
			t.Fatal(err)
		}
		if data == nil {
			t.Fatal("Export of a store with tokens is empty")
		}
		if err := gw.Merge("test export", data); err != nil {
			t.Fatal(err)
		}
	}
	newestReal := func(login, field string) string {
		last := ""
		for _, tk := range gw.Tokens() {
			if tk.Login == login && tk.Field == field {
				last = tk.Real
			}
		}
		return last
	}
	if data, err := host.Export([]string{"claude"}); data != nil || err != nil {
		t.Fatalf("Export of an empty store: %q %v", data, err)
	}

	imported := tok("claude", "access_token", 'a')
	if err := host.Add(imported, tok("gh", "access_token", 'g'), tok("other", "access_token", 'o')); err != nil {
		t.Fatal(err)
	}
	merge()
	if gw.Known("claude", "access_token", imported.Real) != imported.Phantom || gw.Known("other", "access_token", tok("other", "access_token", 'o').Real) != "" {
		t.Fatalf("after the first merge the gateway holds %d tokens (want claude and gh only)", len(gw.Tokens()))
	}
	n := len(gw.Tokens())
	merge()
	if len(gw.Tokens()) != n {
		t.Fatalf("merging the same export again changed the store: %d tokens, then %d", n, len(gw.Tokens()))
	}

	// The sandbox refreshes through the gateway KeepPerField times: the
	// imported token is dropped there, and a merge must not bring it back
	// as the newest.
	for i := range KeepPerField {
		if err := gw.Add(tok("claude", "access_token", byte('b'+i))); err != nil {
			t.Fatal(err)
		}
	}
	rotated := tok("claude", "access_token", byte('b'+KeepPerField-1)).Real
	merge()
	if gw.Known("claude", "access_token", imported.Real) != "" || newestReal("claude", "access_token") != rotated {
		t.Fatal("a merge brought back a token the gateway's own refreshes had replaced")
	}

	// A login imported on the host again is newer than what the gateway
	// learned: it becomes the newest.
	fresh := tok("claude", "access_token", 'z')
	if err := host.Add(fresh); err != nil {
		t.Fatal(err)
	}
	merge()
	if newestReal("claude", "access_token") != fresh.Real {
		t.Fatal("a newer import did not become the gateway's newest token")
	}

	// A login removed on the host goes from the gateway, also the tokens
	// the gateway learned itself before the removal; another login stays.
	if _, err := host.Remove("claude"); err != nil {
		t.Fatal(err)
	}
	merge()
	for _, tk := range gw.Tokens() {
		if tk.Login == "claude" {
			t.Fatalf("a removed login's token is still in the gateway's store (field %s)", tk.Field)
		}
	}
	if newestReal("gh", "access_token") == "" {
		t.Fatal("removing one login dropped another's tokens")
	}
	// A login done in the sandbox after the removal is kept by later
	// merges.
	later := tok("claude", "access_token", 'l')
	if err := gw.Add(later); err != nil {
		t.Fatal(err)
	}
	merge()
	if gw.Known("claude", "access_token", later.Real) == "" {
		t.Fatal("a merge dropped a token the gateway got after the removal")
	}

	for _, bad := range []string{`{`, `{"version":2,"tokens":[]}`, `{"version":1,"tokens":[{"login":"x","field":"access_token","phantom":"p","real":"r"}]}`} {
		if err := gw.Merge("imported.json", []byte(bad)); err == nil || !strings.Contains(err.Error(), "imported.json") {
			t.Errorf("Merge(%s) = %v, want an error naming the file", bad, err)
		}
	}
}
