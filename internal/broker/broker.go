// Package broker is vak's trusted side of command execution. It turns the
// effective config into a worker spec, starts the worker (the vak binary
// re-executed as `vak __worker`) contained by the resolved backend, and
// sends it the agent's tool calls. Model input never runs in the broker.
//
// For command-scoped backends (docker) the broker wraps each bash command
// into the backend's argv and sends that, quoted, as the bash request: the
// worker stays a small host-side protocol adapter, and the file tools keep
// running on the host under fsguard's checks.
package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/sandbox/landlock"
	"vak/internal/sandbox/seatbelt"
	"vak/internal/shellquote"
	"vak/internal/trace"
	"vak/internal/worker"
)

// WorkerCommand is the hidden subcommand that runs a worker.
const WorkerCommand = "__worker"

// TempPrefix names private temp dirs: TempPrefix + broker pid + "-" + random,
// so that CleanStale can tell the ones whose broker is gone.
const TempPrefix = "vak-tmp-"

// EnvAllowlist names host variables that reach sandboxed commands by
// default. Everything else (tokens, cloud credentials, SSH agent sockets)
// is scrubbed; config can name more (sandbox.env).
var EnvAllowlist = []string{"PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "COLORTERM", "NO_COLOR"}

// DockerClientEnv are the variables the docker CLI itself needs in the host
// worker of the docker backend (never passed into containers).
var DockerClientEnv = []string{"PATH", "HOME", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY"}

// DefaultPath is PATH when the host has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Options configure a session.
type Options struct {
	Config    *config.Config
	Workspace string // canonical
	Backend   sandbox.Backend
	// Executable is the vak binary to re-execute; empty means os.Executable.
	Executable string
	// Stderr receives the worker's own diagnostics; nil keeps a tail for errors.
	Stderr io.Writer
	// Labels are added to containers (tests use vak.test=1).
	Labels map[string]string
	// Network, if set, attaches command containers to a proxied network
	// (docker backend only); nil means no network.
	Network *sandbox.NetworkAttachment
}

// Session is a running worker for one workspace.
type Session struct {
	opts    Options
	client  *worker.Client
	tempDir string
	docker  *docker.Backend
	env     []string // environment of sandboxed commands
	prot    []string // absolute protected paths
	cgroup  *landlock.Cgroup
	// supervisor answers setsid notifications of a landlock worker that
	// runs without namespaces (with them, stage 1 does).
	supervisor *os.File
}

// Start starts a worker for opts.
func Start(ctx context.Context, opts Options) (*Session, error) {
	// Phases for vak run --trace (nil trace: nothing recorded).
	tr := trace.From(ctx)
	endPrepare := tr.Begin("backend prepare")
	cfg := opts.Config
	s := &Session{opts: opts}
	for _, p := range cfg.Files.Protected {
		s.prot = append(s.prot, filepath.Join(opts.Workspace, p))
	}
	exe := opts.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("broker: find vak binary: %w", err)
		}
	}
	spec := &worker.Spec{
		Backend:        opts.Backend.Name(),
		Workspace:      opts.Workspace,
		Mode:           cfg.Sandbox.Mode,
		Protected:      cfg.Files.Protected,
		DefaultTimeout: cfg.Sandbox.Timeout,
	}
	if opts.Network != nil {
		if _, ok := opts.Backend.(*docker.Backend); !ok {
			return nil, fmt.Errorf("broker: the proxied network needs the docker backend; the %s sandbox has no network at all", opts.Backend.Name())
		}
	}
	cmd := exec.Command(exe, WorkerCommand)
	cmd.Dir = opts.Workspace
	var supRemote *os.File
	cmd.Stderr = opts.Stderr
	home, _ := os.UserHomeDir()

	switch b := opts.Backend.(type) {
	case *landlock.Backend:
		tmp, err := os.MkdirTemp("", TempPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return nil, fmt.Errorf("broker: private temp dir: %w", err)
		}
		s.tempDir = tmp
		s.env = sandboxEnv(cfg.Sandbox.Env, home, "/tmp")
		p := landlock.Policy{
			Workspace:   opts.Workspace,
			Mode:        cfg.Sandbox.Mode,
			TempDir:     tmp,
			Home:        home,
			ReadPaths:   cfg.Sandbox.ReadPaths,
			WritePaths:  cfg.Sandbox.WritePaths,
			Protected:   s.prot,
			Limits:      cfg.Sandbox.Limits,
			AllowWeaker: cfg.Sandbox.AllowWeaker || b.AllowWeaker,
			UID:         os.Getuid(),
			GID:         os.Getgid(),
		}
		ns, err := landlock.Configure(cmd, b.StatusFor(p.AllowWeaker))
		if err != nil {
			s.cleanup()
			return nil, err
		}
		if landlock.NeedCgroup() {
			// Root is exempt from RLIMIT_NPROC: limits come from a cgroup.
			if s.cgroup, err = landlock.NewCgroup(cfg.Sandbox.Limits); err != nil && !p.AllowWeaker {
				s.cleanup()
				return nil, fmt.Errorf("broker: %w (running as root, the process limit needs it; sandbox.allow_weaker accepts running without)", err)
			}
		}
		if !ns {
			// No stage 1: stage 2 is our child, and we answer its setsid
			// notifications (see landlock.Supervise).
			s.env = sandboxEnv(cfg.Sandbox.Env, tmp, tmp)
			cmd.Args = append(cmd.Args, "--stage", "2")
			if s.supervisor, supRemote, err = landlock.SupervisorPair(); err != nil {
				s.cleanup()
				return nil, err
			}
		}
		spec.Landlock, spec.Namespaces = &p, ns
	case *seatbelt.Backend:
		tmp, err := os.MkdirTemp("", TempPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return nil, fmt.Errorf("broker: private temp dir: %w", err)
		}
		s.tempDir = tmp
		var deny []string
		for _, d := range []func() (string, error){paths.ConfigDir, paths.StateDir} {
			if p, err := d(); err == nil {
				deny = append(deny, p)
			}
		}
		p := seatbelt.Policy{
			Workspace:  opts.Workspace,
			Mode:       cfg.Sandbox.Mode,
			TempDir:    tmp,
			Home:       home,
			ReadPaths:  cfg.Sandbox.ReadPaths,
			WritePaths: cfg.Sandbox.WritePaths,
			Protected:  cfg.Files.Protected,
			Deny:       deny,
		}
		sb, err := seatbelt.Command(context.Background(), p, []string{exe, WorkerCommand})
		if err != nil {
			s.cleanup()
			return nil, err
		}
		cmd.Path, cmd.Args = sb.Path, sb.Args
		s.env = sandboxEnv(cfg.Sandbox.Env, filepath.Join(tmp, seatbelt.PrivateHome), tmp)
	case *docker.Backend:
		s.docker = b
		spec.Env = hostEnv(DockerClientEnv)
		s.env = containerEnv(cfg.Sandbox.Env)
	default:
		if b.Name() != string(sandbox.None) {
			return nil, fmt.Errorf("broker: backend %s: %w", b.Name(), sandbox.ErrNotYetAvailable)
		}
		spec.Env = os.Environ() // full access: nothing is sandboxed
	}
	if spec.Env == nil {
		spec.Env = s.env
	}
	data, err := spec.Encode()
	if err != nil {
		s.cleanup()
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		s.cleanup()
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{r}
	if supRemote != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, supRemote)
	}
	cmd.Env = []string{"PATH=" + envOr("PATH", DefaultPath)}
	// Go runtime knobs reach the worker process itself (tests use GOGC to
	// make garbage collection frequent); they never reach commands.
	cmd.Env = append(cmd.Env, hostEnv([]string{"GOGC", "GODEBUG", "GOMAXPROCS"})...)
	// The worker blocks on its spec, so whatever onStarted does (joining a
	// cgroup) happens before the sandbox runs anything.
	onStarted := func(pid int) error {
		r.Close()
		if supRemote != nil {
			supRemote.Close()
			go landlock.Supervise(s.supervisor, pid)
		}
		if s.cgroup != nil {
			if err := s.cgroup.Add(pid); err != nil {
				w.Close()
				return err
			}
		}
		go func() {
			w.Write(data)
			w.Close()
		}()
		return nil
	}
	endPrepare()
	endStart := tr.Begin("worker start (sandbox set-up) to ready")
	client, err := worker.Start(ctx, cmd, onStarted)
	endStart()
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("broker: %s worker: %w", opts.Backend.Name(), err)
	}
	s.client = client
	return s, nil
}

