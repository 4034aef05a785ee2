package taskenv

// The sweep as root: what the user may not remove from their own
// workspace. An inner container of a --docker session runs as root of the
// host (the nested engine runs in no user namespace), so what it writes
// into the workspace belongs to root: the user's watcher can unlink a
// root-owned file in a directory of the user's, but not a file in a
// directory root made (.vscode/tasks.json), nor clear the setuid bit of a
// root-owned file. Sessions with session.allow_install (vak session exec
// --root) and sandbox.user = "root" write as root too. For those the
// watcher starts a short-lived container through the same daemon: the
// session's own image with vak's static binary as its entrypoint (vak
// __session-sweep), root with only DAC_OVERRIDE and FOWNER, no network,
// a read-only root, the workspace at its own path. It makes the same sweep
// against the same baseline, with the same code (fsguard.Tree: beneath the
// workspace, never through a link), and answers what it did as JSON.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/sandbox/docker"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// SweepCommand is the hidden vak subcommand the root sweep runs in its
// container (RunSweeper).
const SweepCommand = "__session-sweep"

// KindSweep labels the root sweep's containers (vak.kind), named
// SweepPrefix + session ID + "-" + 6 hex digits.
const (
	KindSweep   = "sweep"
	SweepPrefix = "vak-sweep-"
)

// sweepRequest is what the root sweep reads on its stdin.
type sweepRequest struct {
	Workspace string                `json:"workspace"`
	Protected []string              `json:"protected"`
	Baseline  *worker.TripwireState `json:"baseline"`
}

// maxSweepAnswer bounds the root sweep's answer.
const maxSweepAnswer = 4 << 20

// RunSweeper is the root sweep inside its container: it reads a
// sweepRequest from in, sweeps, and writes the wire.BashResult to out.
func RunSweeper(in io.Reader, out io.Writer) error {
	var req sweepRequest
	if err := json.NewDecoder(io.LimitReader(in, 64<<20)).Decode(&req); err != nil {
		return fmt.Errorf("sweep request: %w", err)
	}
	if req.Baseline == nil || req.Workspace == "" {
		return errors.New("sweep request: no workspace or baseline")
	}
	res := &wire.BashResult{}
	if _, err := req.Baseline.Sweep(req.Workspace, req.Protected, res); err != nil {
		res.TripwireWarnings = append(res.TripwireWarnings, err.Error())
	}
	return json.NewEncoder(out).Encode(res)
}

// rootSweepTimeout bounds one sweep as root.
const rootSweepTimeout = time.Minute

// rootSweep runs the sweep of st as root in a container (see above) and
// returns what it did. Once begun it is not cancelled (a watcher told to
// stop finishes it first; rootSweepTimeout bounds it), so that it never
// leaves its container behind: a create cancelled in flight may still be
// made by the daemon.
func (m *Manager) rootSweep(ctx context.Context, st *watchState) (*wire.BashResult, error) {
	cli, err := m.engine()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rootSweepTimeout)
	defer cancel()
	req, err := json.Marshal(sweepRequest{Workspace: st.Workspace, Protected: st.Protected, Baseline: st.Baseline})
	if err != nil {
		return nil, err
	}
	cfg, hc, err := sweeperConfig(st)
	if err != nil {
		return nil, err
	}
	name := SweepPrefix + st.ID + "-" + randomHex(3)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		cli.ContainerRemove(rctx, name, client.ContainerRemoveOptions{Force: true})
	}()
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		return nil, engine.APIError("create the root sweep's container", err)
	}
	cid := res.ID
	att, err := attach(ctx, cli, cid)
	if err != nil {
		return nil, err
	}
	defer att.Close()
	if _, err := cli.ContainerStart(ctx, cid, client.ContainerStartOptions{}); err != nil {
		return nil, engine.APIError("start the root sweep's container", err)
	}
	go func() {
		att.Write(req)
		att.hj.CloseWrite()
	}()
	out, err := io.ReadAll(io.LimitReader(att.stdout, maxSweepAnswer))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("the root sweep's answer: %w", err)
	}
	var rr wire.BashResult
	if err := json.Unmarshal(out, &rr); err != nil {
		return nil, fmt.Errorf("the root sweep's answer (%v): %s", err, lastLines(att.stderr.String(), 3))
	}
	return &rr, nil
}

// sweeperConfig is the root sweep's container for st.
func sweeperConfig(st *watchState) (*container.Config, *container.HostConfig, error) {
	if st.Image == "" || st.Worker == "" {
		return nil, nil, fmt.Errorf("session %s: the watch state names no image or worker binary for the root sweep", st.ID)
	}
	labels := map[string]string{engine.LabelManaged: "true", engine.LabelKind: KindSweep, LabelOwner: strconv.Itoa(os.Getuid()), LabelSession: st.ID}
	for k, v := range st.Labels {
		labels[k] = v
	}
	cfg := &container.Config{
		Image: st.Image, User: "0:0", Entrypoint: []string{ContainerWorker, SweepCommand}, Cmd: []string{},
		Env: []string{worker.SpecEnv + "="}, WorkingDir: "/", Labels: labels, NetworkDisabled: true,
		OpenStdin: true, StdinOnce: true, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	}
	secOpt := []string{"no-new-privileges"}
	if prof, err := docker.SeccompProfile(); err == nil {
		secOpt = append(secOpt, "seccomp="+string(prof))
	} else if !errors.Is(err, ErrUnsupported) {
		return nil, nil, err
	}
	pids, noInit := int64(32), false
	hc := &container.HostConfig{
		NetworkMode: "none", Runtime: engine.DefaultRuntime, CapDrop: []string{"ALL"}, CapAdd: []string{"DAC_OVERRIDE", "FOWNER"},
		SecurityOpt: secOpt, ReadonlyRootfs: true, IpcMode: container.IPCModePrivate, Init: &noInit,
		Resources: container.Resources{Memory: 256 << 20, MemorySwap: 256 << 20, PidsLimit: &pids},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: st.Workspace, Target: st.Workspace, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			{Type: mount.TypeBind, Source: st.Worker, Target: ContainerWorker, ReadOnly: true},
		},
	}
	if strings.HasPrefix(st.Workspace+"/", ContainerVakDir+"/") {
		return nil, nil, fmt.Errorf("session %s: workspace %s collides with %s", st.ID, st.Workspace, ContainerVakDir)
	}
	return cfg, hc, nil
}

// gcSweeps removes this user's root sweep containers (with the manager's
// labels) that a watcher killed in the middle of one left behind: one
// that is not running, or that runs for longer than a sweep may.
func (m *Manager) gcSweeps(ctx context.Context, cli *client.Client, rep *GCReport) error {
	f := make(client.Filters).Add("label", engine.LabelManaged+"=true", engine.LabelKind+"="+KindSweep, LabelOwner+"="+strconv.Itoa(os.Getuid()))
	for k, v := range m.Labels {
		f.Add("label", k+"="+v)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return engine.APIError("list root sweep containers", err)
	}
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		if !strings.HasPrefix(name, SweepPrefix) || (c.State == container.StateRunning && time.Since(time.Unix(c.Created, 0)) < 2*rootSweepTimeout) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return engine.APIError("remove root sweep container "+name, err)
		}
		rep.Removed = append(rep.Removed, Removed{Name: name, Reason: "a sweep its watcher did not finish"})
	}
	return nil
}
