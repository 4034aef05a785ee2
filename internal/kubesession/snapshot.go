package kubesession

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"

	"vak/internal/errclass"
	"vak/internal/worker/wire"
	"vak/internal/wsync"
)

// A snapshot of a kubernetes session is its home directory (HOME, where
// an unprivileged session installs what it adds: ~/.local, ~/.npm, ~/go,
// ...) on top of its image, pinned by the image ID the cluster ran. The
// workspace is not part of it (a session from a snapshot gets the host's
// workspace, as any create), nor is /tmp, nor anything else the session
// wrote on the image's root filesystem. The host keeps it, under the key
// the caller computes from the image ID and the session's policy (taskenv's
// content-addressed key, as a Docker snapshot's):
//
//	STATE/kube-snapshots/KEY/home.tar       the home, as `vak __tar` packed it in the pod
//	STATE/kube-snapshots/KEY/snapshot.json  SnapshotInfo
//
// The host never unpacks home.tar: it is streamed into the next session's
// pod, after its workspace, and unpacked there by the sync init container
// (wsync.Unpack's checks, as the session's uid, into the home volume).

// More errors of snapshots.
var (
	// ErrNoSnapshot reports a key with no snapshot on this host.
	ErrNoSnapshot = errclass.New(errclass.Invalid, "no such kubernetes snapshot")
	// ErrSnapshotMismatch reports a snapshot whose key exists with other
	// content, or whose stored archive no longer matches its record, or a
	// create from a snapshot whose image the cluster no longer has as it
	// was.
	ErrSnapshotMismatch = errclass.New(errclass.Invalid, "kubernetes snapshot mismatch")
)

// MaxSnapshotBytes bounds a snapshot's archive.
const MaxSnapshotBytes = 4 << 30

// SnapshotInfo is what the host records of a kubernetes snapshot.
type SnapshotInfo struct {
	Key string `json:"key"`
	// Image is the session's image reference, ImageID the image the
	// cluster ran for it (the session container's status).
	Image   string `json:"image"`
	ImageID string `json:"image_id"`
	// Content is the digest of the home's entries (names, types, modes,
	// link targets, contents; not times); Archive the SHA-256 of home.tar.
	Content string    `json:"content"`
	Archive string    `json:"archive"`
	Size    int64     `json:"size"`
	Session string    `json:"session"`
	Created time.Time `json:"created"`
	// Cached says the snapshot existed with the same content and was
	// reused (not stored).
	Cached bool `json:"-"`
}

// SnapshotDir is where the host keeps kubernetes snapshots.
func SnapshotDir(state string) string { return filepath.Join(state, "kube-snapshots") }

var snapshotKeyRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (m *Manager) snapshotPath(key string) (string, error) {
	if !snapshotKeyRe.MatchString(key) {
		return "", fmt.Errorf("%w: %q is not a snapshot key (64 hex digits)", ErrNoSnapshot, key)
	}
	return filepath.Join(SnapshotDir(m.StateDir), key), nil
}

// ReadSnapshot returns the record of snapshot key.
func (m *Manager) ReadSnapshot(key string) (*SnapshotInfo, error) {
	dir, err := m.snapshotPath(key)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "snapshot.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (vak session snapshot ID makes one)", ErrNoSnapshot, key)
	}
	if err != nil {
		return nil, err
	}
	var info SnapshotInfo
	if err := json.Unmarshal(data, &info); err != nil || info.Key != key {
		return nil, fmt.Errorf("%w: %s: its record %s is damaged (remove the directory and snapshot again)", ErrSnapshotMismatch, key, filepath.Join(dir, "snapshot.json"))
	}
	return &info, nil
}

// RemoveSnapshot removes snapshot key from this host.
func (m *Manager) RemoveSnapshot(key string) error {
	if _, err := m.ReadSnapshot(key); err != nil && errors.Is(err, ErrNoSnapshot) {
		return err
	}
	dir, _ := m.snapshotPath(key)
	return os.RemoveAll(dir)
}

