package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"vak/internal/config"
	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/hostenv"
	"vak/internal/sandbox"
	"vak/internal/taskenv"
	"vak/internal/trace"
)

// SessionCreate is what `vak session create` asks for beyond its Request
// (whose Config carries the image, mode, limits, network and [session]
// settings, flags applied).
type SessionCreate struct {
	// Task names the session, with the workspace.
	Task string
	// From is the key of the snapshot to start from; ImageSet says that
	// the image was given explicitly (--image), which From excludes.
	From     string
	ImageSet bool
	// Mounts are extra host paths mounted read-only at the same path.
	Mounts []string
	// Docker asks for a nested Docker engine (or session.docker does).
	Docker bool
	// Hold keeps CreateSession in the foreground as the session's owner
	// until the context of Request.Interrupts ends; the session is then
	// removed.
	Hold bool
	// NoRefill leaves the warm pool as the create found it.
	NoRefill bool
	// Created is told the session's ID as soon as it exists, before the
	// session is held or the warm pool refilled.
	Created func(id string)
}

// errRequired is CreateSession's and FillPool's error for a request
// without a config or a workspace.
var errRequired = fmt.Errorf("launch: Config and Workspace are required: %w", ErrUnavailable)

// CreateSession creates a session for req's workspace and config: the
// quiet gc of finished sessions runs while nested Docker is set up, then
// the container is created (claimed from the warm pool when one fits),
// and afterwards the pool is topped up (or, with Hold, the session is held
// until the interrupts' context ends). Phases are traced on ctx's trace.
// Its errors carry their class (errclass): a bad request is Invalid.
func CreateSession(ctx context.Context, req Request, c SessionCreate) error {
	if req.Config == nil || req.Workspace == "" {
		return errRequired
	}
	cfg := req.Config
	if err := checkSessionMode(cfg); err != nil {
		return err
	}
	if err := checkSessionRuntime(cfg); err != nil {
		return err
	}
	if cfg.Session.Backend == BackendKubernetes {
		return createKubeSession(ctx, req, c)
	}
	m := Sessions(req, nil)
	defer m.Close()
	spec := sessionSpec(req, m)
	spec.Task, spec.Mounts = c.Task, c.Mounts
	if c.From != "" {
		if c.ImageSet {
			return errclass.Wrap(errclass.Invalid, errors.New("--from and --image exclude each other"))
		}
		var err error
		if spec.BaseImage, err = taskenv.SnapshotRef(c.From); err != nil {
			return err
		}
	}
	if err := setUpSession(ctx, req, m, &spec, c.Docker); err != nil {
		return err
	}
	if c.Hold {
		spec.OwnerPID = os.Getpid()
	}
	sigctx := ctx
	if req.Interrupts != nil {
		var stop func()
		sigctx, stop = req.Interrupts(ctx)
		defer stop()
	}
	end := trace.From(ctx).Begin("create")
	s, err := m.Create(sigctx, spec)
	end()
	if err != nil {
		if spec.Docker && m.DockerBaseline == dockerd.BaselineSysbox && errors.Is(err, taskenv.ErrDockerUnavailable) {
			// Not exercised against a real Sysbox here (docs/nested-docker.md).
			err = fmt.Errorf("%w (the Sysbox sidecar; session.docker_runtime = \"runc\" in %s uses the capability-listed one)", err, TrustedFile(cfg))
		}
		if spec.NetworkPolicy == sandbox.NetworkProxied {
			// A topology brought up for this create goes again.
			TopologyFor(req).Release(context.Background(), req.Workspace)
		}
		return err
	}
	if c.Created != nil {
		c.Created(s.ID())
	}
	if c.Hold {
		// The broker holds the session over its attached stdio until told
		// to stop, or until the session ends by itself.
		select {
		case <-sigctx.Done():
		case <-s.Done():
		}
		rmctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return s.Discard(rmctx)
	}
	s.Close()
	if m.PoolSize > 0 && !c.NoRefill {
		// After the ID is out: topping up the pool is the next create's speed.
		if _, err := m.FillPool(sigctx, spec); err != nil {
			warnf(req, "refilling the warm pool: %v", err)
		}
	}
	return nil
}

// setUpSession runs the quiet gc of finished sessions and the nested
// Docker setup (engine access, runtimes, sidecar image) at once: they are
// independent, and the create starts after both. What the gc reports of
// the sessions it ends is passed on after it (the Docker setup prints
// meanwhile).
func setUpSession(ctx context.Context, req Request, m *taskenv.Manager, spec *taskenv.Spec, docker bool) error {
	tr := trace.From(ctx)
	gcm := Sessions(req, nil)
	defer gcm.Close()
	var planted [][]string
	gcm.Planted = func(id string, lines []string) { planted = append(planted, append([]string{id}, lines...)) }
	var gc sync.WaitGroup
	gc.Go(func() {
		defer tr.Begin("gc (quiet)")()
		gcm.QuietGC(ctx)
	})
	defer gc.Wait()
	end := tr.Begin("docker setup")
	err := sessionDocker(ctx, req, m, spec, docker)
	end()
	gc.Wait()
	for _, p := range planted {
		m.Planted(p[0], p[1:])
	}
	return err
}

