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

// ImportFile is the file, next to StoreFile in a gateway's state
// directory, that brings the host store's tokens (Store.Export) to a
// gateway with a store of its own (a container's, a pod's): the gateway
// merges it into its store (Store.Merge) when it starts and reloads.
const ImportFile = "logins-imported.json"

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
	path    string
	mu      sync.Mutex
	toks    []Token
	removed map[string]time.Time
	stamp   fileStamp
}

// fileStamp tells whether the file changed since it was read.
type fileStamp struct {
	mtime time.Time
	size  int64
	ok    bool
}

// storeWire is the file's format (also ImportFile's).
type storeWire struct {
	Version int     `json:"version"`
	Tokens  []Token `json:"tokens"`
	// Removed is when each login was last removed (Store.Remove): a merge
	// drops the tokens of that login the other store got before then.
	Removed map[string]time.Time `json:"removed,omitempty"`
}

// OpenStore reads the store at path (a missing file is an empty store). A
// file that does not parse is an error naming it: the phantoms the sandbox
// holds would stop working silently otherwise.
func OpenStore(path string) (*Store, error) {
	s := &Store{path: path}
	w, st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.toks, s.removed, s.stamp = w.Tokens, w.Removed, st
	return s, nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

func (s *Store) load() (storeWire, fileStamp, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return storeWire{Version: 1}, fileStamp{}, nil
	}
	if err != nil {
		return storeWire{}, fileStamp{}, fmt.Errorf("logins: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return storeWire{}, fileStamp{}, fmt.Errorf("logins: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return storeWire{}, fileStamp{}, fmt.Errorf("logins: %w", err)
	}
	w, err := parseWire(data)
	if err != nil {
		return storeWire{}, fileStamp{}, fmt.Errorf("logins: %s %w: remove it to start over (the sandbox's phantoms then stop working: log in again)", s.path, err)
	}
	return w, fileStamp{mtime: fi.ModTime(), size: fi.Size(), ok: true}, nil
}

// parseWire parses and checks a store file (or an ImportFile); its error
// reads after the file's name.
func parseWire(data []byte) (storeWire, error) {
	var w storeWire
	if err := json.Unmarshal(data, &w); err != nil || w.Version != 1 {
		return storeWire{}, errors.New("is not a login store (version 1)")
	}
	for _, t := range w.Tokens {
		if len(t.Real) < MinTokenLen || len(t.Phantom) < MinTokenLen || t.Login == "" || !slices.Contains(Fields, t.Field) {
			return storeWire{}, fmt.Errorf("holds an invalid token entry (login %q, field %q)", t.Login, t.Field)
		}
	}
	return w, nil
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
	if w, st, err := s.load(); err == nil {
		s.toks, s.removed, s.stamp = w.Tokens, w.Removed, st
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

// Add stores toks (the newest last, each stamped Added now), drops all
// but the newest KeepPerField of each login and field, and writes the file
// (0600, replaced atomically).
func (s *Store) Add(toks ...Token) error {
	now := time.Now().UTC()
	return s.change(func(w *storeWire) {
		// A token seen again (a refresh that kept it) moves to the end.
		all := slices.DeleteFunc(w.Tokens, func(old Token) bool {
			return slices.ContainsFunc(toks, func(t Token) bool { return sameToken(t, old) })
		})
		for _, t := range toks {
			t.Added = now
			all = append(all, t)
		}
		w.Tokens = newest(all)
	})
}

func sameToken(a, b Token) bool {
	return a.Login == b.Login && a.Field == b.Field && a.Real == b.Real
}

// newest keeps the last KeepPerField tokens of each login and field of
// toks (oldest first), in order.
func newest(toks []Token) []Token {
	count := map[[2]string]int{}
	var kept []Token
	for i := len(toks) - 1; i >= 0; i-- {
		k := [2]string{toks[i].Login, toks[i].Field}
		if count[k] < KeepPerField {
			count[k]++
			kept = append(kept, toks[i])
		}
	}
	slices.Reverse(kept)
	return kept
}

// Remove drops every token of login, notes when (a store that merges this
// one's Export drops its tokens of login from before then too), and
// reports how many it dropped.
func (s *Store) Remove(login string) (int, error) {
	n := 0
	now := time.Now().UTC()
	err := s.change(func(w *storeWire) {
		kept := slices.DeleteFunc(w.Tokens, func(t Token) bool { return t.Login == login })
		n = len(w.Tokens) - len(kept)
		w.Tokens = kept
		if w.Removed == nil {
			w.Removed = map[string]time.Time{}
		}
		w.Removed[login] = now
	})
	return n, err
}

// Export is what a gateway with a store of its own needs of this one
// (ImportFile): the tokens of the named logins and when each login was
// last removed. It is nil when there is neither.
func (s *Store) Export(logins []string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	w := storeWire{Version: 1, Tokens: []Token{}, Removed: s.removed}
	for _, t := range s.toks {
		if slices.Contains(logins, t.Login) {
			w.Tokens = append(w.Tokens, t)
		}
	}
	if len(w.Tokens) == 0 && len(w.Removed) == 0 {
		return nil, nil
	}
	return json.MarshalIndent(w, "", "  ")
}

// Merge takes in another store's Export: for each login it removed, the
// tokens of that login this store got before then go (and the removal is
// noted here too); its tokens this store does not hold are added at their
// place in time, and of each login and field the newest KeepPerField are
// kept, so a token a refresh here replaced does not come back as the
// newest. name names data in errors. Merging the same data again changes
// nothing.
func (s *Store) Merge(name string, data []byte) error {
	in, err := parseWire(data)
	if err != nil {
		return fmt.Errorf("logins: %s %w", name, err)
	}
	return s.change(func(w *storeWire) {
		for login, at := range in.Removed {
			if old, ok := w.Removed[login]; ok && !at.After(old) {
				continue
			}
			if w.Removed == nil {
				w.Removed = map[string]time.Time{}
			}
			w.Removed[login] = at
		}
		all := slices.DeleteFunc(w.Tokens, func(t Token) bool { return removedAfter(w.Removed, t) })
		for _, t := range in.Tokens {
			if !removedAfter(w.Removed, t) && !slices.ContainsFunc(all, func(o Token) bool { return sameToken(o, t) }) {
				all = append(all, t)
			}
		}
		slices.SortStableFunc(all, func(a, b Token) int { return a.Added.Compare(b.Added) })
		w.Tokens = newest(all)
	})
}

// removedAfter reports whether t's login was removed after t was added.
func removedAfter(removed map[string]time.Time, t Token) bool {
	at, ok := removed[t.Login]
	return ok && t.Added.Before(at)
}

// change applies fn to the file's current content under the lock and
// writes the result.
func (s *Store) change(fn func(*storeWire)) error {
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
	w, _, err := s.load()
	if err != nil {
		return err
	}
	w.Tokens = slices.Clone(w.Tokens)
	fn(&w)
	if err := s.write(w); err != nil {
		return err
	}
	_, st, err := s.load()
	if err != nil {
		return err
	}
	s.toks, s.removed, s.stamp = w.Tokens, w.Removed, st
	return nil
}

func (s *Store) write(w storeWire) error {
	w.Version = 1
	data, err := json.MarshalIndent(w, "", "  ")
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