// Ready is the worker's ready event (what restrictions are in force).
func (s *Session) Ready() worker.Event { return s.client.Ready() }

// Client is the raw protocol client (file tools).
func (s *Session) Client() *worker.Client { return s.client }

// Bash runs a command in the sandbox.
func (s *Session) Bash(ctx context.Context, a worker.BashArgs, onOutput func(stream string, data []byte)) (*worker.BashResult, error) {
	if s.docker == nil {
		return s.client.Bash(ctx, a, onOutput)
	}
	// Command-scoped: wrap it, and send the wrapper as the command.
	dir, err := s.resolveDir(a.Cwd)
	if err != nil {
		return nil, err
	}
	env := slices.Clone(s.env)
	for k, v := range a.Env {
		env = append(env, k+"="+v)
	}
	var existing []string
	for _, p := range s.prot {
		if _, err := os.Lstat(p); err == nil {
			existing = append(existing, p)
		}
	}
	c := sandbox.Command{
		ID:        newID(),
		Shell:     a.Command,
		Workspace: s.opts.Workspace,
		Dir:       dir,
		Env:       env,
		Mode:      s.opts.Config.Sandbox.Mode,
		Limits:    s.opts.Config.Sandbox.Limits,
		Protected: existing,
		Network:   s.opts.Network,
	}
	argv, err := s.docker.Wrap(c)
	if err != nil {
		return nil, err
	}
	a.Command, a.Cwd, a.Env = shellquote.Join(argv), "", nil
	res, err := s.client.Bash(ctx, a, onOutput)
	if err != nil || res.TimedOut || res.Canceled {
		// The docker CLI is dead but its container may not be.
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if rerr := s.docker.Remove(rctx, c.ID); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err == nil && res.ExitCode == 125 {
		// docker run's own failure; if the daemon went away, fail closed loudly.
		s.docker.Invalidate()
		if perr := s.docker.Available(ctx); perr != nil {
			return nil, perr
		}
	}
	return res, err
}

// resolveDir checks a working directory for the docker backend.
func (s *Session) resolveDir(cwd string) (string, error) {
	ws := s.opts.Workspace
	p := cwd
	if p == "" {
		return ws, nil
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(ws, p)
	}
	p = filepath.Clean(p)
	real, err := filepath.EvalSymlinks(p)
	if err != nil || !paths.Within(ws, p) || !paths.Within(ws, real) {
		return "", &worker.Error{Code: worker.CodeOutside, Message: fmt.Sprintf("cwd %q is outside the workspace or does not exist", cwd)}
	}
	return real, nil
}

// Close ends the worker (and with the landlock backend every process of the
// sandbox) and removes the private temp dir.
func (s *Session) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.client.Close(ctx)
	s.cleanup()
	return err
}

