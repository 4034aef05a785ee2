package taskenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/worker"
)

// Snapshots are immutable images of a session's root filesystem (the
// workspace and /tmp are mounts and are not part of them). A snapshot's
// identity is its key, the hash of three inputs:
//
//   - the base image ID the session was pinned to,
//   - the environment manifest (what was done to the base: setup commands,
//     lockfile digests, ...; written by the broker),
//   - the policy generation (the operator's counter, PolicyGeneration, and
//     a digest of the session's network policy, mode and install rights).
//
// Changing any one gives a new key; the same three give the same key, and
// the image tagged SnapshotRepo:KEY is reused without committing anything.

// SnapshotRepo is the repository snapshots are tagged in (vak-env:KEY).
const SnapshotRepo = "vak-env"

// Snapshot labels.
const (
	KindSnapshot  = "snapshot"
	LabelSnapshot = "vak.snapshot" // the key
	LabelBase     = "vak.base"     // the base image ID
)

// DefaultPolicyGeneration is PolicyGeneration when none is configured.
const DefaultPolicyGeneration = "1"

// Manifest describes how an environment was made from its base image. Its
// canonical encoding (JSON, keys sorted) is part of the snapshot key.
type Manifest map[string]string

// ImageRef names a snapshot.
type ImageRef struct {
	Key  string // hex SHA-256 of base, manifest and policy generation
	Ref  string // SnapshotRepo:Key
	ID   string // the image ID
	Base string // the base image ID
	// Cached says the image already existed and was reused (nothing was
	// committed).
	Cached bool
	// Host, for a kubernetes session's snapshot (no image: its home on
	// this host), is the directory holding it; ID is then its content
	// digest and Base the image ID the cluster ran.
	Host string
}

// ErrNoSnapshot reports an unknown snapshot key.
var ErrNoSnapshot = errclass.New(errclass.Invalid, "no such snapshot")

var keyRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })

