package agentnet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"vak/internal/errclass"
	"vak/internal/receipts"
)

// Defaults.
const (
	DefaultTokenTTL   = 5 * time.Minute
	DefaultPerMinute  = 60
	DefaultMaxBytes   = 64 << 10
	DefaultQueueDepth = 100
	// DefaultAudience is the audience of tokens minted by a broker.
	DefaultAudience = "vak-agentnet"
	// MaxTopic bounds a topic's length.
	MaxTopic = 128
)

// Errors. Each wraps an errclass so that the CLI maps it in one place.
var (
	// ErrToken: the token is malformed, forged, expired, for another
	// audience, or revoked.
	ErrToken = errclass.New(errclass.Invalid, "agentnet: task token refused")
	// ErrNoEdge: there is no live edge to the destination.
	ErrNoEdge = errclass.New(errclass.Invalid, "agentnet: no live edge")
	// ErrDestination: the destination is unknown, the sender itself, or
	// not a registered workspace.
	ErrDestination = errclass.New(errclass.Invalid, "agentnet: invalid destination")
	// ErrQuota: a per-edge quota (rate, size, queue depth) refused it.
	ErrQuota = errclass.New(errclass.Invalid, "agentnet: quota exceeded")
	// ErrRevoked: the edge or the registration was revoked while waiting.
	ErrRevoked = errclass.New(errclass.Invalid, "agentnet: revoked")
	// ErrTimeout: receive waited its full timeout without a message.
	ErrTimeout = errors.New("agentnet: no message before the timeout")
	// ErrRegister: a registration was refused.
	ErrRegister = errclass.New(errclass.Invalid, "agentnet: registration refused")
	// ErrBadRequest: an operation's arguments are invalid.
	ErrBadRequest = errclass.New(errclass.Invalid, "agentnet: bad request")
	// ErrTooLarge: a request line is over the broker's limit (MaxLine).
	ErrTooLarge = errclass.New(errclass.Invalid, "agentnet: request too large")
)

// Quota bounds one edge. Zero fields take the defaults.
type Quota struct {
	// PerMinute is the number of messages a sender may send on the edge
	// per minute.
	PerMinute int
	// MaxBytes bounds one message body.
	MaxBytes int
	// QueueDepth bounds the undelivered messages on the edge (per
	// direction).
	QueueDepth int
}

func (q Quota) withDefaults() Quota {
	if q.PerMinute <= 0 {
		q.PerMinute = DefaultPerMinute
	}
	if q.MaxBytes <= 0 {
		q.MaxBytes = DefaultMaxBytes
	}
	if q.QueueDepth <= 0 {
		q.QueueDepth = DefaultQueueDepth
	}
	return q
}

// narrower returns the smaller of each bound.
func (q Quota) narrower(o Quota) Quota {
	return Quota{PerMinute: min(q.PerMinute, o.PerMinute), MaxBytes: min(q.MaxBytes, o.MaxBytes), QueueDepth: min(q.QueueDepth, o.QueueDepth)}
}

// Policy is one workspace's network policy, from the trusted user config.
type Policy struct {
	// Workspace is the workspace path (canonicalized by SetPolicies).
	Workspace string
	Enabled   bool
	// Peers are the workspace paths this workspace accepts.
	Peers []string
	Quota Quota
}

// Identity is a workspace's persistent identity.
type Identity struct {
	ID        string    `json:"id"`
	Workspace string    `json:"workspace"`
	UID       int       `json:"uid"`
	Created   time.Time `json:"created"`
}

// Message is one delivered message.
type Message struct {
	ID    string `json:"id"`
	From  string `json:"from"` // sender's identity
	Topic string `json:"topic"`
	// Kind is "message", "request" or "reply".
	Kind string `json:"kind"`
	// Correlation is set on requests and replies.
	Correlation string `json:"correlation,omitempty"`
	Body        []byte `json:"body"`
}

// Peer is a workspace this task can reach.
type Peer struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
}

// EdgeStatus is one edge of the graph and why it is up or down.
type EdgeStatus struct {
	A, B   string // workspace paths, A < B
	Up     bool
	Reason string
	Quota  Quota
}

