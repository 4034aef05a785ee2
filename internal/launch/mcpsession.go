package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"vak/internal/config"
	"vak/internal/errclass"
	"vak/internal/mcp"
	"vak/internal/sandbox"
	"vak/internal/taskenv"
)

// ErrNotASandbox is wrapped by a session refused because the mode is not a
// sandbox mode (full-access).
var ErrNotASandbox = errclass.New(errclass.Invalid, "a session is a sandbox (use read-only or workspace-write)")

// ErrSessionRuntime is wrapped by a Kubernetes session refused because
// sandbox.runtime (the Docker backend's key) is set and
// kubernetes.runtime_class is not: the session fails rather than run
// under the cluster's default runtime.
var ErrSessionRuntime = errclass.New(errclass.Config, "kubernetes sessions do not take sandbox.runtime")

// checkSessionRuntime refuses a Kubernetes session with sandbox.runtime
// set and no kubernetes.runtime_class. Docker sessions take
// sandbox.runtime (taskenv.Manager.Runtime checks what it can host).
func checkSessionRuntime(cfg *config.Config) error {
	rt := cfg.Sandbox.Runtime
	if rt == "" || cfg.Session.Backend != BackendKubernetes || cfg.Kubernetes.RuntimeClass != "" {
		return nil
	}
	return fmt.Errorf("sandbox.runtime = %q (%s) is the Docker backend's; a Kubernetes session runs under kubernetes.runtime_class, which is not set: set it (e.g. \"gvisor\") or remove sandbox.runtime: %w", rt, TrustedFile(cfg), ErrSessionRuntime)
}

// checkSessionMode refuses a session in a mode that is no sandbox
// (full-access).
func checkSessionMode(cfg *config.Config) error {
	if !cfg.Sandbox.Mode.Restricted() {
		return fmt.Errorf("mode %s: %w", cfg.Sandbox.Mode, ErrNotASandbox)
	}
	return nil
}

// MCPSession is the bash worker of `vak mcp --session ID` or
// --session-new: bash runs in the session's container, the file tools stay
// with files (the server's own worker).
type MCPSession struct {
	ID    string
	Start mcp.StartFunc
	// Close removes a session created for this server and lets go of the
	// manager.
	Close func()
}

// OpenMCPSession opens session id of workspace ws through m (which it
// owns from now on: closed by Close, or here on error), or with id empty
// creates one for this server (named mcp-RANDOM, removed by Close). It fails
// early on a wrong ID or workspace, not at the first call.
func OpenMCPSession(ctx context.Context, req Request, m *taskenv.Manager, id string, files mcp.StartFunc, log *slog.Logger) (_ *MCPSession, err error) {
	if (id == "" && req.Config != nil && req.Config.Session.Backend == BackendKubernetes) || (id != "" && IsKubeSession(id)) {
		m.Close()
		return nil, errclass.Wrap(errclass.Invalid, errors.New("vak mcp with a session: kubernetes sessions cannot serve MCP yet (their workspace is a copy in the pod, so the file tools would have to run there too); use a Docker session (session.backend = \"docker\" or --backend docker) or vak session exec"))
	}
	ws := req.Workspace
	s := &MCPSession{ID: id, Close: func() { m.Close() }}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if id == "" {
		if s.ID, err = createMCPSession(ctx, req, m); err != nil {
			return nil, err
		}
		log.Info("created task-environment session; it is removed when the server exits", "session", s.ID)
		created := s.ID
		s.Close = func() {
			rmctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := m.Discard(rmctx, created); err != nil {
				log.Error("remove the session", "session", created, "err", err)
			}
			m.Close()
		}
	}
	open := func(ctx context.Context) (*taskenv.Session, error) {
		sess, err := m.Open(ctx, s.ID)
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", s.ID, err)
		}
		if sess.Workspace() != ws {
			sess.Close()
			return nil, fmt.Errorf("session %s belongs to workspace %s, not %s", s.ID, sess.Workspace(), ws)
		}
		return sess, nil
	}
	sess, err := open(ctx)
	if err != nil {
		return nil, err
	}
	sess.Close()
	s.Start = mcp.SessionWorker(files, open)
	return s, nil
}

// createMCPSession creates the session of `vak mcp --session-new`: as `vak
// session create` would, with a task name of its own.
func createMCPSession(ctx context.Context, req Request, m *taskenv.Manager) (string, error) {
	var rnd [4]byte
	rand.Read(rnd[:])
	if err := checkSessionMode(req.Config); err != nil {
		return "", err
	}
	if err := checkSessionRuntime(req.Config); err != nil {
		return "", err
	}
	spec := sessionSpec(req, m)
	spec.Task = "mcp-" + hex.EncodeToString(rnd[:])
	sess, err := m.Create(ctx, spec)
	if err != nil {
		if spec.NetworkPolicy == sandbox.NetworkProxied {
			TopologyFor(req).Release(context.Background(), req.Workspace)
		}
		return "", err
	}
	id := sess.ID()
	sess.Close()
	return id, nil
}
