// Package wsync moves a workspace into and out of a session that does not
// share the host's filesystem (a Kubernetes pod) as a tar stream, checked
// on both ends.
//
// Pack writes a tree as tar: regular files, directories and symlinks (as
// symlinks: a link is never followed), permission bits only (no setuid,
// setgid or sticky bit), modification times. It reads through an os.Root,
// so a directory swapped for a symlink while it is walked cannot lead the
// walk out of the tree.
//
// Unpack is the receiving end, inside the pod (`vak __untar DIR`) and on
// the host when changes come back: the stream is untrusted. It writes only
// below its directory, through an os.Root (no entry can leave it, whatever
// its name or the links earlier entries made); it refuses absolute names,
// ".." components, names that are not clean, hard links, devices, fifos and
// any other entry type, and streams beyond its size or entry limits; each
// file is written under a temporary name and renamed into place. An entry
// refused makes the whole unpack fail (the error names the entry).
package wsync

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Errors.
var (
	// ErrEntry reports a tar entry Unpack refuses; the message names it.
	ErrEntry = errors.New("wsync: refused entry")
	// ErrLimit reports a stream over its size or entry limit.
	ErrLimit = errors.New("wsync: limit exceeded")
)

// Stats counts what a Pack or Unpack moved.
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
	// Skipped are the entries Pack left out (sockets, devices, fifos),
	// relative paths.
	Skipped []string
}

// PackOptions configure Pack.
type PackOptions struct {
	// Exclude, if set, leaves out the entries whose slash-separated path
	// relative to the tree it accepts (a directory with all it holds).
	Exclude func(rel string) bool
}