// Options configure a Broker.
type Options struct {
	// StateDir holds identities and the token key (created 0700).
	StateDir string
	// Receipts receives one record per event; required.
	Receipts *receipts.Log
	// UID is the user the broker serves; registrations for another uid
	// are refused.
	UID int
	// Audience names this broker in tokens; empty means DefaultAudience.
	Audience string
	// TokenTTL is a token's lifetime; zero means DefaultTokenTTL.
	TokenTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PolicyFile names the file the policies come from (the trusted user
	// config) in refused registrations; empty means "the user config".
	PolicyFile string
}

type task struct {
	id     string
	ident  *Identity
	expiry time.Time
}

// edgeKey names a directed edge by identity ids.
type edgeKey struct{ from, to string }

type queue struct {
	msgs []Message
	// sent holds the send times of the last minute (rate quota).
	sent []time.Time
}

type waiter struct {
	ident string
	task  string
	topic string
	corr  string
	ch    chan waitResult
}

type waitResult struct {
	msg Message
	err error
}

// Broker is the broker core. It is safe for concurrent use.
type Broker struct {
	dir      string
	log      *receipts.Log
	uid      int
	audience string
	ttl      time.Duration
	now      func() time.Time
	key      []byte
	// instance names this broker process's run: registrations live in
	// memory, so a client that sees another instance re-registers.
	instance string
	// policyFile names the policies' file in errors (Options.PolicyFile).
	policyFile string

	mu         sync.Mutex
	policies   map[string]Policy    // by canonical workspace path
	idents     map[string]*Identity // by canonical workspace path
	byID       map[string]*Identity
	tasks      map[string]*task // live tasks by id
	revoked    map[string]bool  // revoked task ids
	queues     map[edgeKey]*queue
	waiters    map[*waiter]bool
	up         map[[2]string]bool // live undirected edges by sorted identity ids
	pending    map[string]string  // correlation id -> requester identity (awaiting reply from the key's peer)
	pendTo     map[string]string  // correlation id -> identity that must reply
	pendTopics map[string]string  // correlation id -> request topic
	rr         map[string]int     // round-robin cursor per receiving identity
}

// New opens the broker state in opts.StateDir.
func New(opts Options) (*Broker, error) {
	if opts.Receipts == nil {
		return nil, fmt.Errorf("agentnet: a receipts log is required")
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("agentnet: state dir: %w", err)
	}
	key, err := loadOrCreateKey(opts.StateDir)
	if err != nil {
		return nil, err
	}
	b := &Broker{
		dir: opts.StateDir, log: opts.Receipts, uid: opts.UID, audience: opts.Audience, ttl: opts.TokenTTL, now: opts.Now, key: key,
		policies: map[string]Policy{}, idents: map[string]*Identity{}, byID: map[string]*Identity{},
		tasks: map[string]*task{}, revoked: map[string]bool{}, queues: map[edgeKey]*queue{},
		waiters: map[*waiter]bool{}, up: map[[2]string]bool{}, pending: map[string]string{}, pendTo: map[string]string{}, pendTopics: map[string]string{}, rr: map[string]int{},
	}
	var inst [8]byte
	if _, err := rand.Read(inst[:]); err != nil {
		return nil, fmt.Errorf("agentnet: %w", err)
	}
	b.instance = hex.EncodeToString(inst[:])
	if b.audience == "" {
		b.audience = DefaultAudience
	}
	if b.ttl <= 0 {
		b.ttl = DefaultTokenTTL
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.policyFile = opts.PolicyFile; b.policyFile == "" {
		b.policyFile = "the user config"
	}
	if err := b.loadIdentities(); err != nil {
		return nil, err
	}
	return b, nil
}

// Expire closes the edges of workspaces whose last registration expired
// (an edge-down receipt each; receives waiting on them fail). Every
// operation does this too; Run calls it every ExpireInterval so that an
// edge goes down without traffic.
func (b *Broker) Expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recomputeLocked("registration expired")
}

// ExpireInterval is how often Run calls Expire.
const ExpireInterval = 10 * time.Second

// Instance names this broker's run (a new one at every start).
func (b *Broker) Instance() string { return b.instance }

func (b *Broker) identFile() string { return filepath.Join(b.dir, "identities.json") }

func (b *Broker) loadIdentities() error {
	data, err := os.ReadFile(b.identFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agentnet: read identities: %w", err)
	}
	var list []*Identity
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("agentnet: %s: %w", b.identFile(), err)
	}
	for _, id := range list {
		b.idents[id.Workspace] = id
		b.byID[id.ID] = id
	}
	return nil
}