// FillPool starts session containers until session.pool_size are ready
// for what a create with req would make, and writes how many it started
// to out. A proxied network brought up for nothing is released again.
func FillPool(ctx context.Context, req Request, docker bool, out io.Writer) error {
	if req.Config == nil || req.Workspace == "" {
		return errRequired
	}
	if err := checkSessionRuntime(req.Config); err != nil {
		return err
	}
	if req.Config.Session.Backend == BackendKubernetes {
		if docker {
			return errclass.Wrap(errclass.Invalid, errors.New("--docker: nested Docker is not available in kubernetes sessions"))
		}
		return fillKubePool(ctx, req, out)
	}
	m := Sessions(req, nil)
	defer m.Close()
	if m.PoolSize == 0 {
		return errclass.Wrap(errclass.Invalid, errors.New("session.pool_size is 0 in the user config: the warm pool is off"))
	}
	spec := sessionSpec(req, m)
	if err := sessionDocker(ctx, req, m, &spec, docker); err != nil {
		return err
	}
	n, err := m.FillPool(ctx, spec)
	if err != nil && spec.NetworkPolicy == sandbox.NetworkProxied && n == 0 {
		TopologyFor(req).Release(context.Background(), req.Workspace)
	}
	fmt.Fprintf(out, "started %d\n", n)
	return err
}

// sessionSpec is the session spec of req's workspace and config.
func sessionSpec(req Request, m *taskenv.Manager) taskenv.Spec {
	cfg := req.Config
	return taskenv.Spec{
		Workspace:      req.Workspace,
		BaseImage:      cfg.Sandbox.Image,
		Limits:         cfg.Sandbox.Limits,
		Mode:           cfg.Sandbox.Mode,
		Env:            hostenv.Lookup(m.EnvAllowlist),
		Protected:      cfg.Files.Protected,
		DefaultTimeout: cfg.Sandbox.Timeout,
		NetworkPolicy:  cfg.Network,
	}
}

// sessionDocker sets up nested Docker for spec when docker (--docker) or
// session.docker asks for it: the proxied network is required, the host's
// daemon must answer this user, and the sidecar image is ensured (m's
// DockerImage). A warm-pool pair that a create refuses to hand out is
// reported as a warning.
func sessionDocker(ctx context.Context, req Request, m *taskenv.Manager, spec *taskenv.Spec, docker bool) error {
	cfg := req.Config
	spec.Docker = docker || cfg.Session.Docker
	if !spec.Docker {
		return nil
	}
	spec.DockerPlaceholders = cfg.Session.DockerPlaceholders
	if spec.NetworkPolicy != sandbox.NetworkProxied {
		return errclass.Wrap(errclass.Invalid, fmt.Errorf("--docker (or session.docker) needs --network proxied: inner containers' traffic must go through the gateway (the network is %q)", spec.NetworkPolicy))
	}
	eng, err := engine.New()
	if err != nil {
		return err
	}
	tr := trace.From(ctx)
	end := tr.Begin("docker setup: engine access")
	err = engine.CheckAccess(ctx, eng, "nested Docker, --docker, starts its engine through the host's Docker daemon")
	end()
	if err != nil {
		return err
	}
	end = tr.Begin("docker setup: runtimes (docker info)")
	b, why, err := DockerBaseline(ctx, eng, cfg)
	end()
	if err != nil {
		return err
	}
	end = tr.Begin("docker setup: sidecar image")
	m.DockerImage, err = dockerd.EnsureImage(ctx, eng, dockerd.DefaultRecipe, req.Progress)
	end()
	if err != nil {
		return err
	}
	m.DockerBaseline = b
	if req.Progress != nil {
		fmt.Fprintf(req.Progress, "vak: nested Docker sidecar: %s; %s\n", b.Describe(), why)
	}
	m.OnPoolReject = func(name string, err error) {
		warnf(req, "warm pool: %s not claimed (removed): %v", name, err)
	}
	return nil
}

// DockerBaseline chooses the nested Docker sidecar's baseline from the
// Engine's runtimes (docker info) and the trusted config's
// session.docker_runtime, and says why; "sysbox" without Sysbox is a
// config error (class errclass.Config) naming the key and the file.
func DockerBaseline(ctx context.Context, eng *engine.Client, cfg *config.Config) (dockerd.Baseline, string, error) {
	runtimes, err := dockerd.Runtimes(ctx, eng)
	if err != nil {
		return "", "", err
	}
	choice := cfg.Session.DockerRuntime
	b, why, err := dockerd.ChooseBaseline(runtimes, choice)
	if err != nil {
		return "", "", errclass.Wrap(errclass.Config, fmt.Errorf("session.docker_runtime = %q (%s): %w", choice, TrustedFile(cfg), err))
	}
	if choice == "" {
		choice = dockerd.RuntimeAuto
	}
	return b, why + ", session.docker_runtime = " + strconv.Quote(choice), nil
}

// warnf passes a warning to req.Warn.
func warnf(req Request, format string, args ...any) {
	if req.Warn != nil {
		req.Warn(fmt.Sprintf(format, args...))
	}
}
