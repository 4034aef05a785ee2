package kubesession

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/client-go/tools/remotecommand"

	"vak/internal/errclass"
	"vak/internal/netfence"
	"vak/internal/worker/wire"
	"vak/internal/wsync"
)

// More errors of the backend.
var (
	// ErrSessionExists reports a session for the same task and workspace.
	ErrSessionExists = errclass.New(errclass.Invalid, "session already exists")
	// ErrNoSession reports a session ID with no record and no pod.
	ErrNoSession = errclass.New(errclass.Invalid, "no such session")
	// ErrSessionEnded reports a session whose pod or worker is gone; the
	// message says why.
	ErrSessionEnded = errclass.New(errclass.Unavailable, "session ended")
)

// Defaults.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultMaxLifetime = 24 * time.Hour
	// DefaultStartTimeout bounds a create: scheduling, image pulls, the
	// fence, the workspace's upload and the worker's start.
	DefaultStartTimeout = 5 * time.Minute
)

// Manager creates and drives kubernetes sessions on one cluster.
type Manager struct {
	Cluster *Cluster
	// StateDir is vak's state directory (records under kube-sessions/).
	StateDir string
	// Labels go on every object the manager creates and restrict List and
	// GC to objects carrying them (tests: vak.test=1).
	Labels map[string]string
	// Progress, if set, gets a line per phase of a create.
	Progress io.Writer
	// StartTimeout bounds Create; zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// Pool makes Create claim a warm pod of the pool (FillPool) whose key
	// is the session's, when there is one.
	Pool bool
}

// record is what the host keeps about a kubernetes session.
type record struct {
	ID         string    `json:"id"`
	Task       string    `json:"task"`
	Workspace  string    `json:"workspace"`
	Namespace  string    `json:"namespace"`
	Pod        string    `json:"pod"`
	Context    string    `json:"context,omitempty"`
	Kubeconfig string    `json:"kubeconfig,omitempty"`
	Image      string    `json:"image"`
	Created    time.Time `json:"created"`
	// Fence is the fence init container's receipt (its termination
	// message, or its log line when it is the proxied sidecar): the rules'
	// digest and the self-test's checks.
	Fence string `json:"fence,omitempty"`
	// Gateway is the in-cluster gateway's address of a proxied session.
	Gateway string `json:"gateway,omitempty"`
	// Policy is policyDigest of the session's spec; From the snapshot the
	// session started from.
	Policy string `json:"policy,omitempty"`
	From   string `json:"from,omitempty"`
}

// fenceReceipt is the proxied fence sidecar's receipt from its log ("" if
// it cannot be read: the session runs only after the self-test passed).
func (m *Manager) fenceReceipt(ctx context.Context, pod string) string {
	c := m.Cluster
	raw, err := c.api.core.Get().Namespace(c.Namespace).Resource("pods").Name(pod).SubResource("log").
		Param("container", ContainerFence).Param("limitBytes", "65536").Do(ctx).Raw()
	if err != nil {
		m.progress("warning: the fence's receipt could not be read: %v", err)
		return ""
	}
	for line := range strings.Lines(string(raw)) {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), netfence.PodReceiptPrefix); ok {
			return r
		}
	}
	return ""
}

// Pack writes a workspace as a tar stream (wsync.Pack's shape).
type Pack func(w io.Writer) error