// SnapshotKey is the content address of an environment: the SHA-256 of the
// base image ID, the canonical manifest and the policy generation, each
// length-prefixed so no two triples encode alike.
func SnapshotKey(base string, manifest Manifest, policyGeneration string) string {
	mj, _ := json.Marshal(manifest) // sorted keys; a nil map is "null", an empty one "{}"
	if len(manifest) == 0 {
		mj = []byte("{}")
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte("vak-snapshot-v1"), []byte(base), mj, []byte(policyGeneration)} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SnapshotRef is the image reference of a snapshot key (for Spec.BaseImage:
// "create --from KEY"). It accepts a full key only.
func SnapshotRef(key string) (string, error) {
	key = strings.TrimPrefix(key, SnapshotRepo+":")
	if !keyRe().MatchString(key) {
		return "", fmt.Errorf("%w: %q is not a snapshot key (64 hex digits)", ErrNoSnapshot, key)
	}
	return SnapshotRepo + ":" + key, nil
}

// policyGeneration combines the operator's generation with the session's
// policy digest.
func (m *Manager) policyGeneration(sessionPolicy string) string {
	g := m.PolicyGeneration
	if g == "" {
		g = DefaultPolicyGeneration
	}
	return g + "/" + sessionPolicy
}

// Snapshot makes an immutable image of session id's environment, keyed by
// its base image, manifest and policy generation. If an image with that key
// exists it is returned as is (Cached); otherwise the container is committed
// (paused meanwhile) and tagged with the key. The image's configuration is
// the base image's, not the session container's (no worker entrypoint).
func (m *Manager) Snapshot(ctx context.Context, id string, manifest Manifest) (*ImageRef, error) {
	cli, err := m.engine()
	if err != nil {
		return nil, err
	}
	rec, err := m.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = m.recordFromDaemon(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	ci, err := cli.ContainerInspect(ctx, rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: session %s: its container was removed", ErrSessionEnded, id)
		}
		return nil, engine.APIError("inspect session", err)
	}
	if ci.Container.HostConfig != nil {
		if err := snapshotRuntime(ctx, cli, id, ci.Container.HostConfig.Runtime); err != nil {
			return nil, err
		}
	}
	labels := ci.Container.Config.Labels
	base := labels[LabelImage]
	key := SnapshotKey(base, manifest, m.policyGeneration(labels[LabelPolicy]))
	ref := SnapshotRepo + ":" + key
	out := &ImageRef{Key: key, Ref: ref, Base: base}
	// What the session's filesystem holds, checked against a cached image
	// and recorded on a new one (snapshot_verify.go).
	mounts := []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}
	for _, mp := range ci.Container.Mounts {
		mounts = append(mounts, mp.Destination)
	}
	digest, err := contentDigest(ctx, cli, rec.Container, rec.User, mounts)
	if err != nil {
		return nil, err
	}
	cachedOK := func(ii client.ImageInspectResult) (*ImageRef, error) {
		got := ""
		if ii.Config != nil {
			got = ii.Config.Labels[LabelContent]
		}
		if got != digest {
			why := "its content differs from this session's"
			if got == "" {
				why = "it has no content digest (made by an older vak)"
			}
			return nil, fmt.Errorf("%w: %s exists and %s; describe what differs in the manifest (-m NAME=VALUE, -m NAME=@FILE) or remove the image (docker image rm %s)", ErrSnapshotMismatch, ref, why, ref)
		}
		out.ID, out.Cached = ii.ID, true
		return out, nil
	}
	if ii, err := cli.ImageInspect(ctx, ref); err == nil {
		return cachedOK(ii)
	}
	unlock, err := m.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if ii, err := cli.ImageInspect(ctx, ref); err == nil { // made meanwhile
		return cachedOK(ii)
	}
	bi, err := cli.ImageInspect(ctx, base)
	if err != nil {
		return nil, engine.APIError("inspect base image "+base, err)
	}
	cfg := &container.Config{Labels: map[string]string{}, Entrypoint: []string{}, Env: []string{worker.SpecEnv + "="}}
	if bc := bi.Config; bc != nil {
		cfg.User, cfg.WorkingDir, cfg.StopSignal = bc.User, bc.WorkingDir, bc.StopSignal
		cfg.Env = append(append([]string{}, bc.Env...), cfg.Env...)
		if len(bc.Entrypoint) > 0 {
			cfg.Entrypoint = bc.Entrypoint
		}
		cfg.Cmd = bc.Cmd
		for k, v := range bc.Labels {
			cfg.Labels[k] = v
		}
	}
	if cfg.User == "" {
		cfg.User = "0" // the base's default, stated: commit would keep the session's user
	}
	if cfg.WorkingDir == "" {
		cfg.WorkingDir = "/"
	}
	// Commit merges the container's labels into the image's; state every
	// session label so none of the session's leaks into the snapshot.
	for k := range labels {
		if _, ok := cfg.Labels[k]; !ok {
			cfg.Labels[k] = ""
		}
	}
	cfg.Labels[engine.LabelManaged] = "true"
	cfg.Labels[engine.LabelKind] = KindSnapshot
	cfg.Labels[LabelSnapshot] = key
	cfg.Labels[LabelBase] = base
	cfg.Labels[LabelContent] = digest
	for k, v := range m.Labels {
		cfg.Labels[k] = v
	}
	res, err := cli.ContainerCommit(ctx, rec.Container, client.ContainerCommitOptions{Reference: ref, Config: cfg, Comment: "vak session snapshot " + key})
	if err != nil {
		return nil, engine.APIError("commit session "+id, err)
	}
	out.ID = res.ID
	return out, nil
}

// RemoveSnapshot removes the image of a snapshot key.
func (m *Manager) RemoveSnapshot(ctx context.Context, key string) error {
	cli, err := m.engine()
	if err != nil {
		return err
	}
	ref, err := SnapshotRef(key)
	if err != nil {
		return err
	}
	if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: %s", ErrNoSnapshot, key)
		}
		return engine.APIError("remove snapshot", err)
	}
	return nil
}