// Snapshot packs session id's home into a snapshot under the key keyOf
// returns for the image ID the cluster ran and the session's policy. If
// that key exists with the same content it is reused (Cached); with other
// content the snapshot is refused (ErrSnapshotMismatch), as for Docker.
func (m *Manager) Snapshot(ctx context.Context, id string, keyOf func(imageID, policy string) string) (*SnapshotInfo, error) {
	rec, err := m.readRecord(id)
	if err != nil {
		return nil, err
	}
	if err := m.sameCluster(rec); err != nil {
		return nil, err
	}
	p, err := m.Cluster.api.getPod(ctx, rec.Namespace, rec.Pod)
	if err != nil {
		return nil, m.endedIfGone(rec, apiError("get pod "+rec.Namespace+"/"+rec.Pod, err))
	}
	imageID := containerImageID(p, ContainerSession)
	if imageID == "" {
		return nil, m.endedIfGone(rec, fmt.Errorf("%w: pod %s/%s reports no image ID for its session container", ErrPodFailed, rec.Namespace, rec.Pod))
	}
	key := keyOf(imageID, rec.Policy)
	dir, err := m.snapshotPath(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(SnapshotDir(m.StateDir), 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(SnapshotDir(m.StateDir), ".new-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	info := &SnapshotInfo{Key: key, Image: rec.Image, ImageID: imageID, Session: id, Created: time.Now().UTC()}
	if err := m.packHome(ctx, rec, filepath.Join(tmp, "home.tar"), info); err != nil {
		return nil, err
	}
	if old, err := m.ReadSnapshot(key); err == nil {
		if old.Content != info.Content {
			return nil, fmt.Errorf("%w: %s exists and its home differs from this session's; describe what differs in the manifest (-m NAME=VALUE, -m NAME=@FILE) or remove it (rm -r %s)", ErrSnapshotMismatch, key, dir)
		}
		old.Cached = true
		return old, nil
	}
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "snapshot.json"), append(data, '\n'), 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, rerr := m.ReadSnapshot(key); rerr == nil {
			return m.Snapshot(ctx, id, keyOf) // made meanwhile: compare with it
		}
		return nil, err
	}
	return info, nil
}

// packHome streams `vak __tar HOME` from rec's session container into
// file, filling in info's digests and size.
func (m *Manager) packHome(ctx context.Context, rec *record, file string, info *SnapshotInfo) error {
	c := m.Cluster
	ex, err := c.executor(c.execRequest(rec.Pod, ContainerSession, []string{Worker, TarCommand, Home}, false))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	pr, pw := io.Pipe()
	stderr := wire.NewTailBuffer(4 << 10)
	go func() {
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: pw, Stderr: stderr})
		if err != nil {
			err = fmt.Errorf("pack the session's home: %v %s", err, stderr.String())
		}
		pw.CloseWithError(err)
	}()
	archive := sha256.New()
	lim := &limitReader{r: pr, n: MaxSnapshotBytes}
	content, err := ContentDigest(io.TeeReader(io.TeeReader(lim, archive), f))
	if err == nil {
		// The tar's end has been read; the rest (padding) belongs to it too.
		_, err = io.Copy(io.MultiWriter(archive, f), lim)
	}
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return m.endedIfGone(rec, fmt.Errorf("snapshot of %s: %w", rec.ID, err))
	}
	info.Content, info.Archive, info.Size = content, hex.EncodeToString(archive.Sum(nil)), lim.read
	return f.Sync()
}

// limitReader fails a stream longer than n bytes.
type limitReader struct {
	r    io.Reader
	n    int64
	read int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.read += int64(n)
	if l.read > l.n {
		return n, fmt.Errorf("%w: the home is larger than %d bytes", wsync.ErrLimit, l.n)
	}
	return n, err
}

// ContentDigest reads a tar stream to its end and returns the digest of
// its entries: each entry's name, type, mode, link target and content, in
// order; not times or owners, so the same files packed at another time
// digest alike.
func ContentDigest(r io.Reader) (string, error) {
	h := sha256.New()
	tr := tar.NewReader(r)
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", fmt.Errorf("read the home's archive: %w", err)
		}
		fmt.Fprintf(h, "%d:%s\x00%c\x00%o\x00%d:%s\x00%d\x00", len(hd.Name), hd.Name, hd.Typeflag, hd.Mode, len(hd.Linkname), hd.Linkname, hd.Size)
		if _, err := io.Copy(h, tr); err != nil {
			return "", fmt.Errorf("read the home's archive: %w", err)
		}
	}
}

// openSnapshot opens snapshot key's archive for an upload after checking
// it is the archive its record names.
func (m *Manager) openSnapshot(key string) (*SnapshotInfo, *os.File, error) {
	info, err := m.ReadSnapshot(key)
	if err != nil {
		return nil, nil, err
	}
	dir, _ := m.snapshotPath(key)
	f, err := os.Open(filepath.Join(dir, "home.tar"))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrSnapshotMismatch, key, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, nil, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != info.Archive {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s: home.tar changed since the snapshot (sha256 %s, recorded %s): remove it and snapshot again", ErrSnapshotMismatch, key, got, info.Archive)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, err
	}
	return info, f, nil
}

// containerImageID is the image ID the cluster reports for container name
// of p ("" if it has none yet).
func containerImageID(p *corev1.Pod, name string) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name {
			return cs.ImageID
		}
	}
	return ""
}