// Create makes the session pod of s, uploads the workspace (pack) into it
// before the workload starts, and returns a connection to its worker. A
// pod that does not start (image, fence, upload, worker) is removed and
// the error says which step failed. The record is written first, so an
// interrupted create is found by `vak session rm` and gc.
func (m *Manager) Create(ctx context.Context, s Spec, pack Pack) (*Session, error) {
	if err := m.prepare(&s); err != nil {
		return nil, err
	}
	var from *SnapshotInfo
	if s.From != "" {
		info, f, err := m.openSnapshot(s.From)
		if err != nil {
			return nil, err
		}
		f.Close()
		from, s.Image = info, info.Image
	}
	pod, err := Pod(s)
	if err != nil {
		return nil, err
	}
	timeout := m.StartTimeout
	if timeout == 0 {
		timeout = DefaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := m.Cluster
	rec := &record{ID: s.ID, Task: s.Task, Workspace: s.Workspace, Namespace: c.Namespace, Pod: pod.Name,
		Context: c.Context, Kubeconfig: c.Kubeconfig, Image: s.Image, Created: s.Created, Policy: policyDigest(s), From: s.From}
	// The record is created exclusively: of two creates of one session,
	// one goes on and the other stops here, touching nothing.
	if err := m.createRecord(rec); err != nil {
		return nil, err
	}
	sess, err := m.start(ctx, s, pod, rec, pack, from)
	if err != nil {
		rmctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if errors.Is(err, errPodNotOurs) {
			// A pod of that name exists that this create did not make:
			// only the record goes.
			m.removeRecord(rec.ID)
		} else {
			m.remove(rmctx, rec)
		}
		return nil, err
	}
	return sess, nil
}

// defaults sets the lifetimes left zero.
func (s *Spec) defaults() {
	if s.IdleTimeout == 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.Lifetime == 0 {
		s.Lifetime = DefaultMaxLifetime
	}
}

// prepare fills in what a create (or a pool fill) sets itself: this host's
// identity, the session's ID, default lifetimes, the time, the owner and
// the manager's labels.
func (m *Manager) prepare(s *Spec) error {
	hostID, err := m.hostID()
	if err != nil {
		return err
	}
	s.HostID = hostID
	if s.ID == "" {
		s.ID = SessionID(hostID, s.Task, s.Workspace)
	}
	s.defaults()
	if s.Created.IsZero() {
		s.Created = time.Now()
	}
	s.Owner = os.Getuid()
	s.Labels = m.Labels
	return nil
}

// errPodNotOurs marks a create whose pod name was taken by a pod it did
// not make (it must not remove that pod).
var errPodNotOurs = errors.New("the pod is not this create's")

// createRecord writes rec's record if there is none; an existing one is
// ErrSessionExists.
func (m *Manager) createRecord(rec *record) error {
	p, err := m.recordPath(rec.ID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s (vak session rm %s)", ErrSessionExists, rec.ID, rec.ID)
	}
	if err != nil {
		return err
	}
	f.Close()
	return m.writeRecord(rec)
}

// hostID is this state directory's identity on clusters (random, made on
// first use): it marks the pods this host created, for gc, and goes into
// session IDs, so two hosts' sessions of one task and workspace path never
// share a pod name.
func (m *Manager) hostID() (string, error) {
	dir := RecordDir(m.StateDir)
	p := filepath.Join(dir, "host-id")
	if data, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(data))) == 32 {
		return strings.TrimSpace(string(data)), nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another create made it meanwhile.
		data, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(data)), nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(id + "\n")
	return id, err
}

// removeRecord removes session id's record.
func (m *Manager) removeRecord(id string) {
	if p, err := m.recordPath(id); err == nil {
		os.Remove(p)
	}
}

// start claims a warm pod of the pool (when the manager has one) or
// creates the pod and its network policy, then uploads the workspace and
// connects to the worker.
func (m *Manager) start(ctx context.Context, s Spec, pod *corev1.Pod, rec *record, pack Pack, from *SnapshotInfo) (*Session, error) {
	c := m.Cluster
	if claimed := m.claim(ctx, s); claimed != "" {
		m.progress("claimed warm pod %s/%s from the pool", c.Namespace, claimed)
		pod.Name, rec.Pod = claimed, claimed
		if err := m.writeRecord(rec); err != nil {
			return nil, err
		}
	} else if err := m.createPod(ctx, s, pod); err != nil {
		return nil, err
	}
	m.progress("waiting for the fence and the workspace upload")
	if _, err := m.waitPod(ctx, pod.Name, syncRunning); err != nil {
		return nil, err
	}
	n, err := m.upload(ctx, pod.Name, pack, from)
	if err != nil {
		return nil, err
	}
	m.progress("workspace uploaded (%d bytes); starting the worker", n)
	p, err := m.waitPod(ctx, pod.Name, sessionRunning)
	if err != nil {
		return nil, err
	}
	if from != nil {
		if got := containerImageID(p, ContainerSession); got != from.ImageID {
			return nil, fmt.Errorf("%w: snapshot %s was made on %s as image %s; the cluster ran it as %s: snapshot again on this image", ErrSnapshotMismatch, from.Key, from.Image, from.ImageID, got)
		}
	}
	rec.Fence = terminationMessage(p, ContainerFence)
	if s.Gateway.IsValid() {
		// The proxied fence keeps running: its receipt is a line of its log.
		rec.Fence = m.fenceReceipt(ctx, pod.Name)
		rec.Gateway = s.Gateway.String()
	}
	if err := m.writeRecord(rec); err != nil {
		return nil, err
	}
	return m.connect(ctx, rec)
}

