package logins

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
)

// Client is a CLI whose login file Import reads: where it keeps it under
// a home directory and which built-in provider issued it.
type Client struct {
	// Name is the import argument (claude, codex, gh).
	Name string
	// File is the login file's path relative to the home.
	File string
	// Provider is the built-in provider (Builtins) of its tokens.
	Provider string
	// Keychain is the macOS Keychain service (a generic password holding
	// the same data as File) where the CLI keeps its login on macOS.
	Keychain string
	// rewrite returns the file with phantoms and the tokens it replaced.
	rewrite func(login string, data []byte, known func(field, real string) string) ([]byte, []Token, error)
}

// Clients are the CLIs whose logins can be imported.
var Clients = []Client{
	{Name: "claude", File: ".claude/.credentials.json", Provider: "anthropic", Keychain: "Claude Code-credentials", rewrite: rewriteClaude},
	{Name: "codex", File: ".codex/auth.json", Provider: "openai", rewrite: rewriteCodex},
	{Name: "gh", File: ".config/gh/hosts.yml", Provider: "github", rewrite: rewriteGH},
}

// ClientNamed returns the client called name.
func ClientNamed(name string) (Client, bool) {
	for _, c := range Clients {
		if c.Name == name {
			return c, true
		}
	}
	return Client{}, false
}

// ErrNoLogin means a login file holds no token to import.
var ErrNoLogin = errors.New("logins: no login token in the file")

// Import returns the login file data of c with every token replaced by a
// phantom, and the tokens (login names the [logins] entry they belong
// to). known returns the phantom already given for a real token, or "".
func (c Client) Import(login string, data []byte, known func(field, real string) string) ([]byte, []Token, error) {
	out, toks, err := c.rewrite(login, data, known)
	if err != nil {
		return nil, nil, err
	}
	if len(toks) == 0 {
		return nil, nil, fmt.Errorf("%w (%s: log in with %s on the host first, or point --from at the file)", ErrNoLogin, c.File, c.Name)
	}
	for _, t := range toks {
		if bytes.Contains(out, []byte(t.Real)) {
			return nil, nil, fmt.Errorf("%w: the %s value appears elsewhere in %s", ErrUnrewritable, t.Field, c.File)
		}
	}
	return out, toks, nil
}

// rewriteObject replaces the string fields named in fields (JSON key ->
// token field) of the JSON object at key (top level when key is "") of
// data, keeping every other field as it was.
func rewriteObject(login string, data []byte, key string, fields map[string]string, known func(field, real string) string) ([]byte, []Token, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, nil, fmt.Errorf("logins: the login file is not a JSON object: %w", err)
	}
	obj := top
	if key != "" {
		// A map of its own: unmarshalling into top would merge into it.
		var inner map[string]json.RawMessage
		raw, ok := top[key]
		if !ok || json.Unmarshal(raw, &inner) != nil || inner == nil {
			return data, nil, nil
		}
		obj = inner
	}
	r := rewriter{login: login, known: known}
	toks, err := r.phantomise(obj, fields)
	if err != nil {
		return nil, nil, err
	}
	if key != "" {
		top[key], _ = json.Marshal(obj)
	}
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	return out, toks, nil
}

// rewriteClaude: Claude Code's ~/.claude/.credentials.json,
// {"claudeAiOauth": {"accessToken", "refreshToken", "expiresAt", ...}}.
func rewriteClaude(login string, data []byte, known func(field, real string) string) ([]byte, []Token, error) {
	return rewriteObject(login, data, "claudeAiOauth", map[string]string{"accessToken": "access_token", "refreshToken": "refresh_token"}, known)
}

// rewriteCodex: Codex's ~/.codex/auth.json, {"tokens": {"id_token",
// "access_token", "refresh_token", "account_id"}, "last_refresh", ...}.
func rewriteCodex(login string, data []byte, known func(field, real string) string) ([]byte, []Token, error) {
	return rewriteObject(login, data, "tokens", map[string]string{"id_token": "id_token", "access_token": "access_token", "refresh_token": "refresh_token"}, known)
}

var ghTokenLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^(\s*oauth_token:\s*)("?)([^"\s#]+)("?)\s*$`)
})

// rewriteGH: gh's ~/.config/gh/hosts.yml, where each host (and each user
// under it) has an "oauth_token: VALUE" line. gh keeps the token in the
// system keyring when one is available; then the file has none and
// ErrNoLogin says so.
func rewriteGH(login string, data []byte, known func(field, real string) string) ([]byte, []Token, error) {
	r := rewriter{login: login, known: known}
	var toks []Token
	var err error
	out := ghTokenLine().ReplaceAllFunc(data, func(line []byte) []byte {
		m := ghTokenLine().FindSubmatch(line)
		t, e := r.mint("access_token", string(m[3]))
		if e != nil {
			err = e
			return line
		}
		for _, prev := range toks {
			if prev.Real == t.Real {
				t = prev
			}
		}
		if !containsToken(toks, t) {
			toks = append(toks, t)
		}
		return []byte(string(m[1]) + string(m[2]) + t.Phantom + string(m[4]))
	})
	if err != nil {
		return nil, nil, err
	}
	return out, toks, nil
}

func containsToken(toks []Token, t Token) bool {
	for _, x := range toks {
		if x.Real == t.Real && x.Field == t.Field {
			return true
		}
	}
	return false
}