// saveIdentities writes the identities atomically (0600). Called with mu held.
func (b *Broker) saveIdentities() error {
	list := make([]*Identity, 0, len(b.idents))
	for _, id := range b.idents {
		list = append(list, id)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Workspace < list[j].Workspace })
	data, _ := json.MarshalIndent(list, "", "  ")
	tmp := b.identFile() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("agentnet: write identities: %w", err)
	}
	if err := os.Rename(tmp, b.identFile()); err != nil {
		return fmt.Errorf("agentnet: write identities: %w", err)
	}
	return nil
}

// Canonical returns the canonical form of a workspace path: absolute, with
// symlinks resolved when it exists.
func Canonical(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("agentnet: workspace %q: %w", p, err)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r, nil
	}
	return filepath.Clean(abs), nil
}

// receipt appends one record; the caller holds no requirement on mu.
func (b *Broker) receipt(method, client, session, peer, decision, reason string, size int) {
	_ = b.log.Append(receipts.Record{
		Protocol: "agentnet", Method: method, Client: client, Session: session, Host: peer,
		Rule: -1, Decision: decision, Reason: reason, BytesOut: int64(size),
	})
}

// SetPolicies replaces the policies (a reload) and recomputes the edges:
// edges that went down are revoked at once.
func (b *Broker) SetPolicies(ps []Policy) error {
	m := map[string]Policy{}
	for _, p := range ps {
		ws, err := Canonical(p.Workspace)
		if err != nil {
			return err
		}
		p.Workspace = ws
		peers := make([]string, 0, len(p.Peers))
		for _, q := range p.Peers {
			c, err := Canonical(q)
			if err != nil {
				return err
			}
			peers = append(peers, c)
		}
		p.Peers = peers
		p.Quota = p.Quota.withDefaults()
		if _, dup := m[ws]; dup {
			return fmt.Errorf("%w: workspace %s has two policies", ErrBadRequest, ws)
		}
		m[ws] = p
	}
	b.mu.Lock()
	b.policies = m
	b.recomputeLocked("policy reload")
	b.mu.Unlock()
	return nil
}

// edgeReason says why the edge between workspaces a and b is down ("" when
// it is up). Called with mu held.
func (b *Broker) edgeReason(a, c string) string {
	pa, oka := b.policies[a]
	pc, okc := b.policies[c]
	switch {
	case !oka:
		return a + " has no agent_network policy"
	case !okc:
		return c + " has no agent_network policy"
	case !pa.Enabled:
		return a + " has agent_network disabled"
	case !pc.Enabled:
		return c + " has agent_network disabled"
	case !slices.Contains(pa.Peers, c):
		return a + " does not list " + c + " as a peer"
	case !slices.Contains(pc.Peers, a):
		return c + " does not list " + a + " as a peer"
	}
	ia, ic := b.idents[a], b.idents[c]
	if ia == nil || !b.liveLocked(ia.ID) {
		return a + " has no live registration"
	}
	if ic == nil || !b.liveLocked(ic.ID) {
		return c + " has no live registration"
	}
	return ""
}

func (b *Broker) liveLocked(ident string) bool {
	now := b.now()
	for _, t := range b.tasks {
		if t.ident.ID == ident && now.Before(t.expiry) {
			return true
		}
	}
	return false
}

func pair(a, c string) [2]string {
	if a > c {
		a, c = c, a
	}
	return [2]string{a, c}
}

// recomputeLocked brings b.up in line with policies and registrations,
// receipting every change and revoking edges that went down.
func (b *Broker) recomputeLocked(why string) {
	want := map[[2]string]bool{}
	for a, pa := range b.policies {
		for _, c := range pa.Peers {
			if a == c || b.edgeReason(a, c) != "" {
				continue
			}
			want[pair(b.idents[a].ID, b.idents[c].ID)] = true
		}
	}
	for e := range b.up {
		if !want[e] {
			delete(b.up, e)
			b.closeEdgeLocked(e, why)
		}
	}
	for e := range want {
		if !b.up[e] {
			b.up[e] = true
			b.receipt("edge-up", e[0], "", e[1], receipts.Allow, why, 0)
		}
	}
}