// createPod creates pod and its network policy.
func (m *Manager) createPod(ctx context.Context, s Spec, pod *corev1.Pod) error {
	c := m.Cluster
	m.progress("creating pod %s/%s (image %s, worker %s)", c.Namespace, pod.Name, s.Image, s.WorkerImage)
	created, err := c.api.createPod(ctx, c.Namespace, pod)
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%w: pod %s/%s of %s exists, and this host has no record of it (another host's, or one whose record was lost: vak session gc collects it if it is this host's): %w", ErrSessionExists, c.Namespace, pod.Name, s.ID, errPodNotOurs)
		}
		return apiError("create pod "+c.Namespace+"/"+pod.Name, err)
	}
	np := NetworkPolicy(s, created)
	if err := c.api.createNetworkPolicy(ctx, c.Namespace, np); err != nil {
		return apiError("create network policy "+c.Namespace+"/"+np.Name, err)
	}
	return nil
}

// upload streams the workspace to the sync init container's stdin, then
// the home of the snapshot from (if any).
func (m *Manager) upload(ctx context.Context, pod string, pack Pack, from *SnapshotInfo) (int64, error) {
	c := m.Cluster
	ex, err := c.executor(c.attachRequest(pod, ContainerSync))
	if err != nil {
		return 0, err
	}
	pr, pw := io.Pipe()
	cw := &countWriter{w: pw}
	go func() { pw.CloseWithError(packWithHome(cw, pack, m, from)) }()
	stderr := wire.NewTailBuffer(4 << 10)
	err = ex.StreamWithContext(ctx, streamOptions(pr, io.Discard, stderr))
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return cw.n, fmt.Errorf("%w: upload the workspace to %s/%s: %v %s", ErrPodFailed, c.Namespace, pod, err, stderr.String())
	}
	return cw.n, nil
}

// packWithHome writes the workspace (pack), then the home archive of
// snapshot from, checked again against its record.
func packWithHome(w io.Writer, pack Pack, m *Manager, from *SnapshotInfo) error {
	if err := pack(w); err != nil {
		return err
	}
	if from == nil {
		return nil
	}
	_, f, err := m.openSnapshot(from.Key)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// connect opens a relay to rec's worker and waits for its ready event.
func (m *Manager) connect(ctx context.Context, rec *record) (*Session, error) {
	r, err := m.Cluster.openRelay(rec.Pod)
	if err != nil {
		return nil, err
	}
	if err := r.client.WaitReady(ctx); err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.Close(cctx)
		return nil, m.ended(rec, fmt.Errorf("the worker did not answer: %v; %s", err, r.describe()))
	}
	return &Session{m: m, rec: rec, relay: r}, nil
}

// Open connects to the worker of session id.
func (m *Manager) Open(ctx context.Context, id string) (*Session, error) {
	rec, err := m.readRecord(id)
	if err != nil {
		return nil, err
	}
	if err := m.sameCluster(rec); err != nil {
		return nil, err
	}
	return m.connect(ctx, rec)
}

// sameCluster refuses a record made on another cluster or namespace than
// the manager's.
func (m *Manager) sameCluster(rec *record) error {
	c := m.Cluster
	if rec.Namespace != c.Namespace || rec.Context != c.Context {
		return fmt.Errorf("%w: session %s is on context %q, namespace %s, but the [kubernetes] config now names context %q, namespace %s", ErrCluster, rec.ID, rec.Context, rec.Namespace, c.Context, c.Namespace)
	}
	return nil
}

// ended explains why rec's session cannot be reached: the pod's state,
// wrapped in ErrSessionEnded, or the cluster's error.
func (m *Manager) ended(rec *record, cause error) error {
	if err := m.podEnded(rec); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s: %v", ErrSessionEnded, rec.ID, cause)
}

// podEnded is the error of rec's pod being gone or over (or of the
// cluster not answering), nil while it runs.
func (m *Manager) podEnded(rec *record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := m.Cluster.api.getPod(ctx, rec.Namespace, rec.Pod)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s: its pod %s/%s is gone", ErrSessionEnded, rec.ID, rec.Namespace, rec.Pod)
	case err != nil:
		return apiError("session "+rec.ID, err)
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return fmt.Errorf("%w: %s: pod %s/%s is %s%s", ErrSessionEnded, rec.ID, rec.Namespace, rec.Pod, p.Status.Phase, containerEnd(p, ContainerSession))
	}
	return nil
}

// Session is a connection to one kubernetes session's worker.
type Session struct {
	m     *Manager
	rec   *record
	relay *relay
}

