package logins

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"vak/internal/egress/secrets"
)

// StoreFile is the store's file name in the gateway's state directory.
const StoreFile = "logins.json"

// KeepPerField is how many tokens the store keeps per login and field:
// the newest; an older phantom stops working once its token is dropped.
const KeepPerField = 8

// Store keeps the real tokens behind the phantoms, in a 0600 file on the
// host (the gateway's state directory), so a gateway restart keeps the
// sandbox's login working. It is safe for concurrent use.
type Store struct {
	path string
	mu   sync.Mutex
	toks []Token
}

// storeWire is the file's format.
type storeWire struct {
	Version int     `json:"version"`
	Tokens  []Token `json:"tokens"`
}

// OpenStore reads the store at path (a missing file is an empty store). A
// file that does not parse is an error naming it: the phantoms the sandbox
// holds would stop working silently otherwise.
func OpenStore(path string) (*Store, error) {
	s := &Store{path: path}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("logins: %w", err)
	}
	var w storeWire
	if err := json.Unmarshal(data, &w); err != nil || w.Version != 1 {
		return nil, fmt.Errorf("logins: %s is not a login store (version 1): remove it to start over (the sandbox's phantoms then stop working: log in again)", path)
	}
	for _, t := range w.Tokens {
		if len(t.Real) < MinTokenLen || len(t.Phantom) < MinTokenLen || t.Login == "" || !slices.Contains(Fields, t.Field) {
			return nil, fmt.Errorf("logins: %s holds an invalid token entry (login %q, field %q)", path, t.Login, t.Field)
		}
	}
	s.toks = w.Tokens
	return s, nil
}

// Known returns the phantom of login's stored token real in field, or "".
func (s *Store) Known(login, field, real string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.toks {
		if t.Login == login && t.Field == field && t.Real == real {
			return t.Phantom
		}
	}
	return ""
}

// Tokens returns a copy of the stored tokens, oldest first.
func (s *Store) Tokens() []Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.toks)
}

// Add stores toks (the newest last), drops all but the newest
// KeepPerField of each login and field, and writes the file (0600,
// replaced atomically).
func (s *Store) Add(toks ...Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A token seen again (a refresh that kept it) moves to the end.
	all := slices.DeleteFunc(slices.Clone(s.toks), func(old Token) bool {
		return slices.ContainsFunc(toks, func(t Token) bool { return t.Login == old.Login && t.Field == old.Field && t.Real == old.Real })
	})
	all = append(all, toks...)
	count := map[[2]string]int{}
	var kept []Token
	for i := len(all) - 1; i >= 0; i-- {
		k := [2]string{all[i].Login, all[i].Field}
		if count[k] < KeepPerField {
			count[k]++
			kept = append(kept, all[i])
		}
	}
	slices.Reverse(kept)
	if err := s.write(kept); err != nil {
		return err
	}
	s.toks = kept
	return nil
}

// Remove drops every token of login and reports how many it dropped.
func (s *Store) Remove(login string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := slices.DeleteFunc(slices.Clone(s.toks), func(t Token) bool { return t.Login == login })
	n := len(s.toks) - len(kept)
	if n == 0 {
		return 0, nil
	}
	if err := s.write(kept); err != nil {
		return 0, err
	}
	s.toks = kept
	return n, nil
}

func (s *Store) write(toks []Token) error {
	data, err := json.MarshalIndent(storeWire{Version: 1, Tokens: toks}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("logins: %w", err)
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("logins: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("logins: %w", err)
	}
	return nil
}

// Secrets are the stored tokens of the configured providers as secrets:
// access and id tokens bound to the provider's API hosts (headers),
// refresh tokens to its token endpoints' hosts (bodies). Tokens of a
// provider no longer configured are left out (not deleted).
func (s *Store) Secrets(providers []Provider) ([]*secrets.Secret, error) {
	byName := map[string]*Provider{}
	for i := range providers {
		byName[providers[i].Name] = &providers[i]
	}
	var out []*secrets.Secret
	for i, t := range s.Tokens() {
		p := byName[t.Login]
		if p == nil {
			continue
		}
		hosts, inject := p.APIHosts, secrets.Header
		if t.Field == "refresh_token" {
			hosts, inject = p.TokenHosts(), secrets.Body
		}
		sec, err := secrets.NewPhantom(fmt.Sprintf("login %s %s #%d", t.Login, t.Field, i+1), t.Real, t.Phantom, inject, hosts)
		if err != nil {
			return nil, err
		}
		out = append(out, sec)
	}
	return out, nil
}