// closeEdgeLocked drops both directions' queues and fails the waiters of
// both ends.
func (b *Broker) closeEdgeLocked(e [2]string, why string) {
	b.receipt("edge-down", e[0], "", e[1], receipts.Deny, why, 0)
	for _, k := range []edgeKey{{e[0], e[1]}, {e[1], e[0]}} {
		if q := b.queues[k]; q != nil {
			for _, m := range q.msgs {
				b.receipt("drop", k.from, "", k.to, receipts.Deny, "edge closed: "+why+" (message "+m.ID+")", len(m.Body))
			}
			delete(b.queues, k)
		}
	}
	for w := range b.waiters {
		if w.ident == e[0] || w.ident == e[1] {
			delete(b.waiters, w)
			w.ch <- waitResult{err: fmt.Errorf("%w: edge closed (%s)", ErrRevoked, why)}
		}
	}
	for corr, req := range b.pending {
		if (req == e[0] && b.pendTo[corr] == e[1]) || (req == e[1] && b.pendTo[corr] == e[0]) {
			delete(b.pending, corr)
			delete(b.pendTo, corr)
			delete(b.pendTopics, corr)
		}
	}
}

// Register creates (on first use) the identity of the workspace and a task
// registration for it, and returns the task token. Only a workspace that
// an enabled policy names registers: any other gets ErrRegister, saying
// which entry to add, and no identity. The token is a bearer credential:
// keep it in the trusted process, never in a model's context.
func (b *Broker) Register(workspace string, uid int) (string, Identity, error) {
	ws, err := Canonical(workspace)
	if err != nil {
		return "", Identity{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if uid != b.uid {
		b.receipt("register", "", "", ws, receipts.Deny, fmt.Sprintf("uid %d is not the broker's uid %d", uid, b.uid), 0)
		return "", Identity{}, fmt.Errorf("%w: uid %d is not the broker's uid %d", ErrRegister, uid, b.uid)
	}
	if why := b.unregistrableLocked(ws); why != "" {
		b.receipt("register", "", "", ws, receipts.Deny, why, 0)
		return "", Identity{}, fmt.Errorf("%w: %s", ErrRegister, why)
	}
	id := b.idents[ws]
	if id == nil {
		id = &Identity{ID: "ws-" + randomID(8), Workspace: ws, UID: uid, Created: b.now().UTC()}
		b.idents[ws] = id
		b.byID[id.ID] = id
		if err := b.saveIdentities(); err != nil {
			delete(b.idents, ws)
			delete(b.byID, id.ID)
			return "", Identity{}, err
		}
		b.receipt("identity", id.ID, "", ws, receipts.Allow, "created", 0)
	} else if id.UID != uid {
		b.receipt("register", id.ID, "", ws, receipts.Deny, "identity belongs to another uid", 0)
		return "", Identity{}, fmt.Errorf("%w: the identity of %s belongs to uid %d", ErrRegister, ws, id.UID)
	}
	t := &task{id: "task-" + randomID(8), ident: id, expiry: b.now().Add(b.ttl)}
	b.tasks[t.id] = t
	b.receipt("register", id.ID, t.id, ws, receipts.Allow, "", 0)
	b.recomputeLocked("registration of " + ws)
	return b.tokenLocked(t), *id, nil
}

// unregistrableLocked says why workspace ws may not register ("" when it
// may): it needs an enabled policy, which only the trusted user config
// declares. Called with mu held.
func (b *Broker) unregistrableLocked(ws string) string {
	entry := fmt.Sprintf("[[agent_network.workspace]] entry with path = %q", ws)
	p, ok := b.policies[ws]
	switch {
	case !ok:
		return fmt.Sprintf("%s has no [agent_network] policy: add an %s (and its peers) to %s, then run `vak agentnet reload`", ws, entry, b.policyFile)
	case !p.Enabled:
		return fmt.Sprintf("%s has agent_network disabled: remove enabled = false from its %s in %s, then run `vak agentnet reload`", ws, entry, b.policyFile)
	}
	return ""
}

func (b *Broker) tokenLocked(t *task) string {
	return sign(b.key, claims{Task: t.id, Identity: t.ident.ID, Audience: b.audience, Expiry: t.expiry.Unix()})
}

// authLocked checks a token and returns its live task. Refusals are
// receipted without the token.
func (b *Broker) authLocked(op, tok string) (*task, error) {
	c, err := parse(b.key, tok)
	if err == nil {
		switch t := b.tasks[c.Task]; {
		case c.Audience != b.audience:
			err = fmt.Errorf("%w: token is for audience %q, not %q", ErrToken, c.Audience, b.audience)
		case b.revoked[c.Task]:
			err = fmt.Errorf("%w: task %s was %w", ErrToken, c.Task, ErrRevoked)
		case !b.now().Before(time.Unix(c.Expiry, 0)):
			err = fmt.Errorf("%w: token expired", ErrToken)
		case t == nil || t.ident.ID != c.Identity:
			err = fmt.Errorf("%w: unknown task", ErrToken)
		case !b.now().Before(t.expiry):
			err = fmt.Errorf("%w: task registration expired", ErrToken)
		default:
			return t, nil
		}
	}
	b.receipt(op, c.Identity, c.Task, "", receipts.Deny, err.Error(), 0)
	return nil, err
}

// Renew extends a live task's registration and returns a fresh token.
func (b *Broker) Renew(tok string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.authLocked("renew", tok)
	if err != nil {
		return "", err
	}
	t.expiry = b.now().Add(b.ttl)
	b.receipt("renew", t.ident.ID, t.id, "", receipts.Allow, "", 0)
	return b.tokenLocked(t), nil
}

// Unregister ends a task: its token is revoked and, if it was the
// workspace's last live task, the workspace's edges close.
func (b *Broker) Unregister(tok string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.authLocked("unregister", tok)
	if err != nil {
		return err
	}
	b.revokeTaskLocked(t, "unregistered")
	b.recomputeLocked("unregistration of " + t.ident.Workspace)
	return nil
}

func (b *Broker) revokeTaskLocked(t *task, why string) {
	delete(b.tasks, t.id)
	b.revoked[t.id] = true
	b.receipt("revoke", t.ident.ID, t.id, "", receipts.Deny, why, 0)
	for w := range b.waiters {
		if w.task == t.id {
			delete(b.waiters, w)
			w.ch <- waitResult{err: fmt.Errorf("%w: %s", ErrRevoked, why)}
		}
	}
}

// Revoke revokes every task of a workspace and closes its edges at once.
// The workspace must register again to rejoin.
func (b *Broker) Revoke(workspace string) (int, error) {
	ws, err := Canonical(workspace)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.idents[ws]
	if id == nil {
		return 0, fmt.Errorf("%w: %s has no identity", ErrDestination, ws)
	}
	n := 0
	for _, t := range b.tasks {
		if t.ident.ID == id.ID {
			b.revokeTaskLocked(t, "revoked by the user")
			n++
		}
	}
	b.recomputeLocked("revocation of " + ws)
	return n, nil
}

// Edges returns every edge named by some policy, up or down, with why.
func (b *Broker) Edges() []EdgeStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[[2]string]bool{}
	var out []EdgeStatus
	for a, pa := range b.policies {
		for _, c := range pa.Peers {
			e := pair(a, c)
			if seen[e] || a == c {
				continue
			}
			seen[e] = true
			r := b.edgeReason(e[0], e[1])
			st := EdgeStatus{A: e[0], B: e[1], Up: r == "", Reason: r}
			if r == "" {
				st.Reason = "both policies name each other and both are registered"
				st.Quota = b.policies[e[0]].Quota.narrower(b.policies[e[1]].Quota)
			}
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].A+"\x00"+out[i].B < out[j].A+"\x00"+out[j].B })
	return out
}

