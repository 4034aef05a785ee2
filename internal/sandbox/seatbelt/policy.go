package seatbelt

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"vak/internal/sandbox"
)

// Policy validation errors. Every one of them wraps ErrInvalidPolicy, and the
// message names the field and value at fault.
var (
	// ErrInvalidPolicy reports a Policy that Profile refuses to translate.
	ErrInvalidPolicy = errors.New("invalid seatbelt policy")
	// ErrMode reports a mode other than ReadOnly or WorkspaceWrite
	// (FullAccess never reaches a backend).
	ErrMode = fmt.Errorf("%w: mode must be %s or %s", ErrInvalidPolicy, sandbox.ReadOnly, sandbox.WorkspaceWrite)
	// ErrPath reports a path that cannot be used in a profile: empty,
	// relative (or absolute, for Protected), not clean, not UTF-8, or holding
	// a control character such as NUL or newline.
	ErrPath = fmt.Errorf("%w: bad path", ErrInvalidPolicy)
	// ErrHomeExposed reports a workspace or temp dir that is, or contains,
	// the home directory, or an extra grant equal to it: granting it would
	// expose every secret in it, so vak refuses rather than weaken.
	ErrHomeExposed = fmt.Errorf("%w: path would expose the home directory", ErrInvalidPolicy)
)

// AlwaysProtected are the workspace-relative paths every profile keeps
// read-only, whatever Policy.Protected says: code or config planted there
// would run later outside the sandbox (git hooks, git config, vak's project
// config).
var AlwaysProtected = sandbox.DefaultProtected

// Policy is what a sandboxed worker may do. Every absolute path must be
// canonical (clean, symbolic links resolved: Seatbelt matches the path the
// kernel resolved, so /tmp/x never matches /private/tmp/x); Canonicalize
// makes them so.
type Policy struct {
	// Workspace is the canonical absolute path of the workspace. It is
	// readable, and writable in WorkspaceWrite. It may not be, or contain,
	// UserHome.
	Workspace string
	// Mode is ReadOnly or WorkspaceWrite. FullAccess never reaches a backend.
	Mode sandbox.Mode
	// TempDir is the private per-session temp dir: readable, writable, and
	// the only place unix-domain sockets may be bound or connected to. The
	// launcher exports it as TMPDIR. It may not be, or contain, UserHome.
	TempDir string
	// UserHome is the user's home directory. Nothing under it is readable or
	// writable except paths granted explicitly (Workspace, TempDir,
	// ReadPaths, WritePaths inside it).
	UserHome string
	// ReadPaths are extra read-only paths from trusted config. A grant that
	// contains UserHome (such as "/") never opens UserHome; one equal to UserHome is an
	// error.
	ReadPaths []string
	// WritePaths are extra read-write paths from trusted config, with the
	// same rule about UserHome as ReadPaths.
	WritePaths []string
	// Protected are workspace-relative paths that stay read-only even in
	// WorkspaceWrite, whether or not they exist yet, in addition to
	// AlwaysProtected. They must be ASCII (see docs/seatbelt.md).
	Protected []string
	// Deny are absolute paths nothing in the sandbox may read, write or
	// connect to, whatever else is granted: vak's own config and state
	// directories, for example. They are applied last.
	Deny []string
	// AllowNetwork allows IP networking. It is false in restricted modes;
	// then every IP socket operation (loopback included) is denied, unless
	// Proxy is set.
	AllowNetwork bool
	// AgentHome, if set, is the persistent private home (agenthome) the
	// launcher exports as HOME: readable and writable, granted after Deny
	// (it lies in vak's state directory, whose rest stays closed). It may
	// not be, or contain, UserHome or a Deny path.
	AgentHome string
	// Proxy, if set, is the proxied network (--network proxied): the only
	// IP operation allowed is a TCP connection to the local gateway's port
	// on loopback, and its trust files are readable. It excludes
	// AllowNetwork.
	Proxy *Proxy
}

// Proxy is the local egress gateway a proxied profile lets the sandbox
// reach, and what its commands need to use it (Proxy.Env).
type Proxy struct {
	// Port is the TCP port of the gateway's explicit proxy (HTTP CONNECT)
	// on the loopback interface.
	Port int
	// TrustDir is the canonical host directory holding the gateway's
	// public trust files (catrust.Files): readable, not writable, in the
	// sandbox. It may not be, or contain, UserHome, and may not lie in a Deny
	// path.
	TrustDir string
}

// plan is a validated Policy, sorted into the groups the profile emits.
type plan struct {
	p          Policy
	broadRead  []string // read grants that contain UserHome: before UserHome closes
	broadWrite []string
	read       []string // extra read-only grants inside or beside UserHome
	write      []string // extra read-write grants inside or beside UserHome
	protected  []string // clean, deduplicated workspace-relative paths
}

