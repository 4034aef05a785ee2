// Package fsguard implements the agent's host file tools (read, write, edit,
// glob, grep) against one workspace, such that no path the model supplies can
// reach anything outside it.
//
// A Root holds a file descriptor on the canonical workspace directory. Every
// access is resolved by the kernel relative to that descriptor with
// openat2(2) and RESOLVE_BENEATH, so there is no string check followed by a
// path-based use that a concurrent symlink swap could redirect:
//
//   - Reads may follow symbolic links that stay inside the workspace; a link
//     that leads out (a relative "../" escape, any absolute target, a /proc
//     magic link) is refused with ErrOutside or ErrSymlink.
//   - Writes and edits never traverse or replace a symbolic link
//     (RESOLVE_NO_SYMLINKS, O_NOFOLLOW), refuse files with more than one hard
//     link, and replace files atomically (a temporary file in the same
//     directory, then renameat(2)).
//   - Glob and grep never descend into symbolically linked directories and
//     never open a file through a symbolic link.
//   - Protected paths (Options.Protected) stay read-only in every mode, and so
//     do paths that do not exist yet beneath them.
//
// When the kernel lacks openat2 (Linux < 5.6) Open fails with ErrUnsupported:
// there is no weaker fallback. Other platforms return ErrUnsupported as well.
//
// A Root is safe for concurrent use.
package fsguard

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"
)

// Limits. The Default values apply when an Options field or a max argument is
// zero; the Max values are hard caps no argument can raise.
const (
	// DefaultMaxReadBytes caps one read, one file grep scans and the file an
	// edit loads.
	DefaultMaxReadBytes = 10 << 20
	// DefaultMaxWriteBytes caps the content of one write or edit result.
	DefaultMaxWriteBytes = 10 << 20
	// DefaultMaxResults is the glob and grep result count when max is 0.
	DefaultMaxResults = 1000
	// MaxResults is the hard cap on glob paths and grep matches per call.
	MaxResults = 10000
	// MaxWalkEntries bounds the directory entries one glob or grep examines.
	MaxWalkEntries = 500_000
	// MaxWalkDepth bounds how deep glob and grep descend.
	MaxWalkDepth = 256
	// MaxGrepBytes bounds the file bytes one grep call scans in total.
	MaxGrepBytes = 512 << 20
	// MaxMatchWork bounds the glob matching one glob or grep call does, in
	// pattern segments times path segments, so that a pattern with many
	// alternatives cannot stall the worker on a large tree.
	MaxMatchWork = 50_000_000
	// MaxMatchTextBytes bounds the line text reported per grep match.
	MaxMatchTextBytes = 2000
	// MaxPathBytes is the longest path (or glob pattern) accepted, PATH_MAX.
	MaxPathBytes = 4096
	// MaxRegexpBytes is the longest grep regular expression accepted.
	MaxRegexpBytes = 16 << 10
	// maxBraceExpansions bounds how many patterns {a,b} alternatives expand to.
	maxBraceExpansions = 256
)

// Sentinel errors. Every error fsguard returns wraps one of them (check with
// errors.Is) and names the operation and the path as the caller gave it; no
// error carries file content.
var (
	// ErrUnsupported: the platform or kernel cannot provide safe
	// resolution (openat2 with RESOLVE_BENEATH needs Linux 5.6).
	ErrUnsupported = errors.New("safe file access is not supported here")
	// ErrClosed: the Root was closed.
	ErrClosed = errors.New("file tools closed")
	// ErrOutside: the path resolves outside the workspace (.., an absolute
	// path elsewhere, a symbolic link leading out).
	ErrOutside = errors.New("path is outside the workspace")
	// ErrSymlink: the path traverses a symbolic link where none may be
	// followed (every write and edit, a magic link, a link loop).
	ErrSymlink = errors.New("path traverses a symbolic link, which is refused here")
	// ErrProtected: the path is, is beneath, or would shadow a protected path,
	// which stays read-only in every mode.
	ErrProtected = errors.New("path is protected and read-only")
	// ErrReadOnly: the Root was opened read-only and refuses every change.
	ErrReadOnly = errors.New("workspace is read-only")
	// ErrNotFound: the file, or a directory on its path, does not exist.
	ErrNotFound = errors.New("no such file")
	// ErrIsDir: the path is a directory where a file is needed.
	ErrIsDir = errors.New("path is a directory")
	// ErrNotRegular: the path is a device, FIFO, socket or other non-regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrHardLink: the file has more than one hard link; changing it could
	// change another path (possibly a protected one or one outside).
	ErrHardLink = errors.New("file has more than one hard link")
	// ErrTooLarge: a file, read or result exceeds the configured byte cap.
	ErrTooLarge = errors.New("file too large")
	// ErrNoMatch: the edit's old text does not occur in the file.
	ErrNoMatch = errors.New("old text not found")
	// ErrAmbiguous: the edit's old text occurs more than once and
	// replaceAll was not set.
	ErrAmbiguous = errors.New("old text occurs more than once")
	// ErrInvalidPath: the path is empty, too long or contains a NUL byte.
	ErrInvalidPath = errors.New("invalid path")
	// ErrInvalidArgument: a pattern, offset, limit or edit string is invalid.
	ErrInvalidArgument = errors.New("invalid argument")
)