// Peers lists the workspaces the task's workspace has a live edge to.
func (b *Broker) Peers(tok string) ([]Peer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.authLocked("peers", tok)
	if err != nil {
		return nil, err
	}
	b.recomputeLocked("registration expired")
	var out []Peer
	for e := range b.up {
		other := ""
		switch t.ident.ID {
		case e[0]:
			other = e[1]
		case e[1]:
			other = e[0]
		default:
			continue
		}
		out = append(out, Peer{ID: other, Workspace: b.byID[other].Workspace})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// resolveLocked maps a peer name (identity id or workspace path) to an
// identity.
func (b *Broker) resolveLocked(peer string) *Identity {
	if id := b.byID[peer]; id != nil {
		return id
	}
	if c, err := Canonical(peer); err == nil {
		return b.idents[c]
	}
	return nil
}

// Send queues a message for peer on topic and returns its id.
func (b *Broker) Send(tok, peer, topic string, body []byte) (string, error) {
	return b.send(tok, peer, topic, body, "message", "")
}

// Request sends a request and returns its correlation id; the reply
// arrives through Receive with the same topic and correlation id.
func (b *Broker) Request(tok, peer, topic string, body []byte) (string, error) {
	corr := "corr-" + randomID(8)
	if _, err := b.send(tok, peer, topic, body, "request", corr); err != nil {
		return "", err
	}
	return corr, nil
}

// Reply answers a request received by this task's workspace.
func (b *Broker) Reply(tok, correlation string, body []byte) error {
	b.mu.Lock()
	t, err := b.authLocked("reply", tok)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	req, ok := b.pending[correlation]
	if !ok || b.pendTo[correlation] != t.ident.ID {
		b.mu.Unlock()
		b.receipt("reply", t.ident.ID, t.id, "", receipts.Deny, "no open request "+correlation+" for this workspace", len(body))
		return fmt.Errorf("%w: no open request %q for this workspace", ErrBadRequest, correlation)
	}
	b.mu.Unlock()
	// The pending entry is removed on successful delivery into the queue.
	_, err = b.send(tok, req, "", body, "reply", correlation)
	return err
}

func (b *Broker) send(tok, peer, topic string, body []byte, kind, corr string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.authLocked(kind, tok)
	if err != nil {
		return "", err
	}
	b.recomputeLocked("registration expired")
	me := t.ident.ID
	refuse := func(e error, to string) (string, error) {
		b.receipt(kind, me, t.id, to, receipts.Deny, e.Error(), len(body))
		return "", e
	}
	if kind == "reply" {
		topic = b.pendTopic(corr)
	}
	if topic == "" || len(topic) > MaxTopic {
		return refuse(fmt.Errorf("%w: topic must be 1..%d bytes", ErrBadRequest, MaxTopic), peer)
	}
	dst := b.resolveLocked(peer)
	switch {
	case dst == nil:
		return refuse(fmt.Errorf("%w: %q is not a registered workspace", ErrDestination, peer), "")
	case dst.ID == me:
		return refuse(fmt.Errorf("%w: a workspace cannot send to itself", ErrDestination), dst.ID)
	}
	if !b.up[pair(me, dst.ID)] {
		r := b.edgeReason(t.ident.Workspace, dst.Workspace)
		if r == "" {
			r = "edge is down"
		}
		return refuse(fmt.Errorf("%w to %s: %s", ErrNoEdge, dst.Workspace, r), dst.ID)
	}
	quota := b.policies[t.ident.Workspace].Quota.narrower(b.policies[dst.Workspace].Quota)
	k := edgeKey{me, dst.ID}
	q := b.queues[k]
	if q == nil {
		q = &queue{}
		b.queues[k] = q
	}
	now := b.now()
	cut := 0
	for cut < len(q.sent) && now.Sub(q.sent[cut]) >= time.Minute {
		cut++
	}
	q.sent = q.sent[cut:]
	switch {
	case len(body) > quota.MaxBytes:
		return refuse(fmt.Errorf("%w: message of %d bytes exceeds the edge's %d", ErrQuota, len(body), quota.MaxBytes), dst.ID)
	case len(q.sent) >= quota.PerMinute:
		return refuse(fmt.Errorf("%w: %d messages per minute on this edge", ErrQuota, quota.PerMinute), dst.ID)
	case len(q.msgs) >= quota.QueueDepth:
		return refuse(fmt.Errorf("%w: queue depth %d on this edge is full", ErrQuota, quota.QueueDepth), dst.ID)
	}
	q.sent = append(q.sent, now)
	m := Message{ID: "msg-" + randomID(8), From: me, Topic: topic, Kind: kind, Correlation: corr, Body: slices.Clone(body)}
	switch kind {
	case "request":
		b.pending[corr] = me
		b.pendTo[corr] = dst.ID
		b.pendTopics[corr] = topic
	case "reply":
		delete(b.pending, corr)
		delete(b.pendTo, corr)
		delete(b.pendTopics, corr)
	}
	b.receipt(kind, me, t.id, dst.ID, receipts.Allow, "queued "+m.ID+" topic "+topic, len(body))
	for w := range b.waiters {
		if w.ident == dst.ID && w.topic == topic && (w.corr == "" || w.corr == corr) {
			delete(b.waiters, w)
			b.receipt("deliver", dst.ID, "", me, receipts.Allow, "delivered "+m.ID, len(body))
			w.ch <- waitResult{msg: m}
			return m.ID, nil
		}
	}
	q.msgs = append(q.msgs, m)
	return m.ID, nil
}

func (b *Broker) pendTopic(corr string) string { return b.pendTopics[corr] }

// Receive returns the next message for the task's workspace on topic
// (and, when correlation is set, that reply), waiting up to wait. Queues
// of different edges are served round-robin, so one busy sender does not
// starve another.
func (b *Broker) Receive(ctx context.Context, tok, topic, correlation string, wait time.Duration) (Message, error) {
	b.mu.Lock()
	t, err := b.authLocked("receive", tok)
	if err != nil {
		b.mu.Unlock()
		return Message{}, err
	}
	me := t.ident.ID
	if m, ok := b.popLocked(me, topic, correlation); ok {
		b.mu.Unlock()
		return m, nil
	}
	b.recomputeLocked("registration expired")
	if !b.hasEdgeLocked(me) {
		b.mu.Unlock()
		b.receipt("receive", me, t.id, "", receipts.Deny, "no live edge", 0)
		return Message{}, fmt.Errorf("%w: this workspace has no live edge to wait on", ErrNoEdge)
	}
	w := &waiter{ident: me, task: t.id, topic: topic, corr: correlation, ch: make(chan waitResult, 1)}
	b.waiters[w] = true
	b.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case r := <-w.ch:
		return r.msg, r.err
	case <-timer.C:
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.waiters[w] { // a result raced the timeout: take it
		r := <-w.ch
		return r.msg, r.err
	}
	delete(b.waiters, w)
	if ctx.Err() != nil {
		return Message{}, ctx.Err()
	}
	return Message{}, ErrTimeout
}

// popLocked takes the first matching message from the receiver's incoming
// queues, starting at its round-robin cursor.
func (b *Broker) popLocked(me, topic, corr string) (Message, bool) {
	var keys []edgeKey
	for k := range b.queues {
		if k.to == me {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].from < keys[j].from })
	if len(keys) == 0 {
		return Message{}, false
	}
	start := b.rr[me] % len(keys)
	for i := range keys {
		k := keys[(start+i)%len(keys)]
		q := b.queues[k]
		for j, m := range q.msgs {
			if m.Topic == topic && (corr == "" || m.Correlation == corr) {
				q.msgs = slices.Delete(q.msgs, j, j+1)
				b.rr[me] = start + i + 1
				b.receipt("deliver", me, "", k.from, receipts.Allow, "delivered "+m.ID, len(m.Body))
				return m, true
			}
		}
	}
	return Message{}, false
}

// Live reports whether the token's task is live and its workspace has at
// least one live edge (the condition for offering the agent_network tool).
func (b *Broker) Live(tok string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, err := parse(b.key, tok)
	if err != nil || c.Audience != b.audience || b.revoked[c.Task] {
		return false
	}
	t := b.tasks[c.Task]
	if t == nil || !b.now().Before(t.expiry) {
		return false
	}
	b.recomputeLocked("registration expired")
	return b.hasEdgeLocked(t.ident.ID)
}

func (b *Broker) hasEdgeLocked(ident string) bool {
	for e := range b.up {
		if e[0] == ident || e[1] == ident {
			return true
		}
	}
	return false
}

// Waiting returns the number of receives waiting (for status and tests).
func (b *Broker) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters)
}
