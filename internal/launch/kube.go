package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"vak/internal/config"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/fsguard"
	"vak/internal/hostenv"
	"vak/internal/kubesession"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/taskenv"
	"vak/internal/worker/wire"
	"vak/internal/wsync"
)

// BackendKubernetes is session.backend's value for sessions on a cluster.
const BackendKubernetes = "kubernetes"

// kubeManager connects to the cluster k names and returns its session
// manager with req's labels and progress.
func kubeManager(req Request, k config.Kubernetes) (*kubesession.Manager, error) {
	state, err := paths.EnsureStateDir()
	if err != nil {
		return nil, err
	}
	c, err := kubesession.Connect(k)
	if err != nil {
		return nil, err
	}
	return &kubesession.Manager{Cluster: c, StateDir: state, Labels: req.Labels, Progress: req.Progress}, nil
}

// createKubeSession is CreateSession on the kubernetes backend: the pod of
// req's config ([sandbox] image, limits, mode, env; [session] lifetimes;
// [kubernetes] cluster, runtime class, worker image) with the workspace
// uploaded into it.
func createKubeSession(ctx context.Context, req Request, c SessionCreate) error {
	cfg := req.Config
	switch {
	case c.From != "" && c.ImageSet:
		return errclass.Wrap(errclass.Invalid, errors.New("--from and --image exclude each other"))
	case c.Docker || cfg.Session.Docker:
		return errclass.Wrap(errclass.Invalid, errors.New("--docker (or session.docker): nested Docker is not available in kubernetes sessions"))
	case len(c.Mounts) > 0:
		return errclass.Wrap(errclass.Invalid, errors.New("--mount: a kubernetes session has no host paths; its workspace is uploaded"))
	}
	from, err := kubeFrom(c.From)
	if err != nil {
		return err
	}
	m, spec, err := kubeSpec(ctx, req, c.Task)
	if err != nil {
		return err
	}
	m.Pool = cfg.Session.PoolSize > 0
	spec.From = from
	if c.Hold {
		if spec.OwnerProc, err = engine.OwnerToken(os.Getpid()); err != nil {
			return err
		}
	}
	pack := func(w io.Writer) error {
		_, err := wsync.Pack(w, req.Workspace, wsync.PackOptions{})
		return err
	}
	sigctx := ctx
	if req.Interrupts != nil {
		var stop func()
		sigctx, stop = req.Interrupts(ctx)
		defer stop()
	}
	s, err := m.Create(sigctx, spec, pack)
	if err != nil {
		return err
	}
	defer s.Close()
	if c.Created != nil {
		c.Created(s.ID())
	}
	if m.Pool && !c.NoRefill {
		// After the ID is out: topping up the pool is the next create's speed.
		if _, err := m.FillPool(sigctx, spec, cfg.Session.PoolSize); err != nil {
			warnf(req, "refilling the warm pool: %v", err)
		}
	}
	if !c.Hold {
		return nil
	}
	// Held: the session lives until this process is told to stop (or is
	// killed: gc then removes the pod, its owner being gone).
	select {
	case <-sigctx.Done():
	case <-s.Done():
	}
	rmctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return m.Remove(rmctx, s.ID())
}

// kubeFrom is the snapshot key of --from (KEY or vak-env:KEY), checked to
// be on this host before the cluster is asked anything; "" without one.
func kubeFrom(from string) (string, error) {
	if from == "" {
		return "", nil
	}
	ref, err := taskenv.SnapshotRef(from)
	if err != nil {
		return "", err
	}
	key := strings.TrimPrefix(ref, taskenv.SnapshotRepo+":")
	state, err := paths.EnsureStateDir()
	if err != nil {
		return "", err
	}
	if _, err := (&kubesession.Manager{StateDir: state}).ReadSnapshot(key); err != nil {
		return "", err
	}
	return key, nil
}

