// Package asks holds requests that no rule allows until a person answers:
// with [network] ask = true the gateway turns such a request into a
// pending ask instead of refusing it at once, and the request waits (up to
// a timeout) for an answer given over the gateway's admin socket, which no
// sandbox can reach.
//
// An ask names what the request is (method, host, port, path). Identical
// requests waiting at the same time share one ask. An answer is one of:
// allow once (the requests waiting now proceed; the next one asks again),
// allow for this run (also every later request to the host and port, for
// the gateway's lifetime), or deny. A request nobody answers in time is
// refused, naming its ask. Asks are bounded (pending at once, and new ones
// per minute), so a sandbox cannot flood the person who answers.
//
// The package decides nothing about policy and does no I/O: the gateway's
// proxy calls Registry.Ask only for requests no rule matched (an explicit
// deny rule is never asked about), and writes the receipt with the
// reason Ask returns.
package asks

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"vak/internal/egress/policy"
)

// Defaults of Options.
const (
	DefaultTimeout    = 30 * time.Second
	DefaultMaxPending = 16
	DefaultPerMinute  = 30
)

// Scope is how far an allow answer reaches.
type Scope string

// Scopes.
const (
	// Once lets the requests waiting on the ask through; the next
	// identical request asks again.
	Once Scope = "once"
	// Run also allows every later request to the ask's host and port for
	// the gateway's lifetime (nothing is written to any config).
	Run Scope = "run"
	// Always is Once for the registry: the answering command has added a
	// rule to the user config (Answer.Rule) that decides later requests.
	Always Scope = "always"
)

// Errors of Answer.
var (
	// ErrNoSuchAsk: no pending ask has the ID (it was answered, timed out,
	// or never existed).
	ErrNoSuchAsk = errors.New("asks: no such pending ask")
	// ErrBadAnswer: an allow answer without a known scope.
	ErrBadAnswer = errors.New("asks: an allow answer needs a scope (once, run or always)")
)

// Ask is one pending question, as the admin API lists it.
type Ask struct {
	ID     string    `json:"id"`
	Method string    `json:"method"`
	Host   string    `json:"host"`
	Port   uint16    `json:"port"`
	Path   string    `json:"path"`
	First  time.Time `json:"first"`
	// Count is how many requests have waited on it.
	Count int `json:"count"`
	// Expires is when its oldest waiting request gives up.
	Expires time.Time `json:"expires"`
}

// Answer is a person's answer to an ask.
type Answer struct {
	Allow bool  `json:"allow"`
	Scope Scope `json:"scope,omitempty"`
	// By names who answered and through which channel (for receipts), e.g.
	// "admin socket, uid 1000".
	By string `json:"by"`
	// Rule names the rule the answer added to the user config, if any.
	Rule string `json:"rule,omitempty"`
}

// text is the answer as receipts say it, after "ask ID".
func (a Answer) text(id string) string {
	var s string
	if a.Allow {
		s = "allowed " + map[Scope]string{Once: "once", Run: "for this run", Always: "for good"}[a.Scope] + " by ask " + id + " (" + a.By + ")"
	} else {
		s = "no rule matches, and ask " + id + " was denied (" + a.By + ")"
	}
	if a.Rule != "" {
		s += "; rule " + strconv.Quote(a.Rule) + " added to the user config"
	}
	return s
}

// Event is one change the admin API streams to followers.
type Event struct {
	// Kind is "ask" (new or joined), "answered" or "expired".
	Kind   string  `json:"kind"`
	Ask    Ask     `json:"ask"`
	Answer *Answer `json:"answer,omitempty"`
}