// ID is the session ID.
func (s *Session) ID() string { return s.rec.ID }

// Pod is the session's pod (namespace/name).
func (s *Session) Pod() string { return s.rec.Namespace + "/" + s.rec.Pod }

// FenceReceipt is the fence init container's receipt.
func (s *Session) FenceReceipt() string { return s.rec.Fence }

// Done is closed when the connection to the worker ends.
func (s *Session) Done() <-chan struct{} { return s.relay.done }

// Client is the worker protocol client (file tools and bash).
func (s *Session) Client() *wire.Client { return s.relay.client }

// Exec runs a bash request on the worker; a broken stream or a gone pod is
// ErrSessionEnded with the reason.
func (s *Session) Exec(ctx context.Context, a wire.BashArgs, out func(stream string, data []byte)) (*wire.BashResult, error) {
	res, err := s.relay.client.Bash(ctx, a, out)
	if err != nil && errors.Is(err, wire.ErrWorkerExited) {
		return nil, s.m.ended(s.rec, fmt.Errorf("%v; %s", err, s.relay.describe()))
	}
	return res, err
}

// Close drops this connection; the session keeps running.
func (s *Session) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.relay.Close(ctx)
	return nil
}

func (m *Manager) progress(format string, a ...any) {
	if m.Progress != nil {
		fmt.Fprintf(m.Progress, "vak: "+format+"\n", a...)
	}
}

// records

func (m *Manager) recordPath(id string) (string, error) {
	if !validID(id) {
		return "", fmt.Errorf("%w: %q is not a session ID", ErrNoSession, id)
	}
	return filepath.Join(RecordDir(m.StateDir), id+".json"), nil
}

// readRecord reads the record of id; a missing one is ErrNotKubernetes
// (and ErrNoSession).
func (m *Manager) readRecord(id string) (*record, error) {
	p, err := m.recordPath(id)
	if err != nil {
		return nil, err
	}
	return readRecordFile(p, id)
}

func readRecordFile(p, id string) (*record, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoSession, id, ErrNotKubernetes)
	}
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil || rec.ID != id {
		return nil, fmt.Errorf("session record %s is damaged (remove it; the pod, if any, is collected by vak session gc): %v", p, err)
	}
	return &rec, nil
}

func (m *Manager) writeRecord(rec *record) error {
	p, err := m.recordPath(rec.ID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+rec.ID+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// IsSession reports whether id has a kubernetes record in state.
func IsSession(state, id string) bool {
	if !validID(id) {
		return false
	}
	_, err := os.Stat(filepath.Join(RecordDir(state), id+".json"))
	return err == nil
}

// validID is a session ID's shape (TASK-HASH), safe as a file name.
func validID(id string) bool {
	n := len(id) - 11
	if n < 1 || id[n] != '-' || len(id) > 51 {
		return false
	}
	for i := range len(id) {
		c := id[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || (i > 0 && (c == '_' || c == '.' || c == '-'))
		if !ok || (i > n && !('0' <= c && c <= '9' || 'a' <= c && c <= 'f')) {
			return false
		}
	}
	return true
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Pull brings session id's workspace back to the host: `vak __tar` in the
// session container streams it, and wsync.Apply applies it to the host
// workspace, refusing what protected says is protected (and every git
// control entry and link that leaves the workspace). Nothing is applied
// when the stream fails.
func (m *Manager) Pull(ctx context.Context, id string, protected func(rel string) (string, bool)) (*wsync.Report, error) {
	rec, err := m.readRecord(id)
	if err != nil {
		return nil, err
	}
	if err := m.sameCluster(rec); err != nil {
		return nil, err
	}
	c := m.Cluster
	ex, err := c.executor(c.execRequest(rec.Pod, ContainerSession, []string{Worker, TarCommand, rec.Workspace}, false))
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	stderr := wire.NewTailBuffer(4 << 10)
	go func() {
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: pw, Stderr: stderr})
		if err != nil {
			err = fmt.Errorf("pack the session's workspace: %v %s", err, stderr.String())
		}
		pw.CloseWithError(err)
	}()
	rep, err := wsync.Apply(pr, rec.Workspace, wsync.ApplyOptions{Protected: protected})
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return rep, m.endedIfGone(rec, err)
	}
	return rep, nil
}

// endedIfGone is the ended session's error when rec's pod is gone or
// over, else err.
func (m *Manager) endedIfGone(rec *record, err error) error {
	if e := m.podEnded(rec); e != nil {
		return e
	}
	return err
}