// Options for a Root.
type Options struct {
	// Writable false is the ReadOnly mode: every write and edit is refused
	// with ErrReadOnly before the file system is touched.
	Writable bool
	// Protected are workspace-relative paths (files or directories) that
	// stay read-only even when Writable (config.DefaultProtected plus
	// configured additions). Matching is per path segment and ignores case,
	// so a case-insensitive file system cannot alias them.
	Protected []string
	// MaxReadBytes caps one read, one grepped file and one edited file
	// (0 = DefaultMaxReadBytes).
	MaxReadBytes int64
	// MaxWriteBytes caps the content of one write or edit result
	// (0 = DefaultMaxWriteBytes).
	MaxWriteBytes int64
	// Sync makes Write and Edit fsync the new file before renaming it into
	// place, so a crash cannot leave an empty file. Off by default: it can
	// cost tens of milliseconds per write on a busy disk, and the rename is
	// atomic either way.
	Sync bool
}

// ReadResult is the outcome of Read.
type ReadResult struct {
	// Content is the bytes read, from the requested offset.
	Content []byte
	// Size is the file's size.
	Size int64
	// Truncated reports that the file continues past Content.
	Truncated bool
}

// GlobResult is the outcome of Glob.
type GlobResult struct {
	// Paths are workspace-relative, slash-separated and sorted.
	Paths []string
	// Truncated reports that more paths may match than were returned
	// (max reached, or a walk bound hit).
	Truncated bool
}

// GrepMatch is one matching line.
type GrepMatch struct {
	// Path is workspace-relative and slash-separated.
	Path string
	// Line is 1-based.
	Line int
	// Text is the line without its line ending, cut to MaxMatchTextBytes.
	Text string
}

// GrepResult is the outcome of Grep.
type GrepResult struct {
	Matches []GrepMatch
	// Truncated reports that more matches may exist than were returned
	// (max reached, or a walk or byte bound hit).
	Truncated bool
}

// Path returns the canonical workspace path the Root serves.
func (r *Root) Path() string { return r.path }

// pathError builds the error every operation returns: operation, the path the
// caller gave, the sentinel and an optional detail.
func pathError(op, p string, sentinel error, detail string) error {
	if detail != "" {
		return fmt.Errorf("fsguard: %s %q: %w (%s)", op, p, sentinel, detail)
	}
	return fmt.Errorf("fsguard: %s %q: %w", op, p, sentinel)
}

// validatePath refuses what no file system path may be.
func validatePath(op, p string) error {
	switch {
	case p == "":
		return pathError(op, p, ErrInvalidPath, "empty")
	case len(p) > MaxPathBytes:
		return pathError(op, p[:64]+"...", ErrInvalidPath, "too long")
	case strings.IndexByte(p, 0) >= 0:
		return pathError(op, p, ErrInvalidPath, "contains a NUL byte")
	}
	return nil
}

