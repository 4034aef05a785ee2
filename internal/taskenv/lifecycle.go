package taskenv

// The lifecycle of sessions: create, open, exec, discard, list, close.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/hostenv"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/shellquote"
	"vak/internal/trace"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// Create makes a session: it validates spec, pins its image, and either
// claims a warm-pool container (when PoolSize > 0 and one matches) or
// creates, starts and attaches a new container, then waits for the worker.
// A session for the same task and workspace is ErrSessionExists.
func (m *Manager) Create(ctx context.Context, spec Spec) (*Session, error) {
	cli, err := m.engine()
	if err != nil {
		return nil, err
	}
	tr := trace.From(ctx)
	end := tr.Begin("create: prepare")
	p, err := m.prepare(ctx, cli, spec)
	end()
	if err != nil {
		return nil, err
	}
	// The session's container keeps its network from when it exists.
	defer p.releaseNet()
	// The workspace before the session can run anything: what its watcher
	// holds it against (recorded while the container starts; nothing runs
	// in it before Create returns).
	baseline := make(chan *worker.TripwireState, 1)
	go func() {
		if !p.watched() {
			baseline <- nil
			return
		}
		defer tr.Begin("create: workspace baseline")()
		baseline <- worker.Snapshot(p.spec.Workspace, p.protected)
	}()
	var s *Session
	if m.PoolSize > 0 {
		end := tr.Begin("create: claim")
		s, err = m.claim(ctx, cli, p)
		end()
	}
	if s == nil && err == nil {
		end := tr.Begin("create: cold")
		s, err = m.createDirect(ctx, cli, p)
		end()
	}
	base := <-baseline
	if err != nil {
		return nil, err
	}
	defer tr.Begin("create: workspace watcher")()
	if err := m.startWatch(ctx, s.rec, p, base); err != nil {
		// Unwatched, the session would run nothing safely: it goes.
		s.Close()
		m.dropWatch(s.rec.ID)
		m.removeContainer(s.rec.Container, s.rec.RunDir, s.rec.ID)
		if s.rec.Docker {
			if key, kerr := s.rec.dockerSlot(); kerr == nil {
				m.removeSidecar(key)
			}
		}
		return nil, err
	}
	return s, nil
}

func (m *Manager) createDirect(ctx context.Context, cli *client.Client, p *plan) (_ *Session, err error) {
	slot := randomHex(8)
	runDir, err := m.makeRunDir(slot)
	if err != nil {
		return nil, err
	}
	created := time.Now().Truncate(time.Second)
	cfg, hc, err := m.containerConfig(p, p.id, runDir, "", p.id, created)
	if err != nil {
		os.RemoveAll(runDir)
		return nil, err
	}
	name := SessionPrefix + p.id
	if p.spec.Docker {
		if err := m.startSidecar(ctx, cli, p, p.id); err != nil {
			os.RemoveAll(runDir)
			return nil, err
		}
	}
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		os.RemoveAll(runDir)
		if p.spec.Docker && !cerrdefs.IsConflict(err) {
			m.removeSidecar(p.id)
		}
		if cerrdefs.IsConflict(err) {
			return nil, fmt.Errorf("%w: %s (task %q in %s); remove it first (vak session rm %s) or use another task name", ErrSessionExists, p.id, p.spec.Task, p.spec.Workspace, p.id)
		}
		return nil, engine.APIError("create session container", err)
	}
	cid := res.ID
	var att *attachment
	defer func() {
		if err != nil {
			if att != nil {
				att.Close()
			}
			m.removeContainer(cid, runDir, "")
			if p.spec.Docker {
				m.removeSidecar(p.id)
			}
		}
	}()
	if p.spec.Mode == sandbox.WorkspaceWrite {
		if _, err = cli.CopyToContainer(ctx, cid, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(homeArchive(p.user))}); err != nil {
			return nil, engine.APIError("create the session's home", err)
		}
	}
	if att, err = attach(ctx, cli, cid); err != nil {
		return nil, err
	}
	if _, err = cli.ContainerStart(ctx, cid, client.ContainerStartOptions{}); err != nil {
		return nil, engine.APIError("start session container", err)
	}
	wc := wire.NewClient(att, att.stdout)
	if err = wc.WaitReady(ctx); err != nil {
		return nil, m.startErr(cid, att.stderr.String(), err)
	}
	rec := &record{ID: p.id, Container: cid, Name: name, RunDir: runDir, Workspace: p.spec.Workspace, Image: p.imageID,
		User: p.user.Spec(), AgentHome: p.home, Env: p.env, Owner: cfg.Labels[LabelOwnerProc], Install: p.install, Created: created, Docker: p.spec.Docker,
		Watched: p.watched()}
	if p.spec.Docker {
		rec.DockerSlot = p.id
		rec.DockerBaseline = string(m.baseline())
	}
	rp, err := m.recordPath(p.id)
	if err != nil {
		return nil, err
	}
	if err = writeJSON(rp, rec); err != nil {
		return nil, fmt.Errorf("session record: %w", err)
	}
	s := &Session{m: m, rec: rec, client: wc, conn: att, stderr: att.stderr}
	m.remember(s)
	return s, nil
}