func (p Policy) plan() (*plan, error) {
	if p.Mode != sandbox.ReadOnly && p.Mode != sandbox.WorkspaceWrite {
		return nil, fmt.Errorf("%w, not %v", ErrMode, p.Mode)
	}
	for _, f := range []struct{ name, val string }{
		{"Workspace", p.Workspace}, {"TempDir", p.TempDir}, {"UserHome", p.UserHome},
	} {
		if err := checkAbs(f.name, f.val); err != nil {
			return nil, err
		}
	}
	if p.UserHome == "/" {
		return nil, fmt.Errorf("%w: UserHome %q is the root directory", ErrPath, p.UserHome)
	}
	for _, f := range []struct {
		name string
		vals []string
	}{{"ReadPaths", p.ReadPaths}, {"WritePaths", p.WritePaths}, {"Deny", p.Deny}} {
		for i, v := range f.vals {
			if err := checkAbs(fmt.Sprintf("%s[%d]", f.name, i), v); err != nil {
				return nil, err
			}
		}
	}
	for _, f := range []struct{ name, val string }{{"Workspace", p.Workspace}, {"TempDir", p.TempDir}} {
		if contains(f.val, p.UserHome) {
			return nil, fmt.Errorf("%w: %s %q is or contains UserHome %q", ErrHomeExposed, f.name, f.val, p.UserHome)
		}
	}

	if p.AgentHome != "" {
		if err := checkAbs("AgentHome", p.AgentHome); err != nil {
			return nil, err
		}
		if contains(p.AgentHome, p.UserHome) {
			return nil, fmt.Errorf("%w: AgentHome %q is or contains UserHome %q", ErrHomeExposed, p.AgentHome, p.UserHome)
		}
		for _, d := range append(slices.Clone(p.Deny), alwaysDeny...) {
			if contains(p.AgentHome, d) {
				return nil, fmt.Errorf("%w: AgentHome %q is or contains the denied %q", ErrPath, p.AgentHome, d)
			}
		}
	}
	reads := p.ReadPaths
	if x := p.Proxy; x != nil {
		if p.AllowNetwork {
			return nil, fmt.Errorf("%w: Proxy and AllowNetwork exclude each other", ErrInvalidPolicy)
		}
		if x.Port < 1 || x.Port > 65535 {
			return nil, fmt.Errorf("%w: Proxy.Port %d is not a TCP port", ErrInvalidPolicy, x.Port)
		}
		if err := checkAbs("Proxy.TrustDir", x.TrustDir); err != nil {
			return nil, err
		}
		for _, d := range p.Deny {
			if contains(d, x.TrustDir) {
				return nil, fmt.Errorf("%w: Proxy.TrustDir %q lies in the denied %q; the sandbox could not read it", ErrPath, x.TrustDir, d)
			}
		}
		if x.TrustDir == p.UserHome || contains(x.TrustDir, p.UserHome) {
			return nil, fmt.Errorf("%w: Proxy.TrustDir %q is or contains UserHome %q", ErrHomeExposed, x.TrustDir, p.UserHome)
		}
		reads = append(slices.Clone(reads), x.TrustDir)
	}

	pl := &plan{p: p}
	for _, g := range []struct {
		name         string
		vals         []string
		broad, plain *[]string
	}{
		{"ReadPaths", reads, &pl.broadRead, &pl.read},
		{"WritePaths", p.WritePaths, &pl.broadWrite, &pl.write},
	} {
		for i, v := range g.vals {
			switch {
			case v == p.UserHome:
				return nil, fmt.Errorf("%w: %s[%d] %q is UserHome; grant the directories under it that are needed", ErrHomeExposed, g.name, i, v)
			case contains(v, p.UserHome):
				*g.broad = append(*g.broad, v)
			default:
				*g.plain = append(*g.plain, v)
			}
		}
	}
	pl.broadRead, pl.broadWrite = dedup(pl.broadRead), dedup(pl.broadWrite)
	pl.read, pl.write = dedup(pl.read), dedup(pl.write)

	rels := append(append([]string(nil), AlwaysProtected...), p.Protected...)
	for i, rel := range rels {
		name := fmt.Sprintf("Protected[%d]", i-len(AlwaysProtected))
		if err := checkRel(name, rel); err != nil {
			return nil, err
		}
	}
	pl.protected = dedup(rels)
	return pl, nil
}

// checkAbs validates an absolute path for use in a profile.
func checkAbs(field, p string) error {
	if err := checkChars(field, p); err != nil {
		return err
	}
	if !path.IsAbs(p) {
		return fmt.Errorf("%w: %s %q is not absolute", ErrPath, field, p)
	}
	if c := path.Clean(p); c != p {
		return fmt.Errorf("%w: %s %q is not clean (want %q)", ErrPath, field, p, c)
	}
	return nil
}

// checkRel validates a workspace-relative protected path.
func checkRel(field, p string) error {
	if err := checkChars(field, p); err != nil {
		return err
	}
	for _, r := range p {
		if r >= utf8.RuneSelf {
			return fmt.Errorf("%w: %s %q is not ASCII (a case- and normalization-insensitive volume has spellings of it the profile cannot match)", ErrPath, field, p)
		}
	}
	switch c := path.Clean(p); {
	case path.IsAbs(p):
		return fmt.Errorf("%w: %s %q is not relative to the workspace", ErrPath, field, p)
	case c != p:
		return fmt.Errorf("%w: %s %q is not clean (want %q)", ErrPath, field, p, c)
	case c == "." || c == ".." || strings.HasPrefix(c, "../"):
		return fmt.Errorf("%w: %s %q is not inside the workspace", ErrPath, field, p)
	}
	return nil
}

// checkChars rejects what an SBPL string literal or a Seatbelt path cannot
// carry: nothing, invalid UTF-8 (APFS names are UTF-8), and control
// characters (NUL, newline, ...).
func checkChars(field, p string) error {
	if p == "" {
		return fmt.Errorf("%w: %s is empty", ErrPath, field)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrPath, field, p)
	}
	if i := strings.IndexFunc(p, unicode.IsControl); i >= 0 {
		return fmt.Errorf("%w: %s %q contains a control character at byte %d", ErrPath, field, p, i)
	}
	return nil
}

// contains reports whether dir is p or one of its ancestors. Both are clean
// absolute paths.
func contains(dir, p string) bool {
	return dir == p || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// ancestors returns the proper ancestors of the clean absolute path p,
// shallowest first, without "/".
func ancestors(p string) []string {
	var out []string
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		out = append(out, d)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// dedup removes repeated strings, keeping the first of each.
func dedup(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := in[:0:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
