package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/fsguard"
	"vak/internal/hostenv"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
	"vak/internal/taskenv"
)

// ErrOwnBinary is wrapped by ImageGC's error when it cannot read the vak
// binary whose vak-net image it keeps.
var ErrOwnBinary = errors.New("read this vak")

// CleanStaleRuns removes the private temp dirs (and, as root, cgroups) of
// native runs whose vak process is gone, e.g. killed with SIGKILL, one
// line each on out. Their commands died with it: the sandbox's init is
// killed with its parent.
func CleanStaleRuns(out io.Writer) {
	for _, p := range broker.CleanStale(Registry(config.Default(), nil).All()...) {
		fmt.Fprintf(out, "removed %s: its vak process is gone\n", p)
	}
}

// GC removes req's sessions that are over and the proxied networks no
// sandbox uses any more (their receipts are kept), one line on out for
// each it removed or skipped (in use).
func GC(ctx context.Context, req Request, out io.Writer) error {
	// Sessions on a cluster first: they need no Docker.
	kerr := kubeGC(ctx, req, out)
	m := Sessions(req, nil)
	defer m.Close()
	rep, err := m.GC(ctx)
	if rep != nil {
		for _, r := range rep.Removed {
			name := r.ID
			if name == "" {
				name = r.Name
			}
			fmt.Fprintf(out, "removed %s: %s\n", name, r.Reason)
		}
		for _, r := range rep.Skipped {
			fmt.Fprintf(out, "skipped %s: %s\n", r.Name, r.Reason)
		}
	}
	if err != nil {
		return errors.Join(kerr, err)
	}
	if kerr != nil {
		return kerr
	}
	eng, state, err := engineAndState()
	if err != nil {
		return nil
	}
	prep, err := proxynet.GC(ctx, eng, state, m.Labels)
	if prep != nil {
		for _, k := range prep.Removed {
			fmt.Fprintf(out, "removed proxied network %s: no sandbox uses it\n", k)
		}
		for _, s := range prep.Skipped {
			fmt.Fprintf(out, "skipped proxied network %s: %s\n", s.Key, s.Reason)
		}
	}
	return err
}

// Discard removes the sessions ids (every one is tried), then collects
// finished sessions quietly.
func Discard(ctx context.Context, req Request, ids []string) error {
	m := Sessions(req, nil)
	defer m.Close()
	var errs []error
	for _, id := range ids {
		if IsKubeSession(id) {
			if err := kubeDiscard(ctx, req, id); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := m.Discard(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	m.QuietGC(ctx)
	return errors.Join(errs...)
}

// SessionRow is one line of `vak session ls`.
type SessionRow struct {
	// ID is the session ID, or "(pool) NAME" for a warm-pool container.
	ID, State string
	Age       time.Duration
	// Image is the short image ID, Network none or proxied (with the
	// state of the workspace's topology when it is not ok).
	Image, Network, Workspace string
}

// ListSessions collects finished sessions quietly and lists the others,
// oldest first; pool adds the warm-pool containers. idsOnly fills in only
// the IDs.
func ListSessions(ctx context.Context, req Request, pool, idsOnly bool) ([]SessionRow, error) {
	m := Sessions(req, nil)
	defer m.Close()
	m.QuietGC(ctx)
	list, err := m.List(ctx)
	if err != nil {
		// Sessions on a cluster are listed without Docker: a user of the
		// kubernetes backend alone gets them, and a warning.
		krows, kerr := kubeRows(ctx, req, idsOnly)
		if len(krows) == 0 {
			return nil, errors.Join(err, kerr)
		}
		warnf(req, "Docker sessions not listed: %v", err)
		return krows, kerr
	}
	var eng *engine.Client
	if !idsOnly {
		eng, _ = engine.New()
	}
	var rows []SessionRow
	for _, s := range list {
		id := s.ID
		if id == "" {
			if !pool || idsOnly {
				continue
			}
			id = "(pool) " + s.Name
		}
		if idsOnly {
			rows = append(rows, SessionRow{ID: id})
			continue
		}
		rows = append(rows, SessionRow{ID: id, State: s.State, Age: time.Since(s.Created).Round(time.Second),
			Image: shortID(s.Image), Network: sessionNetwork(ctx, eng, s.Labels), Workspace: s.Workspace})
	}
	krows, err := kubeRows(ctx, req, idsOnly)
	return append(rows, krows...), err
}

func shortID(image string) string {
	image = strings.TrimPrefix(image, "sha256:")
	if len(image) > 12 {
		return image[:12]
	}
	return image
}

// sessionNetwork is none, or proxied with the state of the workspace's
// topology (a session whose network is gone says so).
func sessionNetwork(ctx context.Context, eng *engine.Client, labels map[string]string) string {
	if labels[proxynet.LabelClientOf] == "" {
		return string(sandbox.NetworkNone)
	}
	if eng == nil {
		return string(sandbox.NetworkProxied)
	}
	st := proxynet.NetworkState(ctx, eng, labels)
	if st == "ok" {
		return string(sandbox.NetworkProxied)
	}
	return string(sandbox.NetworkProxied) + " (" + st + ")"
}

// SnapshotReport is Snapshot, reported to out: the key alone when quiet,
// else the key and the image (or home snapshot) made or reused.
func SnapshotReport(ctx context.Context, req Request, id string, entries []string, file string, quiet bool, out io.Writer) error {
	ref, err := Snapshot(ctx, req, id, entries, file)
	if err != nil {
		return err
	}
	if quiet {
		fmt.Fprintln(out, ref.Key)
		return nil
	}
	cached := ""
	if ref.Cached {
		cached = " (cached: reused the existing image)"
	}
	if ref.Host != "" {
		fmt.Fprintf(out, "key:   %s\nhome:  %s %s%s\nbase:  %s\n", ref.Key, ref.Host, ref.ID, strings.Replace(cached, "image", "snapshot", 1), ref.Base)
		return nil
	}
	fmt.Fprintf(out, "key:   %s\nimage: %s %s%s\n", ref.Key, ref.Ref, ref.ID, cached)
	return nil
}

// Snapshot collects finished sessions quietly and snapshots session id
// with the manifest of entries (NAME=VALUE, or NAME=@FILE for the digest
// of FILE's content) and, if file is set, the entry "file" with its
// content.
func Snapshot(ctx context.Context, req Request, id string, entries []string, file string) (*taskenv.ImageRef, error) {
	man := taskenv.Manifest{}
	for _, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, errclass.Wrap(errclass.Invalid, fmt.Errorf("-m %q: want NAME=VALUE or NAME=@FILE", e))
		}
		if f, isFile := strings.CutPrefix(v, "@"); isFile {
			// vak computes the entry: the digest of the file's content.
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, errclass.Wrap(errclass.Invalid, fmt.Errorf("-m %s: %w", k, err))
			}
			sum := sha256.Sum256(data)
			v = "sha256:" + hex.EncodeToString(sum[:])
		}
		man[k] = v
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, errclass.Wrap(errclass.Invalid, fmt.Errorf("--manifest: %w", err))
		}
		man["file"] = string(data)
	}
	if IsKubeSession(id) {
		return kubeSnapshot(ctx, req, id, man)
	}
	m := Sessions(req, nil)
	defer m.Close()
	m.QuietGC(ctx)
	return m.Snapshot(ctx, id, man)
}