// Options configure a Registry; zero values mean the defaults.
type Options struct {
	Timeout    time.Duration
	MaxPending int
	PerMinute  int
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Registry holds the pending asks and the run grants of one gateway. It
// is safe for concurrent use.
type Registry struct {
	opts    Options
	mu      sync.Mutex
	pending map[key]*pending
	byID    map[string]*pending
	grants  []grant
	recent  []time.Time // when the asks of the last minute were made
	subs    map[chan Event]struct{}
}

type key struct {
	method, host string
	port         uint16
	path         string
}

type pending struct {
	ask    Ask
	done   chan struct{}
	answer Answer
}

// grant is an allow-for-this-run answer.
type grant struct {
	host string
	port uint16
	id   string
	by   string
}

// New returns an empty Registry.
func New(o Options) *Registry {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.PerMinute <= 0 {
		o.PerMinute = DefaultPerMinute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Registry{opts: o, pending: map[key]*pending{}, byID: map[string]*pending{}, subs: map[chan Event]struct{}{}}
}

// Timeout is how long a request waits for an answer.
func (r *Registry) Timeout() time.Duration { return r.opts.Timeout }

// Ask holds req, a request no rule allows, until its ask is answered, the
// timeout passes or ctx ends, and reports whether it may proceed and why
// (the receipt's reason; it names the ask).
func (r *Registry) Ask(ctx context.Context, req policy.Request) (bool, string) {
	k := key{req.Method, req.Host.String(), req.Port, req.Path}
	r.mu.Lock()
	if g, ok := r.granted(k); ok {
		r.mu.Unlock()
		return true, "allowed for this run by ask " + g.id + " (" + g.by + ")"
	}
	p := r.pending[k]
	now := r.opts.Now()
	if p == nil {
		if why := r.limitLocked(now); why != "" {
			r.mu.Unlock()
			return false, "no rule matches, and " + why
		}
		p = &pending{ask: Ask{ID: newID(), Method: k.method, Host: k.host, Port: k.port, Path: k.path, First: now}, done: make(chan struct{})}
		r.pending[k], r.byID[p.ask.ID] = p, p
		r.recent = append(r.recent, now)
	}
	p.ask.Count++
	if p.ask.Count == 1 {
		p.ask.Expires = now.Add(r.opts.Timeout)
	}
	r.publishLocked(Event{Kind: "ask", Ask: p.ask})
	id := p.ask.ID
	r.mu.Unlock()

	timer := time.NewTimer(r.opts.Timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.answer.Allow, p.answer.text(id)
	case <-timer.C:
		r.expire(p)
		return false, "no rule matches, and ask " + id + " was not answered within " + r.opts.Timeout.String() + " (vak gateway asks)"
	case <-ctx.Done():
		r.expire(p)
		return false, "no rule matches; the client gave up while ask " + id + " waited"
	}
}

// limitLocked is why a new ask may not be made now, or "".
func (r *Registry) limitLocked(now time.Time) string {
	if len(r.pending) >= r.opts.MaxPending {
		return strconv.Itoa(len(r.pending)) + " asks are already pending (answer them: vak gateway asks)"
	}
	r.recent = slices.DeleteFunc(r.recent, func(t time.Time) bool { return now.Sub(t) >= time.Minute })
	if len(r.recent) >= r.opts.PerMinute {
		return "asking is paused: " + strconv.Itoa(r.opts.PerMinute) + " asks were made in the last minute"
	}
	return ""
}

// expire drops p when the last of its requests stops waiting unanswered.
func (r *Registry) expire(p *pending) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-p.done:
		return // answered meanwhile
	default:
	}
	p.ask.Count--
	if p.ask.Count > 0 {
		return
	}
	r.removeLocked(p)
	r.publishLocked(Event{Kind: "expired", Ask: p.ask})
}

func (r *Registry) removeLocked(p *pending) {
	k := key{p.ask.Method, p.ask.Host, p.ask.Port, p.ask.Path}
	if r.pending[k] == p {
		delete(r.pending, k)
	}
	delete(r.byID, p.ask.ID)
}

func (r *Registry) granted(k key) (grant, bool) {
	for _, g := range r.grants {
		if g.host == k.host && g.port == k.port {
			return g, true
		}
	}
	return grant{}, false
}

// Answer answers the pending ask id: the requests waiting on it proceed
// or are refused.
func (r *Registry) Answer(id string, a Answer) error {
	if a.Allow && a.Scope != Once && a.Scope != Run && a.Scope != Always {
		return ErrBadAnswer
	}
	if !a.Allow {
		a.Scope = ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.byID[id]
	if p == nil {
		return fmt.Errorf("%w: %q", ErrNoSuchAsk, id)
	}
	r.removeLocked(p)
	if a.Allow && a.Scope == Run {
		r.grants = append(r.grants, grant{host: p.ask.Host, port: p.ask.Port, id: id, by: a.By})
	}
	p.answer = a
	close(p.done)
	r.publishLocked(Event{Kind: "answered", Ask: p.ask, Answer: &a})
	return nil
}

// Pending lists the pending asks, oldest first.
func (r *Registry) Pending() []Ask {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pendingLocked()
}

func (r *Registry) pendingLocked() []Ask {
	out := make([]Ask, 0, len(r.byID))
	for _, p := range r.byID {
		out = append(out, p.ask)
	}
	slices.SortFunc(out, func(a, b Ask) int {
		if c := a.First.Compare(b.First); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// Subscribe returns the pending asks now and a channel of the events
// after them, until cancel is called. A follower too slow to keep up
// misses events (never blocks the gateway); it can list again.
func (r *Registry) Subscribe() (now []Ask, events <-chan Event, cancel func()) {
	ch := make(chan Event, 64)
	r.mu.Lock()
	now = r.pendingLocked()
	r.subs[ch] = struct{}{}
	r.mu.Unlock()
	var once sync.Once
	return now, ch, func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.subs, ch)
			r.mu.Unlock()
			close(ch)
		})
	}
}

// Follow calls fn with the pending asks (as "ask" events), then with
// every event after them, until ctx ends (nil) or fn fails (its error).
func (r *Registry) Follow(ctx context.Context, fn func(Event) error) error {
	now, events, cancel := r.Subscribe()
	defer cancel()
	for _, a := range now {
		if err := fn(Event{Kind: "ask", Ask: a}); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-events:
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

func (r *Registry) publishLocked(e Event) {
	for ch := range r.subs {
		select {
		case ch <- e:
		default:
		}
	}
}

func newID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
