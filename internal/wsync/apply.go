package wsync

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"vak/internal/fsguard"
)

// Apply is the way back: a session's workspace, as a tar stream from the
// session (hostile), applied to the host's workspace dir. The stream is
// unpacked into a private staging directory first, so a malformed stream
// or one over its limits changes nothing. Then each entry is applied
// unless it is refused, and the refusals are reported:
//
//   - a git control entry (.git, in any spelling) at any depth;
//   - a path the Protected check matches (the tripwire's: .git in any
//     spelling, hooks, vak's config files, the configured entries), with
//     everything below it;
//   - a symbolic link whose target is absolute, leaves the workspace, or
//     names a protected path;
//   - an entry whose parent in the workspace is a symbolic link (a link
//     the workspace already has is never written through);
//   - a file or link that would replace a directory.
//
// Files and links are written under a temporary name and renamed into
// place. Paths the session deleted are not deleted on the host.

// Refusal is one entry Apply did not apply, and why.
type Refusal struct{ Path, Reason string }

// Report is what Apply did.
type Report struct {
	// Written are the files and links written (changed or new) and the
	// directories made, workspace-relative.
	Written []string
	// Unchanged counts files whose content and mode were already there.
	Unchanged int
	Refused   []Refusal
}

// ApplyOptions configure Apply.
type ApplyOptions struct {
	// Protected reports the protected entry a workspace-relative path
	// falls under (fsguard.ProtectedMatcher); nil protects nothing.
	Protected func(rel string) (string, bool)
	// Unpack bounds the stream.
	Unpack UnpackOptions
}

// Apply applies the tar stream r to dir (see above).
func Apply(r io.Reader, dir string, opt ApplyOptions) (*Report, error) {
	stage, err := os.MkdirTemp("", "vak-pull-")
	if err != nil {
		return nil, fmt.Errorf("wsync: staging: %w", err)
	}
	defer os.RemoveAll(stage)
	if _, err := Unpack(r, stage, opt.Unpack); err != nil {
		return nil, fmt.Errorf("%w (nothing was applied to %s)", err, dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("wsync: apply to %s: %w", dir, err)
	}
	defer root.Close()
	rep := &Report{}
	err = filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(stage, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if why := refuse(root, rel, p, d, opt); why != "" {
			rep.Refused = append(rep.Refused, Refusal{rel, why})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		changed, err := applyEntry(root, rel, p, d)
		if err != nil {
			return fmt.Errorf("wsync: apply %s to %s: %w", rel, dir, err)
		}
		if changed {
			rep.Written = append(rep.Written, rel)
		} else if !d.IsDir() {
			rep.Unchanged++
		}
		return nil
	})
	return rep, err
}

// refuse says why the staged entry rel (at p) may not be applied, or "".
func refuse(root *os.Root, rel, p string, d fs.DirEntry, opt ApplyOptions) string {
	// A git control entry at any depth: a nested .git (a file "gitdir:
	// elsewhere", or a directory with hooks and config) would make git
	// on the host run what the session wrote.
	for _, seg := range strings.Split(rel, "/") {
		if fsguard.IsGitName(seg) {
			return "a git control entry (" + seg + ")"
		}
	}
	if opt.Protected != nil {
		if e, ok := opt.Protected(rel); ok {
			return "protected path (" + e + ")"
		}
	}
	// Never write through a link the workspace already has.
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		if fi, err := root.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "its parent " + dir + " is a symbolic link in the workspace"
		}
	}
	if d.Type()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(p)
		if err != nil {
			return err.Error()
		}
		if path.IsAbs(target) || filepath.IsAbs(target) {
			return "symbolic link to an absolute path (" + target + ")"
		}
		resolved := path.Join(path.Dir(rel), target)
		if resolved == ".." || strings.HasPrefix(resolved, "../") {
			return "symbolic link leaving the workspace (" + target + ")"
		}
		if opt.Protected != nil && resolved != "." {
			if e, ok := opt.Protected(resolved); ok {
				return "symbolic link to a protected path (" + e + ")"
			}
		}
	}
	if !d.IsDir() {
		if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
			return "would replace a directory"
		}
	}
	return ""
}

// applyEntry applies one staged entry; it reports whether the workspace
// changed.
func applyEntry(root *os.Root, rel, p string, d fs.DirEntry) (bool, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return false, err
	}
	switch {
	case d.IsDir():
		cur, err := root.Lstat(rel)
		if err == nil && cur.IsDir() {
			return false, nil
		}
		if err == nil {
			if err := root.Remove(rel); err != nil {
				return false, err
			}
		}
		return true, root.Mkdir(rel, fi.Mode().Perm())
	case d.Type()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(p)
		if cur, err := root.Readlink(rel); err == nil && cur == target {
			return false, nil
		}
		tmp := tempName(rel)
		if err := root.Symlink(target, tmp); err != nil {
			return false, err
		}
		if err := root.Rename(tmp, rel); err != nil {
			root.Remove(tmp)
			return false, err
		}
		return true, nil
	default:
		if same(root, rel, p, fi) {
			return false, nil
		}
		return true, copyIn(root, rel, p, fi)
	}
}

// same reports whether the workspace's rel already has p's content and
// mode.
func same(root *os.Root, rel, p string, fi fs.FileInfo) bool {
	cur, err := root.Lstat(rel)
	if err != nil || !cur.Mode().IsRegular() || cur.Size() != fi.Size() || cur.Mode().Perm() != fi.Mode().Perm() {
		return false
	}
	a, err := root.ReadFile(rel)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(p)
	return err == nil && string(a) == string(b)
}

// copyIn writes staged file p to rel under a temporary name, then renames
// it into place.
func copyIn(root *os.Root, rel, p string, fi fs.FileInfo) error {
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := tempName(rel)
	dst, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if err == nil {
		err = dst.Chmod(fi.Mode().Perm())
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		root.Chtimes(tmp, fi.ModTime(), fi.ModTime())
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}

func tempName(rel string) string {
	name := fmt.Sprintf(".vak-pull-%d-%s", os.Getpid(), path.Base(rel))
	if len(name) > 255 {
		name = name[:255]
	}
	return path.Join(path.Dir(rel), name)
}

// ErrRefused is wrapped by callers that treat a refusal as a failure.
var ErrRefused = errors.New("wsync: entries refused")