// ImageGC removes (or, with dryRun, lists) the vak-net and vak-dockerd
// images this vak does not use: it keeps the sidecar recipe's tag and the
// vak-net tag of exe (this vak: empty means this program). labels restrict
// it to images carrying them.
func ImageGC(ctx context.Context, exe string, labels map[string]string, dryRun bool) ([]proxynet.ImageGCResult, error) {
	eng, err := engine.New()
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	keep := []string{dockerd.DefaultRecipe.Tag()}
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOwnBinary, err)
		}
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		return nil, fmt.Errorf("vak gc --images: %w (%s) to name its image: %w", ErrOwnBinary, exe, err)
	}
	keep = append(keep, proxynet.ImageTag(data))
	return proxynet.ImageGC(ctx, eng, proxynet.ImageGCOptions{
		Repos:  []string{proxynet.ImageRepo, dockerd.ImageRepo},
		Keep:   keep,
		Labels: labels,
		DryRun: dryRun,
	})
}

// ExecEnv is the -e variables of a session command (NAME=VALUE, or NAME
// alone to copy it from this environment). The allowlist of copied
// variables is the sessions' (sandbox.env of the trusted config included),
// loaded only when a name is copied. A refused name is an invalid request.
func ExecEnv(vars []string, load func() (*config.Config, error)) (map[string]string, error) {
	allow := hostenv.Allowlist()
	if slices.ContainsFunc(vars, func(e string) bool { return !strings.Contains(e, "=") }) {
		cfg, err := load()
		if err != nil {
			return nil, err
		}
		allow = hostenv.Allowlist(cfg.Sandbox.Env...)
	}
	env, err := taskenv.CommandEnv(vars, allow, os.LookupEnv)
	if err != nil {
		return nil, errclass.Wrap(errclass.Invalid, err)
	}
	return env, nil
}

// WriteSessions prints rows as `vak session ls` shows them: a table, or
// with idsOnly one ID per line.
func WriteSessions(w io.Writer, rows []SessionRow, idsOnly bool) error {
	if idsOnly {
		for _, r := range rows {
			fmt.Fprintln(w, r.ID)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tAGE\tIMAGE\tNETWORK\tWORKSPACE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Age, r.Image, r.Network, r.Workspace)
	}
	return tw.Flush()
}

// ImageGCReport is ImageGC, printing to w what it removed, would remove
// or kept, and how much it freed.
func ImageGCReport(ctx context.Context, w io.Writer, exe string, labels map[string]string, dryRun bool) error {
	res, err := ImageGC(ctx, exe, labels, dryRun)
	var freed int64
	for _, r := range res {
		switch {
		case r.Removed:
			freed += r.Size
			fmt.Fprintf(w, "removed %s (%s)\n", r.Tag, fsguard.Usage{Bytes: r.Size}.Human())
		case r.Reason != "":
			fmt.Fprintf(w, "kept %s: %s\n", r.Tag, r.Reason)
		default:
			freed += r.Size
			fmt.Fprintf(w, "would remove %s (%s)\n", r.Tag, fsguard.Usage{Bytes: r.Size}.Human())
		}
	}
	if err == nil && freed > 0 && !dryRun {
		fmt.Fprintf(w, "freed up to %s (layers shared with kept images stay)\n", fsguard.Usage{Bytes: freed}.Human())
	}
	return err
}
