package logins

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"vak/internal/egress/secrets"
)

// StoreFile is the store's file name in the gateway's state directory.
const StoreFile = "logins.json"

// KeepPerField is how many tokens the store keeps per login and field:
// the newest; an older phantom stops working once its token is dropped.
const KeepPerField = 8

// Store keeps the real tokens behind the phantoms, in a 0600 file on the
// host (the gateway's state directory), so a gateway restart keeps the
// sandbox's login working. It is safe for concurrent use, also by several
// processes (a gateway learning tokens while `vak login import` adds
// some): every change is made under an exclusive lock on the file's
// sibling PATH.lock, on top of what the file holds then, and a reader
// picks up a file another process changed.
type Store struct {
	path  string
	mu    sync.Mutex
	toks  []Token
	stamp fileStamp
}

// fileStamp tells whether the file changed since it was read.
type fileStamp struct {
	mtime time.Time
	size  int64
	ok    bool
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
	toks, st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.toks, s.stamp = toks, st
	return s, nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

func (s *Store) load() ([]Token, fileStamp, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fileStamp{}, nil
	}
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("logins: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("logins: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("logins: %w", err)
	}
	var w storeWire
	if err := json.Unmarshal(data, &w); err != nil || w.Version != 1 {
		return nil, fileStamp{}, fmt.Errorf("logins: %s is not a login store (version 1): remove it to start over (the sandbox's phantoms then stop working: log in again)", s.path)
	}
	for _, t := range w.Tokens {
		if len(t.Real) < MinTokenLen || len(t.Phantom) < MinTokenLen || t.Login == "" || !slices.Contains(Fields, t.Field) {
			return nil, fileStamp{}, fmt.Errorf("logins: %s holds an invalid token entry (login %q, field %q)", s.path, t.Login, t.Field)
		}
	}
	return w.Tokens, fileStamp{mtime: fi.ModTime(), size: fi.Size(), ok: true}, nil
}

// refreshLocked re-reads the file when another process changed it (a
// file that no longer parses keeps what was read before). s.mu is held.
func (s *Store) refreshLocked() {
	fi, err := os.Stat(s.path)
	if err != nil {
		return
	}
	if s.stamp.ok && fi.ModTime().Equal(s.stamp.mtime) && fi.Size() == s.stamp.size {
		return
	}
	if toks, st, err := s.load(); err == nil {
		s.toks, s.stamp = toks, st
	}
}

// Known returns the phantom of login's stored token real in field, or "".
func (s *Store) Known(login, field, real string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
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
	s.refreshLocked()
	return slices.Clone(s.toks)
}

// Add stores toks (the newest last), drops all but the newest
// KeepPerField of each login and field, and writes the file (0600,
// replaced atomically).
func (s *Store) Add(toks ...Token) error {
	return s.change(func(cur []Token) []Token {
		// A token seen again (a refresh that kept it) moves to the end.
		all := slices.DeleteFunc(cur, func(old Token) bool {
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
		return kept
	})
}

// Remove drops every token of login and reports how many it dropped.
func (s *Store) Remove(login string) (int, error) {
	n := 0
	err := s.change(func(cur []Token) []Token {
		kept := slices.DeleteFunc(cur, func(t Token) bool { return t.Login == login })
		n = len(cur) - len(kept)
		return kept
	})
	return n, err
}

// change applies fn to the file's current tokens under the lock and
// writes the result.
func (s *Store) change(fn func([]Token) []Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("logins: %w", err)
	}
	unlock, err := lockFile(s.path + ".lock")
	if err != nil {
		return fmt.Errorf("logins: %w", err)
	}
	defer unlock()
	cur, _, err := s.load()
	if err != nil {
		return err
	}
	next := fn(slices.Clone(cur))
	if err := s.write(next); err != nil {
		return err
	}
	_, st, err := s.load()
	if err != nil {
		return err
	}
	s.toks, s.stamp = next, st
	return nil
}

func (s *Store) write(toks []Token) error {
	data, err := json.MarshalIndent(storeWire{Version: 1, Tokens: toks}, "", "  ")
	if err != nil {
		return err
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