// Pack writes the tree under dir to w as a tar stream.
func Pack(w io.Writer, dir string, opt PackOptions) (Stats, error) {
	var st Stats
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("wsync: pack %s: %w", dir, err)
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	if err := packDir(root, tw, ".", opt, &st); err != nil {
		return st, fmt.Errorf("wsync: pack %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return st, fmt.Errorf("wsync: pack %s: %w", dir, err)
	}
	return st, nil
}

// packDir writes the entries of directory rel (inside root), depth first,
// in name order.
func packDir(root *os.Root, tw *tar.Writer, rel string, opt PackOptions, st *Stats) error {
	d, err := root.Open(rel)
	if err != nil {
		return err
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := path.Join(rel, e.Name())
		if opt.Exclude != nil && opt.Exclude(name) {
			continue
		}
		if err := packEntry(root, tw, name, opt, st); err != nil {
			return err
		}
	}
	return nil
}

// packEntry writes one entry (and, for a directory, what it holds).
func packEntry(root *os.Root, tw *tar.Writer, name string, opt PackOptions, st *Stats) error {
	fi, err := root.Lstat(name)
	if err != nil {
		return err
	}
	h := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime().Truncate(time.Second), Format: tar.FormatPAX}
	switch m := fi.Mode(); {
	case m.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		st.Dirs++
		return packDir(root, tw, name, opt, st)
	case m&fs.ModeSymlink != 0:
		target, err := root.Readlink(name)
		if err != nil {
			return err
		}
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, target, 0o777
		st.Symlinks++
		return tw.WriteHeader(h)
	case m.IsRegular():
		f, err := root.OpenFile(name, os.O_RDONLY|noFollow, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		// The size of what was opened, not of what was looked at.
		ofi, err := f.Stat()
		if err != nil {
			return err
		}
		if !ofi.Mode().IsRegular() {
			return fmt.Errorf("%s changed while it was packed", name)
		}
		h.Typeflag, h.Size = tar.TypeReg, ofi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		n, err := io.CopyN(tw, f, ofi.Size())
		st.Bytes += n
		if err != nil {
			return fmt.Errorf("%s: %w (did it shrink while it was packed?)", name, err)
		}
		st.Files++
		return nil
	default:
		st.Skipped = append(st.Skipped, name)
		return nil
	}
}

// Default limits of Unpack.
const (
	DefaultMaxBytes   = 8 << 30
	DefaultMaxEntries = 2_000_000
)

// UnpackOptions configure Unpack.
type UnpackOptions struct {
	// MaxBytes bounds the files' total size; zero means DefaultMaxBytes.
	MaxBytes int64
	// MaxEntries bounds the number of entries; zero means
	// DefaultMaxEntries.
	MaxEntries int
	// Accept, if set, is asked about every entry (its clean
	// slash-separated name and type) before it is written; an error
	// refuses the whole stream.
	Accept func(name string, typ byte) error
}

// Unpack writes the tar stream r into dir, which must exist.
func Unpack(r io.Reader, dir string, opt UnpackOptions) (Stats, error) {
	var st Stats
	if opt.MaxBytes == 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.MaxEntries == 0 {
		opt.MaxEntries = DefaultMaxEntries
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("wsync: unpack into %s: %w", dir, err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var dirTimes []dirTime
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, fmt.Errorf("wsync: unpack into %s: %w", dir, err)
		}
		if n >= opt.MaxEntries {
			return st, fmt.Errorf("%w: more than %d entries", ErrLimit, opt.MaxEntries)
		}
		name, err := checkName(h)
		if err != nil {
			return st, err
		}
		if opt.Accept != nil {
			if err := opt.Accept(name, h.Typeflag); err != nil {
				return st, err
			}
		}
		if err := unpackEntry(root, tr, h, name, opt, &st); err != nil {
			return st, fmt.Errorf("wsync: unpack %q into %s: %w", h.Name, dir, err)
		}
		if h.Typeflag == tar.TypeDir {
			dirTimes = append(dirTimes, dirTime{name, h.ModTime})
		}
	}
	// Directory times last: writing into a directory changes its time.
	for i := len(dirTimes) - 1; i >= 0; i-- {
		root.Chtimes(dirTimes[i].name, dirTimes[i].t, dirTimes[i].t)
	}
	return st, nil
}

type dirTime struct {
	name string
	t    time.Time
}

// checkName returns h's clean relative name, or why the entry is refused.
func checkName(h *tar.Header) (string, error) {
	raw := h.Name
	name := strings.TrimSuffix(raw, "/")
	refuse := func(why string) (string, error) {
		return "", fmt.Errorf("%w %q: %s", ErrEntry, raw, why)
	}
	switch {
	case name == "" || name == ".":
		return refuse("no name")
	case strings.ContainsRune(name, 0) || strings.Contains(name, `\`):
		return refuse("NUL or backslash in the name")
	case path.IsAbs(name) || filepath.IsAbs(name):
		return refuse("absolute name")
	case path.Clean(name) != name:
		return refuse("not a clean relative name")
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == ".." || seg == "." {
			return refuse("'..' or '.' component")
		}
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
	case tar.TypeLink:
		return refuse("hard links are refused")
	default:
		return refuse(fmt.Sprintf("entry type %q (only files, directories and symlinks)", h.Typeflag))
	}
	return name, nil
}

// unpackEntry writes one checked entry.
func unpackEntry(root *os.Root, tr *tar.Reader, h *tar.Header, name string, opt UnpackOptions, st *Stats) error {
	perm := fs.FileMode(h.Mode).Perm()
	switch h.Typeflag {
	case tar.TypeDir:
		st.Dirs++
		fi, err := root.Lstat(name)
		if err == nil && fi.IsDir() {
			return root.Chmod(name, perm|0o700)
		}
		if err == nil {
			// Not a directory: the stream replaces it.
			if err := root.Remove(name); err != nil {
				return err
			}
		}
		return root.Mkdir(name, perm|0o700)
	case tar.TypeSymlink:
		st.Symlinks++
		if err := removeExisting(root, name); err != nil {
			return err
		}
		return root.Symlink(h.Linkname, name)
	default:
		if h.Size < 0 || st.Bytes+h.Size > opt.MaxBytes {
			return fmt.Errorf("%w: more than %d bytes", ErrLimit, opt.MaxBytes)
		}
		st.Files++
		return writeFile(root, tr, name, h, perm, st)
	}
}

// removeExisting removes a non-directory at name, if any (a directory is
// left: replacing one with a link or file is refused by the create).
func removeExisting(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%w %q: would replace a directory", ErrEntry, name)
	}
	return root.Remove(name)
}

// writeFile writes a regular file under a temporary name next to name and
// renames it into place.
func writeFile(root *os.Root, r io.Reader, name string, h *tar.Header, perm fs.FileMode, st *Stats) error {
	tmp := path.Join(path.Dir(name), fmt.Sprintf(".wsync-%d-%s", os.Getpid(), path.Base(name)))
	if len(path.Base(tmp)) > 255 {
		tmp = path.Join(path.Dir(name), fmt.Sprintf(".wsync-%d", os.Getpid()))
	}
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if err != nil {
		return err
	}
	n, err := io.CopyN(f, r, h.Size)
	st.Bytes += n
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		root.Chtimes(tmp, h.ModTime, h.ModTime)
		if err = removeExisting(root, name); err == nil {
			err = root.Rename(tmp, name)
		}
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}

// noFollow refuses a symlink as the last component of an open (the entry
// was looked at as a regular file; a link swapped in since is refused).
const noFollow = syscall.O_NOFOLLOW