// startErr explains why a new container's worker did not become ready.
func (m *Manager) startErr(cid, stderr string, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		msg = m.logTail(ctx, cid)
	}
	if msg != "" {
		return fmt.Errorf("session worker did not start: %w: %s", cause, msg)
	}
	return fmt.Errorf("session worker did not start: %w", cause)
}

// logTail returns the last lines the worker wrote to stderr.
func (m *Manager) logTail(ctx context.Context, cid string) string {
	cli, err := m.engine()
	if err != nil {
		return ""
	}
	rc, err := cli.ContainerLogs(ctx, cid, client.ContainerLogsOptions{ShowStderr: true, Tail: "20"})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var errb bytes.Buffer
	stdcopy.StdCopy(io.Discard, &errb, io.LimitReader(rc, 64<<10))
	return strings.TrimSpace(errb.String())
}

// removeContainer force-removes a container (and its anonymous volumes),
// its socket directory and its record, best effort.
func (m *Manager) removeContainer(cid, runDir, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	if cli, e := m.engine(); e == nil {
		for {
			_, err = cli.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			if err == nil || cerrdefs.IsNotFound(err) {
				err = nil
				break
			}
			// Another vak (gc, or the session's own watcher) is removing
			// it: wait until it is gone.
			if !strings.Contains(err.Error(), "already in progress") || ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		err = engine.APIError("remove session container", err)
	} else {
		err = e
	}
	if runDir != "" && err == nil {
		os.RemoveAll(runDir)
	}
	if id != "" && err == nil {
		if p, e := m.recordPath(id); e == nil {
			os.Remove(p)
		}
	}
	return err
}

// Open reattaches to a running session by ID (after a broker restart, or
// from another process) through its worker socket: no daemon round trip
// when the host record exists. The caller Closes the returned session.
func (m *Manager) Open(ctx context.Context, id string) (*Session, error) {
	rec, err := m.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = m.recordFromDaemon(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	conn, err := dialWorker(ctx, rec.RunDir, rec.Container)
	if err != nil {
		if errors.Is(err, ErrUntrustedPeer) || errors.Is(err, ErrUnsupported) {
			return nil, fmt.Errorf("session %s: %w", id, err)
		}
		return nil, m.ended(rec, err)
	}
	wc := wire.NewClient(halfCloser{conn}, conn)
	if err := m.waitReady(ctx, wc, rec); err != nil {
		conn.Close()
		if errors.Is(err, ErrSessionPaused) {
			return nil, err
		}
		return nil, m.ended(rec, err)
	}
	// Its commands run only while its workspace is watched.
	if err := m.ensureWatch(ctx, rec); err != nil {
		conn.Close()
		return nil, err
	}
	return &Session{m: m, rec: rec, client: wc, conn: conn}, nil
}

// pausedAfter is how long Open waits for the worker's ready before it asks
// the daemon whether the session's container is paused: a paused worker
// never answers, and the wait would last the whole start timeout.
const pausedAfter = 250 * time.Millisecond

// waitReady waits for the worker's ready on a new connection; a worker
// that has not answered after pausedAfter is looked at (checkPaused).
func (m *Manager) waitReady(ctx context.Context, wc *wire.Client, rec *record) error {
	ready := make(chan error, 1)
	go func() { ready <- wc.WaitReady(ctx) }()
	select {
	case err := <-ready:
		return err
	case <-time.After(pausedAfter):
	}
	if err := m.checkPaused(ctx, rec); err != nil {
		return err // the caller's Close of the connection ends the wait
	}
	return <-ready
}

// checkPaused returns an ErrSessionPaused error when the session's
// container is paused; nil when it is not, or when the daemon cannot say
// (the caller's own error then explains).
func (m *Manager) checkPaused(ctx context.Context, rec *record) error {
	cli, err := m.engine()
	if err != nil {
		return nil
	}
	res, err := cli.ContainerInspect(ctx, rec.Container, client.ContainerInspectOptions{})
	if err != nil || res.Container.State == nil || !res.Container.State.Paused {
		return nil
	}
	name := strings.TrimPrefix(res.Container.Name, "/")
	return fmt.Errorf("%w: session %s: its container %s is paused (docker pause); resume it with `docker unpause %s` and retry", ErrSessionPaused, rec.ID, name, name)
}

// ended explains a session whose worker is unreachable: the container's
// exit status and the worker's last words, or cause if it still runs.
func (m *Manager) ended(rec *record, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := m.engine()
	if err != nil {
		return fmt.Errorf("session %s: %w (and the daemon cannot be asked why: %v)", rec.ID, cause, err)
	}
	res, err := cli.ContainerInspect(ctx, rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: session %s: its container was removed", ErrSessionEnded, rec.ID)
		}
		return fmt.Errorf("session %s: %w (inspect: %v)", rec.ID, cause, err)
	}
	st := res.Container.State
	if st == nil || st.Running {
		return fmt.Errorf("session %s: %w", rec.ID, cause)
	}
	why := fmt.Sprintf("the worker exited with status %d", st.ExitCode)
	if st.OOMKilled {
		why += " (killed: out of memory)"
	}
	if st.ExitCode == 137 {
		why += " (SIGKILL)"
	}
	if st.Error != "" {
		why += ": " + st.Error
	}
	if tail := m.logTail(ctx, rec.Container); tail != "" {
		why += ": " + lastLines(tail, 3)
	}
	return fmt.Errorf("%w: session %s: %s", ErrSessionEnded, rec.ID, why)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " / ")
}