func (s *Session) cleanup() {
	if s.tempDir != "" {
		os.RemoveAll(s.tempDir)
	}
	if s.cgroup != nil {
		s.cgroup.Remove()
	}
}

// sandboxEnv builds the environment of sandboxed commands: the allowlist and
// configured names from the host, plus HOME and TMPDIR.
func sandboxEnv(extra []string, home, tmp string) []string {
	env := hostEnv(append(slices.Clone(EnvAllowlist), extra...))
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		env = append(env, "PATH="+DefaultPath)
	}
	return append(env, "HOME="+home, "TMPDIR="+tmp)
}

// containerEnv is what reaches docker containers (HOME is set by the wrap).
func containerEnv(extra []string) []string {
	return hostEnv(append([]string{"LANG", "LANGUAGE", "TERM", "TZ", "COLORTERM", "NO_COLOR"}, extra...))
}

func hostEnv(names []string) []string {
	var env []string
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok && !slices.Contains(env, n+"="+v) {
			env = append(env, n+"="+v)
		}
	}
	return env
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// newID returns a random identifier for a command run.
func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(errors.New("crypto/rand failed"))
	}
	return hex.EncodeToString(b[:])
}

// CleanStale removes what a killed broker could leave behind: private temp
// dirs of this user whose broker process no longer exists, and (as root)
// their empty cgroups. It returns what it removed.
func CleanStale() []string {
	var removed []string
	dir := os.TempDir()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, TempPrefix) {
			continue
		}
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(name, TempPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || processAlive(pid) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Lstat(p); err != nil || !ownedByMe(fi) {
			continue
		}
		if os.RemoveAll(p) == nil {
			removed = append(removed, p)
		}
	}
	return append(removed, landlock.CleanStaleCgroups(processAlive)...)
}