// relative turns the caller's path into a clean, slash-separated path relative
// to the workspace ("." for the workspace itself). Relative paths are taken
// relative to the workspace; absolute ones must lie inside the canonical
// workspace path. Lexical ".." that climbs out is refused here; everything
// else about where a path leads is decided by the kernel at open time.
func relative(workspace, op, p string) (string, error) {
	if err := validatePath(op, p); err != nil {
		return "", err
	}
	c := path.Clean(p)
	if path.IsAbs(c) {
		switch {
		case c == workspace:
			return ".", nil
		case strings.HasPrefix(c, workspace+"/"):
			return c[len(workspace)+1:], nil
		}
		return "", pathError(op, p, ErrOutside, "")
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", pathError(op, p, ErrOutside, "")
	}
	return c, nil
}

// normalizeProtected validates and splits the protected entries.
func normalizeProtected(entries []string) ([][]string, error) {
	var out [][]string
	for i, e := range entries {
		if e == "" || strings.IndexByte(e, 0) >= 0 || path.IsAbs(e) {
			return nil, fmt.Errorf("fsguard: protected[%d] %q: %w (must be a non-empty workspace-relative path)", i, e, ErrInvalidPath)
		}
		c := path.Clean(e)
		if c == "." || c == ".." || strings.HasPrefix(c, "../") {
			return nil, fmt.Errorf("fsguard: protected[%d] %q: %w (must name a path inside the workspace)", i, e, ErrInvalidPath)
		}
		out = append(out, strings.Split(c, "/"))
	}
	return out, nil
}

// protectedEntry reports the protected entry that rel (a clean relative path,
// not ".") is equal to, beneath, or an ancestor of. An ancestor counts because
// creating a file there would shadow the protected path: a file named .git
// holding "gitdir: elsewhere" redirects .git/hooks and .git/config wholesale.
// Segments compare case-insensitively and without Unicode default-ignorable
// code points, so that a case-folding file system (ext4 casefold, vfat, APFS,
// HFS+, which also ignores zero-width characters) cannot alias a protected
// path.
//
// Entries below .git apply to every repository in the workspace: rel's
// part from any nested .git segment on is matched against them too, so
// sub/.git/hooks/x, or a file named sub/.git, is protected like .git/hooks/x.
func protectedEntry(protected [][]string, rel string) (string, bool) {
	segs := strings.Split(rel, "/")
	if e, ok := matchProtected(protected, segs, false); ok {
		return e, true
	}
	for i := 1; i < len(segs); i++ {
		if IsGitName(segs[i]) {
			if e, ok := matchProtected(protected, segs[i:], true); ok {
				return strings.Join(segs[:i], "/") + "/" + e, true
			}
		}
	}
	return "", false
}

// matchProtected reports the entry that segs equals, lies beneath or is an
// ancestor of; gitOnly considers only entries below .git.
func matchProtected(protected [][]string, segs []string, gitOnly bool) (string, bool) {
	for _, p := range protected {
		if gitOnly && (len(p) < 2 || !IsGitName(p[0])) {
			continue
		}
		n := min(len(p), len(segs))
		same := true
		for i := range n {
			if !strings.EqualFold(stripIgnorable(p[i]), stripIgnorable(segs[i])) {
				same = false
				break
			}
		}
		if same {
			return strings.Join(p, "/"), true
		}
	}
	return "", false
}

// stripIgnorable removes the code points case-folding file systems ignore
// when comparing names: format characters (zero-width joiners, BOM, bidi
// controls), variation selectors and the other default-ignorables.
func stripIgnorable(s string) string {
	ignorable := func(r rune) bool {
		return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) ||
			unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
	}
	if strings.IndexFunc(s, ignorable) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if ignorable(r) {
			return -1
		}
		return r
	}, s)
}

// ProtectedMatcher returns the check the tripwire and the file tools make
// of a workspace-relative path (slash-separated, clean) against the
// protected entries: the entry it is equal to, beneath or an ancestor of,
// compared as a case-folding file system would, with entries below .git
// applying to every nested repository. Code that changes the workspace on
// the host from elsewhere (a session's changes pulled back) uses it.
func ProtectedMatcher(protected []string) (func(rel string) (string, bool), error) {
	ps, err := normalizeProtected(protected)
	if err != nil {
		return nil, err
	}
	return func(rel string) (string, bool) { return protectedEntry(ps, rel) }, nil
}