// Exec runs c in session id, reusing this manager's connection to it.
func (m *Manager) Exec(ctx context.Context, id string, c Command) (*Result, error) {
	s, err := m.session(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.Exec(ctx, c)
}

// session returns an open session for id, opening it if needed.
func (m *Manager) session(ctx context.Context, id string) (*Session, error) {
	m.mu.Lock()
	s := m.open[id]
	m.mu.Unlock()
	if s != nil {
		select {
		case <-s.client.Done():
			m.forget(s)
		default:
			return s, nil
		}
	}
	s, err := m.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	m.remember(s)
	return s, nil
}

func (m *Manager) remember(s *Session) {
	m.mu.Lock()
	if m.open == nil {
		m.open = map[string]*Session{}
	}
	old := m.open[s.rec.ID]
	m.open[s.rec.ID] = s
	m.mu.Unlock()
	if old != nil && old != s {
		old.Close()
	}
}

func (m *Manager) forget(s *Session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[s.rec.ID] == s {
		delete(m.open, s.rec.ID)
	}
}

// Discard destroys session id: its container (SIGKILL, then removal with
// its anonymous volumes), socket directory and record. A session that is
// already gone is ErrNoSession.
func (m *Manager) Discard(ctx context.Context, id string) error {
	rec, err := m.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = m.recordFromDaemon(ctx, id)
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	s := m.open[id]
	delete(m.open, id)
	m.mu.Unlock()
	if s != nil {
		s.Close()
	}
	// The final sweep, once nothing can write the workspace any more (the
	// nested engine and the container are stopped first); what the
	// watcher removed during the session and this sweep is reported.
	lines, werr := m.endSession(ctx, id)
	m.report(id, lines)
	err = errors.Join(werr, m.removeContainer(rec.Container, rec.RunDir, id))
	if rec.Docker {
		// After the session container, which mounts the sockets volume.
		key, kerr := rec.dockerSlot()
		if kerr == nil {
			kerr = m.removeSidecar(key)
		}
		err = errors.Join(err, kerr)
	}
	if m.ReleaseProxyNet != nil && rec.Workspace != "" {
		m.ReleaseProxyNet(ctx, rec.Workspace)
	}
	if err == nil {
		m.dropWatch(id)
	}
	return err
}

// listContainers lists this user's session and pool containers that carry
// the manager's labels, running or not.
func (m *Manager) listContainers(ctx context.Context, cli *client.Client) (client.ContainerListResult, error) {
	f := make(client.Filters).Add("label", engine.LabelManaged+"=true", engine.LabelKind+"="+KindSession, LabelOwner+"="+strconv.Itoa(os.Getuid()))
	for k, v := range m.Labels {
		f.Add("label", k+"="+v)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return res, engine.APIError("list sessions", err)
	}
	return res, nil
}

// List lists this user's session and pool containers (those carrying the
// manager's labels), running or not.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	cli, err := m.engine()
	if err != nil {
		return nil, err
	}
	res, err := m.listContainers(ctx, cli)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, c := range res.Items {
		in := Info{Container: c.ID, Image: c.Labels[LabelImage], Workspace: c.Labels[engine.LabelWorkspace], Task: c.Labels[LabelTask],
			State: string(c.State), Status: c.Status, Pool: c.Labels[LabelPool], Labels: c.Labels}
		if len(c.Names) > 0 {
			in.Name = strings.TrimPrefix(c.Names[0], "/")
		}
		in.ID, _ = strings.CutPrefix(in.Name, SessionPrefix)
		if !strings.HasPrefix(in.Name, SessionPrefix) {
			in.ID = ""
		}
		if in.Task == "" && in.ID != "" {
			in.Task = in.ID[:len(in.ID)-11]
		}
		if n, err := strconv.ParseInt(c.Labels[LabelCreated], 10, 64); err == nil {
			in.Created = time.Unix(n, 0)
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Info) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Close closes every session connection this manager holds (the sessions
// keep running).
func (m *Manager) Close() error {
	m.mu.Lock()
	open := m.open
	m.open = nil
	m.mu.Unlock()
	for _, s := range open {
		s.Close()
	}
	return nil
}

// InteractiveArgs returns the docker CLI argv that runs argv in session id
// with a TTY (`docker exec -it`), as the session's user in dir (inside the
// workspace) with the session's environment plus env. root runs it as root
// with the session's install capabilities, only in a session created with
// installs allowed. The command starts through execScript, so its
// environment is the one the session's worker gives its commands. tty, if
// set, is the size of the user's terminal: the command first sets its
// terminal to it (`stty`, if the image has one),
// as the docker CLI sets the size of the exec's terminal only after the
// command started (a command that asks at once would see 0x0); the CLI
// follows later changes itself.
func (m *Manager) InteractiveArgs(ctx context.Context, id string, argv []string, dir string, env map[string]string, tty *TTYSize, root bool) ([]string, error) {
	rec, err := m.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = m.recordFromDaemon(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	if err := shellquote.Check(argv...); err != nil {
		return nil, err
	}
	cwd, err := resolveDir(rec.Workspace, dir)
	if err != nil {
		return nil, err
	}
	if err := m.checkSidecar(ctx, rec); err != nil {
		return nil, err
	}
	if err := m.checkPaused(ctx, rec); err != nil {
		return nil, err
	}
	if err := m.ensureWatch(ctx, rec); err != nil {
		return nil, err
	}
	user := rec.User
	if root {
		if !rec.Install {
			return nil, fmt.Errorf("%w: session %s was created without session.allow_install", ErrInstallNotAllowed, id)
		}
		user = "0:0"
	}
	bin := m.Binary
	if bin == "" {
		bin = "docker"
	}
	args := []string{bin, "exec", "-i"}
	rows, cols := 0, 0
	if tty != nil {
		args = append(args, "-t")
		rows, cols = int(tty.Rows), int(tty.Cols)
	}
	argv = append([]string{"sh", "-c", execScript, "vak-exec", strconv.Itoa(rows), strconv.Itoa(cols)}, argv...)
	args = append(args, "-u", user, "-w", cwd)
	vars := slices.Clone(rec.Env)
	vars = append(vars, worker.SpecEnv+"=")
	for _, k := range slices.Sorted(mapsKeys(env)) {
		vars = hostenv.Set(vars, k+"="+env[k])
	}
	for _, kv := range vars {
		args = append(args, "-e", kv)
	}
	return append(append(args, rec.Container), argv...), nil
}

// TTYSize is a terminal's size.
type TTYSize struct{ Rows, Cols uint16 }

// ExecMarkerEnv names the variable through which a command started with
// InteractiveArgs is found again to signal it (SignalArgs): the caller puts
// ExecMarkerEnv=TOKEN (a random token per command) into its env. docker
// exec forwards no signal, and the container's process IDs are not the
// host's, so the command is found from inside the container by its
// environment.
const ExecMarkerEnv = "VAK_SESSION_EXEC"

// SignalArgs returns the docker CLI argv that delivers sig (a signal name
// such as INT or KILL) inside session id's container, as the user
// InteractiveArgs would run the command as (root with root), to the
// command whose environment holds ExecMarkerEnv=token: to the process
// group of each such process that leads its group (docker exec makes the
// command a session and group leader, so this is what Ctrl-C in a
// terminal would reach), and with all also to every such process on its
// own (its descendants that left the group). Nothing is signalled when no
// process carries the token (the command has not started, or has ended).
func (m *Manager) SignalArgs(ctx context.Context, id, token, sig string, root, all bool) ([]string, error) {
	if !isAlnum(token) || !isAlnum(sig) {
		return nil, fmt.Errorf("%w: signal %q to token %q", ErrInvalidSpec, sig, token)
	}
	rec, err := m.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = m.recordFromDaemon(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	user := rec.User
	if root {
		user = "0:0"
	}
	bin := m.Binary
	if bin == "" {
		bin = "docker"
	}
	a := "0"
	if all {
		a = "1"
	}
	return []string{bin, "exec", "-u", user, rec.Container, "sh", "-c", signalScript, "vak-signal", sig, ExecMarkerEnv + "=" + token, a}, nil
}

// signalScript is SignalArgs' program: $1 the signal, $2 the marker
// (NAME=TOKEN, a whole line of /proc/PID/environ), $3 "1" to signal every
// marked process too. kill's "--" before a negative PID: POSIX shells
// (dash) need it, busybox's ash takes it for a PID and fails, so it is
// used only where a harmless probe (signal 0 to this shell's own group:
// docker exec made it a group leader) accepts it.
const signalScript = `sig=$1 tok=$2 all=$3 dd=
kill -s 0 -- -$$ 2>/dev/null && dd=--
nl='
'
for d in /proc/[0-9]*; do
	p=${d#/proc/}
	[ "$p" = "$$" ] && continue
	e=$(tr '\0' '\n' <"$d/environ" 2>/dev/null) || continue
	case "$nl$e$nl" in *"$nl$tok$nl"*) ;; *) continue ;; esac
	s=$(cat "$d/stat" 2>/dev/null) || continue
	set -- ${s##*) }
	[ "$3" = "$p" ] && kill -s "$sig" $dd -"$p" 2>/dev/null
	[ "$all" = 1 ] && kill -s "$sig" "$p" 2>/dev/null
done
exit 0`

// isAlnum reports whether s is non-empty and only ASCII letters and digits.
func isAlnum(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !alnumByte(s[i]) {
			return false
		}
	}
	return true
}

// execScript starts a docker exec'd command: it removes the worker's spec
// variable (the container's own, which docker exec would pass on: the
// worker's commands never see it), sets the terminal's size ($1 rows, $2
// columns, if positive) and runs the rest of its arguments as argv.
const execScript = `unset ` + worker.SpecEnv + `; if [ "$1" -gt 0 ] 2>/dev/null; then stty rows "$1" cols "$2" 2>/dev/null; fi; shift 2; exec "$@"`

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// resolveDir checks a working directory against the workspace on the host
// (the worker checks again inside, against the same path).
func resolveDir(ws, dir string) (string, error) {
	if dir == "" {
		return ws, nil
	}
	p := dir
	if !filepath.IsAbs(p) {
		p = filepath.Join(ws, p)
	}
	p = filepath.Clean(p)
	if !paths.Within(ws, p) {
		return "", &wire.Error{Code: wire.CodeOutside, Message: fmt.Sprintf("cwd %q is outside the workspace %s", dir, ws)}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", &wire.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("cwd %q: %v", dir, err)}
	}
	if !paths.Within(ws, real) {
		return "", &wire.Error{Code: wire.CodeOutside, Message: fmt.Sprintf("cwd %q resolves outside the workspace %s", dir, ws)}
	}
	return real, nil
}
