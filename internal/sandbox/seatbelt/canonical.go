package seatbelt

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// Canonicalize returns p with every absolute path cleaned and its symbolic
// links resolved, so that the profile names the paths Seatbelt matches: on
// macOS /tmp/x is /private/tmp/x and /var/folders is /private/var/folders. A
// path that does not exist yet is resolved through its longest existing
// ancestor. Empty and relative paths are left for Profile to reject, and
// Protected (workspace-relative) is left as it is. A Deny path that was a
// symbolic link is kept under both names.
func Canonicalize(p Policy) (Policy, error) {
	var err error
	one := func(s *string) {
		if err == nil {
			*s, err = resolve(*s)
		}
	}
	many := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = s
			one(&out[i])
		}
		return out
	}
	one(&p.Workspace)
	one(&p.TempDir)
	one(&p.UserHome)
	if p.AgentHome != "" {
		one(&p.AgentHome)
	}
	if p.Proxy != nil {
		x := *p.Proxy
		one(&x.TrustDir)
		p.Proxy = &x
	}
	p.ReadPaths = many(p.ReadPaths)
	p.WritePaths = many(p.WritePaths)
	deny := many(p.Deny)
	for i, d := range p.Deny {
		if c := filepath.Clean(d); filepath.IsAbs(d) && c != deny[i] {
			deny = append(deny, c)
		}
	}
	p.Deny = deny
	if err != nil {
		return Policy{}, err
	}
	return p, nil
}

// resolve cleans an absolute path and resolves its symbolic links, through
// its longest existing ancestor when it does not exist.
func resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return p, nil
	}
	p = filepath.Clean(p)
	rest := ""
	for d := p; ; {
		r, err := filepath.EvalSymlinks(d)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("seatbelt: resolve %q: %w", p, err)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(d), rest)
		d = parent
	}
}
