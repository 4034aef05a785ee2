package taskenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/errclass"
)

// A snapshot key is computed from what the broker is told (the manifest);
// the image it names must also hold what the session's filesystem holds.
// At commit, the image is labelled with LabelContent, a digest of the
// container's filesystem changes: docker diff's list, with each changed
// regular file's content hash and each symlink's target (mount points and
// their parent directories are left out: they differ between workspaces,
// not between environments). A later snapshot with the same key whose
// content digest differs is refused (ErrSnapshotMismatch): the key is never
// silently given to different content.

// LabelContent labels a snapshot image with its content digest.
const LabelContent = "vak.content"

// HashFilesCommand is the hidden vak subcommand that hashes files inside a
// session container (run by the broker through the daemon).
const HashFilesCommand = "__hashfiles"

// ErrSnapshotMismatch reports a snapshot whose content differs from the
// cached image with the same key.
var ErrSnapshotMismatch = errclass.New(errclass.Invalid, "snapshot content differs from the cached image with the same key")

// HashFiles reads NUL-separated absolute paths from r and writes, for each,
// one line "QUOTED-PATH\tKIND\tMODE\tHASH" (PATH Go-quoted, MODE as
// fs.FileMode prints it, "-" when missing): KIND is dir, file, symlink, missing or other;
// HASH is the SHA-256 of a file's content, a symlink's target, or "-".
// Files it cannot read get "unreadable:SIZE".
func HashFiles(r io.Reader, w io.Writer) error {
	bw := bufio.NewWriter(w)
	data, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return err
	}
	for _, p := range strings.Split(string(data), "\x00") {
		if p == "" {
			continue
		}
		kind, sum, mode := "missing", "-", "-"
		if fi, err := os.Lstat(p); err == nil {
			mode = fi.Mode().String()
			switch {
			case fi.IsDir():
				kind = "dir"
			case fi.Mode()&os.ModeSymlink != 0:
				kind = "symlink"
				t, _ := os.Readlink(p)
				s := sha256.Sum256([]byte(t))
				sum = hex.EncodeToString(s[:])
			case fi.Mode().IsRegular():
				kind = "file"
				sum = fmt.Sprintf("unreadable:%d", fi.Size())
				if f, err := os.Open(p); err == nil {
					h := sha256.New()
					if _, err := io.Copy(h, f); err == nil {
						sum = hex.EncodeToString(h.Sum(nil))
					}
					f.Close()
				}
			default:
				kind = "other"
			}
		}
		// Quoted: a file name can hold tabs and newlines, and must not be
		// able to forge another entry of the digest.
		fmt.Fprintf(bw, "%q\t%s\t%s\t%s\n", p, kind, mode, sum)
	}
	return bw.Flush()
}

// contentDigest computes a session container's content digest (see
// LabelContent). mounts are the container's mount destinations.
func contentDigest(ctx context.Context, cli *client.Client, ctr, user string, mounts []string) (string, error) {
	diff, err := cli.ContainerDiff(ctx, ctr, client.ContainerDiffOptions{})
	if err != nil {
		return "", engine.APIError("diff session container", err)
	}
	skip := func(p string) bool {
		for _, m := range mounts {
			if p == m || strings.HasPrefix(m, p+"/") || strings.HasPrefix(p, m+"/") {
				return true
			}
		}
		return false
	}
	var changes []container.FilesystemChange
	var paths bytes.Buffer
	for _, c := range diff.Changes {
		if skip(path.Clean(c.Path)) {
			continue
		}
		changes = append(changes, c)
		if c.Kind != container.ChangeDelete {
			paths.WriteString(c.Path)
			paths.WriteByte(0)
		}
	}
	slices.SortFunc(changes, func(a, b container.FilesystemChange) int { return strings.Compare(a.Path, b.Path) })
	hashes, err := execWithInput(ctx, cli, ctr, user, paths.Bytes(), ContainerWorker, HashFilesCommand)
	if err != nil {
		return "", fmt.Errorf("hash the session's files: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(hashes), "\n")
	slices.Sort(lines)
	h := sha256.New()
	fmt.Fprintln(h, "vak-content-v1")
	for _, c := range changes {
		fmt.Fprintf(h, "%s\t%q\n", c.Kind, c.Path)
	}
	for _, l := range lines {
		fmt.Fprintln(h, l)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// execWithInput runs cmd in a container through the daemon with stdin and
// returns its stdout; a non-zero exit is an error.
func execWithInput(ctx context.Context, cli *client.Client, ctr, user string, stdin []byte, cmd ...string) (string, error) {
	ex, err := cli.ExecCreate(ctx, ctr, client.ExecCreateOptions{Cmd: cmd, User: user, AttachStdin: true, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", engine.APIError("exec", err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", engine.APIError("exec attach", err)
	}
	defer att.Close()
	go func() {
		att.Conn.Write(stdin)
		att.CloseWrite()
	}()
	var out, errb bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errb, att.Reader); err != nil {
		return "", err
	}
	ins, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		return "", engine.APIError("exec inspect", err)
	}
	if ins.ExitCode != 0 {
		return "", fmt.Errorf("exit status %d: %s", ins.ExitCode, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