// kubeSpec connects to the cluster of req's config and returns its
// manager and the pod spec of a session of task (or a pool pod, which
// differs only in the task): [sandbox] image, limits, mode, env; [session]
// lifetimes; [kubernetes] runtime class and worker image, what the cluster
// offers (user namespaces), and for a proxied network the namespace's
// gateway, deployed or updated first.
func kubeSpec(ctx context.Context, req Request, task string) (*kubesession.Manager, kubesession.Spec, error) {
	cfg := req.Config
	m, err := kubeManager(req, cfg.Kubernetes)
	if err != nil {
		return nil, kubesession.Spec{}, err
	}
	worker := cfg.Kubernetes.WorkerImage
	if worker == "" {
		exe := req.Executable
		if exe == "" {
			if exe, err = os.Executable(); err != nil {
				return nil, kubesession.Spec{}, err
			}
		}
		if worker, err = kubesession.WorkerImageTag(exe); err != nil {
			return nil, kubesession.Spec{}, err
		}
	}
	if task == "" {
		task = taskenv.DefaultTask
	}
	spec := kubesession.Spec{
		Task: task, Workspace: req.Workspace,
		Image: cfg.Sandbox.Image, WorkerImage: worker,
		PullPolicy:   corev1.PullPolicy(cfg.Kubernetes.PullPolicy),
		RuntimeClass: cfg.Kubernetes.RuntimeClass,
		Mode:         cfg.Sandbox.Mode, Limits: cfg.Sandbox.Limits,
		Env:            hostenv.Lookup(hostenv.Allowlist(cfg.Sandbox.Env...)),
		Protected:      cfg.Files.Protected,
		DefaultTimeout: cfg.Sandbox.Timeout,
		IdleTimeout:    cfg.Session.IdleTimeout, Lifetime: cfg.Session.MaxLifetime,
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	probe, err := kubesession.ProbeCluster(pctx, m.Cluster, cfg.Kubernetes.RuntimeClass)
	cancel()
	if err != nil {
		return nil, kubesession.Spec{}, err
	}
	spec.UserNamespace = probe.UserNamespaces
	if req.Progress != nil {
		fmt.Fprintf(req.Progress, "vak: cluster: %s\n", probe.Describe())
	}
	if cfg.Network == sandbox.NetworkProxied && cfg.Sandbox.Mode.Restricted() {
		gw, env, err := kubeGateway(ctx, req, m, worker, spec.PullPolicy)
		if err != nil {
			return nil, kubesession.Spec{}, err
		}
		spec.Gateway, spec.Env = gw, append(spec.Env, env...)
	}
	return m, spec, nil
}

// fillKubePool is FillPool on the kubernetes backend.
func fillKubePool(ctx context.Context, req Request, out io.Writer) error {
	if req.Config.Session.PoolSize == 0 {
		return errclass.Wrap(errclass.Invalid, errors.New("session.pool_size is 0 in the user config: the warm pool is off"))
	}
	m, spec, err := kubeSpec(ctx, req, "")
	if err != nil {
		return err
	}
	n, err := m.FillPool(ctx, spec, req.Config.Session.PoolSize)
	fmt.Fprintf(out, "started %d\n", n)
	return err
}

// KubeDoctor is vak doctor's line on the kubernetes session backend:
// what the configured cluster offers sessions (ProbeCluster), or why it
// cannot be reached; "" when sessions are not configured to run there.
func KubeDoctor(ctx context.Context, cfg *config.Config) string {
	if cfg.Session.Backend != BackendKubernetes && cfg.Kubernetes == config.DefaultKubernetes() {
		return ""
	}
	c, err := kubesession.Connect(cfg.Kubernetes)
	if err != nil {
		return "unavailable: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	p, err := kubesession.ProbeCluster(ctx, c, cfg.Kubernetes.RuntimeClass)
	if err != nil {
		return "unavailable: " + err.Error()
	}
	return fmt.Sprintf("context %q: %s", c.Context, p.Describe())
}

// IsKubeSession reports whether id is a kubernetes session of this host.
func IsKubeSession(id string) bool {
	state, err := paths.StateDir()
	return err == nil && kubesession.IsSession(state, id)
}

// kubeFor is the manager of session id's cluster (from its record).
func kubeFor(req Request, id string) (*kubesession.Manager, error) {
	state, err := paths.EnsureStateDir()
	if err != nil {
		return nil, err
	}
	k, err := kubesession.RecordCluster(state, id)
	if err != nil {
		return nil, err
	}
	return kubeManager(req, k)
}

// RunSessionCommand runs c in session id (vak session exec), on the
// backend that holds it: a kubernetes session's worker through its relay
// stream, a Docker session's through taskenv (o's options).
func RunSessionCommand(ctx context.Context, req Request, id string, c taskenv.Command, o taskenv.ExecOptions) (*taskenv.Result, error) {
	if !IsKubeSession(id) {
		m := Sessions(req, nil)
		defer m.Close()
		return m.RunCommand(ctx, id, c, o)
	}
	if o.Root {
		return nil, errclass.Wrap(errclass.Invalid, errors.New("--root is not available in kubernetes sessions: commands run as the session's user"))
	}
	return runKubeCommand(ctx, req, id, c, o.Arm)
}

// runKubeCommand runs c in kubernetes session id: one relay stream to its
// worker, the command's output streamed to c.Output.
func runKubeCommand(ctx context.Context, req Request, id string, c taskenv.Command, arm func() (<-chan string, func())) (*taskenv.Result, error) {
	m, err := kubeFor(req, id)
	if err != nil {
		return nil, err
	}
	s, err := m.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	a, err := taskenv.BashArgsOf(c)
	if err != nil {
		return nil, err
	}
	if c.StdinStream != nil {
		var signals <-chan string
		if arm != nil {
			var disarm func()
			signals, disarm = arm()
			defer disarm()
		}
		return s.Client().BashInteractive(ctx, a, c.StdinStream, nil, signals, c.Output)
	}
	return s.Exec(ctx, a, c.Output)
}

// kubeDiscard removes kubernetes session id.
func kubeDiscard(ctx context.Context, req Request, id string) error {
	m, err := kubeFor(req, id)
	if err != nil {
		return err
	}
	return m.Remove(ctx, id)
}

// kubeRows are the `vak session ls` rows of the clusters this host has
// kubernetes sessions on.
func kubeRows(ctx context.Context, req Request, idsOnly bool) ([]SessionRow, error) {
	state, err := paths.StateDir()
	if err != nil {
		return nil, nil
	}
	var rows []SessionRow
	var errs []error
	for _, k := range kubesession.RecordClusters(state) {
		m, err := kubeManager(req, k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		list, err := m.List(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, s := range list {
			if idsOnly {
				rows = append(rows, SessionRow{ID: s.ID})
				continue
			}
			rows = append(rows, SessionRow{ID: s.ID, State: s.State + " (kubernetes " + s.Pod + ")", Age: time.Since(s.Created).Round(time.Second),
				Image: s.Image, Network: string(sandbox.NetworkNone), Workspace: s.Workspace})
		}
	}
	return rows, errors.Join(errs...)
}

// kubeGC collects the finished kubernetes sessions of the clusters this
// host has sessions on, one line each on out.
func kubeGC(ctx context.Context, req Request, out io.Writer) error {
	state, err := paths.StateDir()
	if err != nil {
		return nil
	}
	clusters := kubesession.RecordClusters(state)
	if req.Config != nil && req.Config.Session.Backend == BackendKubernetes {
		clusters = append(clusters, req.Config.Kubernetes)
	}
	var errs []error
	for _, k := range clusters {
		m, err := kubeManager(req, k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed, err := m.GC(ctx)
		for _, r := range removed {
			fmt.Fprintf(out, "removed %s (pod %s): %s\n", r.ID, r.Pod, r.Reason)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensure wire stays the result type of both backends.
var _ *wire.BashResult = (*taskenv.Result)(nil)

// KubeWorkspace is the host workspace of kubernetes session id (its
// record), for loading the config a pull checks against.
func KubeWorkspace(id string) (string, error) {
	state, err := paths.StateDir()
	if err != nil {
		return "", err
	}
	ws, err := kubesession.RecordWorkspace(state, id)
	if errors.Is(err, kubesession.ErrNotKubernetes) {
		return "", errclass.Wrap(errclass.Invalid, fmt.Errorf("session %s: pull is for kubernetes sessions (a Docker session's workspace is the host's own): %w", id, err))
	}
	return ws, err
}

// PullSession applies kubernetes session id's workspace to the host
// workspace (kubesession.Manager.Pull), refusing req.Config's protected
// paths as the tripwire does.
func PullSession(ctx context.Context, req Request, id string) (*wsync.Report, error) {
	match, err := fsguard.ProtectedMatcher(req.Config.Files.Protected)
	if err != nil {
		return nil, errclass.Wrap(errclass.Config, err)
	}
	m, err := kubeFor(req, id)
	if err != nil {
		return nil, err
	}
	return m.Pull(ctx, id, match)
}

// kubeSnapshot is Snapshot on the kubernetes backend: session id's home,
// kept on this host under the key of the image the cluster ran, the
// manifest and the policy generation (taskenv.SnapshotKey, the Docker
// sessions' key).
func kubeSnapshot(ctx context.Context, req Request, id string, man taskenv.Manifest) (*taskenv.ImageRef, error) {
	m, err := kubeFor(req, id)
	if err != nil {
		return nil, err
	}
	gen := ""
	if req.Config != nil {
		gen = req.Config.Session.PolicyGeneration
	}
	if gen == "" {
		gen = taskenv.DefaultPolicyGeneration
	}
	info, err := m.Snapshot(ctx, id, func(imageID, policy string) string {
		return taskenv.SnapshotKey(imageID, man, gen+"/"+policy)
	})
	if err != nil {
		return nil, err
	}
	return &taskenv.ImageRef{Key: info.Key, Ref: taskenv.SnapshotRepo + ":" + info.Key, ID: info.Content, Base: info.ImageID,
		Cached: info.Cached, Host: filepath.Join(kubesession.SnapshotDir(m.StateDir), info.Key)}, nil
}
