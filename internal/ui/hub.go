package ui

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"vak/internal/egress/admin"
	"vak/internal/egress/asks"
	"vak/internal/receipts"
)

// event is one server-sent event: Kind is its name ("decision", "ask",
// "gateway").
type event struct {
	Kind string
	Data any
}

// decisionView is a "decision" event: a receipt record and its log.
type decisionView struct {
	Log string `json:"log"`
	receipts.Record
}

// gatewayAskView is an "ask" event, and a pending ask in the state.
type gatewayAskView struct {
	Gateway string `json:"gateway"`
	asks.Event
}

// gatewayState is a "gateway" event, and a gateway in the state.
type gatewayState struct {
	Name      string `json:"name"`
	Socket    string `json:"socket,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	Running   bool   `json:"running"`
	Error     string `json:"error,omitempty"`
	// Gone: a discovered gateway that is not found any more.
	Gone bool `json:"gone,omitempty"`
}

// receiptsLog is a receipts log in the state.
type receiptsLog struct {
	Path     string    `json:"path"`
	Records  uint64    `json:"records"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	Verified bool      `json:"verified"`
	Signed   bool      `json:"signed"`
	Problem  string    `json:"problem,omitempty"`
}

// recentDecisions is how many decisions a new page gets first.
const recentDecisions = 100

// hub follows the gateways' asks and the receipts logs and fans what
// happens out to the pages.
type hub struct {
	o Options

	mu       sync.Mutex
	subs     map[chan event]bool
	recent   []decisionView
	asks     map[string]map[string]asks.Ask // gateway -> id -> ask
	gws      map[string]*followed           // gateway name -> its follower
	gwState  map[string]gatewayState
	verified map[string]verifiedLog // receipts log path -> last verification
}

// followed is a gateway being followed.
type followed struct {
	g          Gateway
	discovered bool
	stop       context.CancelFunc
}

type verifiedLog struct {
	signed bool // checked with the key
	stamp  logStamp
	log    receiptsLog
}

// logStamp is what a log's verification depends on: the size and
// modification time of the log and of its signature and head sidecars
// (zero for one that is missing). A checkpoint that signs the records
// already in the log changes only the signature file: a verification
// made just before it lands must not be kept.
type logStamp [3]struct{ size, mod int64 }

// stampOf returns log f's stamp; ok is false when f itself is gone.
func stampOf(f string) (st logStamp, ok bool) {
	for i, p := range []string{f, f + receipts.SigSuffix, f + receipts.HeadSuffix} {
		fi, err := os.Stat(p)
		if err != nil {
			if i == 0 {
				return st, false
			}
			continue
		}
		st[i].size, st[i].mod = fi.Size(), fi.ModTime().UnixNano()
	}
	return st, true
}

func newHub(o Options) *hub {
	return &hub{o: o, subs: map[chan event]bool{}, asks: map[string]map[string]asks.Ask{},
		gws: map[string]*followed{}, gwState: map[string]gatewayState{}, verified: map[string]verifiedLog{}}
}

func (h *hub) run(ctx context.Context) {
	h.mu.Lock()
	for _, g := range h.o.Gateways {
		h.startLocked(ctx, g, false)
	}
	h.mu.Unlock()
	if h.o.Discover != nil {
		go h.discover(ctx)
	}
	h.tail(ctx)
}

// startLocked starts following g.
func (h *hub) startLocked(ctx context.Context, g Gateway, discovered bool) {
	fctx, stop := context.WithCancel(ctx)
	h.gws[g.Name] = &followed{g: g, discovered: discovered, stop: stop}
	h.asks[g.Name] = map[string]asks.Ask{}
	h.setGatewayLocked(g, false, "")
	go h.follow(fctx, g)
}

// discover follows the gateways Discover finds, and stops following the
// discovered ones it no longer finds.
func (h *hub) discover(ctx context.Context) {
	every := h.o.DiscoverEvery
	if every <= 0 {
		every = 3 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if list, err := h.o.Discover(ctx); err == nil {
			found := map[string]bool{}
			h.mu.Lock()
			for _, g := range list {
				found[g.Name] = true
				if h.gws[g.Name] == nil {
					h.startLocked(ctx, g, true)
				}
			}
			for name, f := range h.gws {
				if f.discovered && !found[name] {
					f.stop()
					delete(h.gws, name)
					h.dropAsksLocked(name)
					delete(h.asks, name)
					delete(h.gwState, name)
					h.publishLocked(event{"gateway", gatewayState{Name: name, Workspace: f.g.Workspace, Gone: true}})
				}
			}
			h.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *hub) gateway(name string) (Gateway, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.gws[name]; f != nil {
		return f.g, true
	}
	return Gateway{}, false
}

// names are the followed gateways' names, static ones first.
func (h *hub) namesLocked() []string {
	var out []string
	for _, g := range h.o.Gateways {
		out = append(out, g.Name)
	}
	var more []string
	for name, f := range h.gws {
		if f.discovered {
			more = append(more, name)
		}
	}
	sort.Strings(more)
	return append(out, more...)
}

// subscribe returns what a new page gets first (the gateways, the recent
// decisions and the pending asks) and the channel of what follows.
func (h *hub) subscribe() ([]event, <-chan event, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var backlog []event
	for _, name := range h.namesLocked() {
		backlog = append(backlog, event{"gateway", h.gwState[name]})
	}
	for _, d := range h.recent {
		backlog = append(backlog, event{"decision", d})
	}
	for _, a := range h.pendingLocked() {
		backlog = append(backlog, event{"ask", a})
	}
	ch := make(chan event, 256)
	h.subs[ch] = true
	return backlog, ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.subs[ch] {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// publishLocked sends e to every page; a page too slow to take it is
// dropped (it reconnects and starts from the state again).
func (h *hub) publishLocked(e event) {
	for ch := range h.subs {
		select {
		case ch <- e:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

func (h *hub) pending() []gatewayAskView {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pendingLocked()
}

func (h *hub) pendingLocked() []gatewayAskView {
	out := []gatewayAskView{}
	for gw, m := range h.asks {
		for _, a := range m {
			out = append(out, gatewayAskView{Gateway: gw, Event: asks.Event{Kind: "ask", Ask: a}})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ask.First.Before(out[j].Ask.First) })
	return out
}

func (h *hub) gatewayStates() []gatewayState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []gatewayState{}
	for _, name := range h.namesLocked() {
		out = append(out, h.gwState[name])
	}
	return out
}

var errNotFollowed = errors.New("ui: the gateway is no longer followed")

// follow keeps following g's asks: a gateway that is not running (yet,
// or any more) is tried again every second.
func (h *hub) follow(ctx context.Context, g Gateway) {
	followAsks := g.Follow
	if followAsks == nil {
		followAsks = admin.NewClient(g.Socket).FollowAsks
	}
	for ctx.Err() == nil {
		err := followAsks(ctx, func(e asks.Event) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			m := h.asks[g.Name]
			if m == nil || ctx.Err() != nil {
				return errNotFollowed
			}
			h.setGatewayLocked(g, true, "")
			switch e.Kind {
			case "ask": // new, or joined by another request
				m[e.Ask.ID] = e.Ask
			default: // answered, expired, gone
				delete(m, e.Ask.ID)
			}
			h.publishLocked(event{"ask", gatewayAskView{Gateway: g.Name, Event: e}})
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		msg := ""
		switch {
		case errors.Is(err, admin.ErrNotRunning):
			msg = "not running (nothing listens on its admin socket)"
		case err != nil:
			msg = err.Error()
		}
		if ctx.Err() == nil {
			h.setGatewayLocked(g, false, msg)
			h.dropAsksLocked(g.Name) // they went with it
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// dropAsksLocked forgets the asks of gateway name, telling the pages.
func (h *hub) dropAsksLocked(name string) {
	for id, a := range h.asks[name] {
		delete(h.asks[name], id)
		h.publishLocked(event{"ask", gatewayAskView{Gateway: name, Event: asks.Event{Kind: "gone", Ask: a}}})
	}
}

func (h *hub) setGatewayLocked(g Gateway, running bool, msg string) {
	st := gatewayState{Name: g.Name, Socket: g.Socket, Workspace: g.Workspace, Running: running, Error: msg}
	if h.gwState[g.Name] == st {
		return
	}
	h.gwState[g.Name] = st
	h.publishLocked(event{"gateway", st})
}

// logFiles lists the receipts logs under the receipts directories.
func (h *hub) logFiles() []string {
	var out []string
	for _, dir := range h.o.ReceiptsDirs {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // gone, or not ours to read: skip
			}
			if d.Type().IsRegular() && strings.HasSuffix(p, ".jsonl") {
				out = append(out, p)
			}
			return nil
		})
	}
	sort.Strings(out)
	return out
}

// tail publishes the records appended to the receipts logs: the last of
// those there when it starts, then every record appended or in a log that
// appears. Each is a "decision" event and joins the recent decisions, both
// under h.mu, so a page gets every record once: in its backlog if it
// subscribed after the record was read, as an event if before (a page can
// open before the first pass).
func (h *hub) tail(ctx context.Context) {
	poll := h.o.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	offsets := map[string]int64{}
	first := true
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		for _, f := range h.logFiles() {
			off, known := offsets[f]
			if !known && first {
				off = -1 // the last records only
			}
			offsets[f] = h.readNew(f, off)
		}
		first = false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readNew reads the complete records of log f from off (-1: the last
// records), adds them to the recent decisions and publishes them. It
// returns the offset to read from next.
func (h *hub) readNew(f string, off int64) int64 {
	fh, err := os.Open(f)
	if err != nil {
		return off
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return off
	}
	if off > fi.Size() {
		off = 0 // replaced
	}
	if off < 0 {
		off = max(0, fi.Size()-64<<10)
	}
	if off == fi.Size() {
		return off
	}
	b, err := io.ReadAll(io.NewSectionReader(fh, off, min(fi.Size()-off, 16<<20)))
	if err != nil {
		return off
	}
	// Up to the last complete line; a partial line waits for its end.
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return off
	}
	next := off + int64(end) + 1
	b = b[:end+1]
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	name := h.logName(f)
	h.mu.Lock()
	defer h.mu.Unlock()
	var read []decisionView
	for sc.Scan() {
		var rec receipts.Record
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Decision == "" {
			continue // a cut first line, or not a decision
		}
		read = append(read, decisionView{Log: name, Record: rec})
	}
	// The last recentDecisions only: a page wants what is recent, and a
	// burst larger than its channel would drop it.
	read = read[max(0, len(read)-recentDecisions):]
	h.recent = append(h.recent, read...)
	h.recent = h.recent[max(0, len(h.recent)-recentDecisions):]
	for _, d := range read {
		h.publishLocked(event{"decision", d})
	}
	return next
}

// logName is f relative to its receipts directory.
func (h *hub) logName(f string) string {
	for _, dir := range h.o.ReceiptsDirs {
		if rel, err := filepath.Rel(dir, f); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return f
}

// receiptsLogs verifies each receipts log (again only when it changed).
func (h *hub) receiptsLogs() ([]receiptsLog, error) {
	out := []receiptsLog{}
	var key ed25519.PublicKey
	if h.o.ReceiptsKeyFile != "" {
		k, err := receipts.LoadPublicKey(h.o.ReceiptsKeyFile)
		switch {
		case err == nil:
			key = k
		case !errors.Is(err, fs.ErrNotExist):
			return out, err
		}
	}
	for _, f := range h.logFiles() {
		st, ok := stampOf(f)
		if !ok {
			continue
		}
		h.mu.Lock()
		v, ok := h.verified[f]
		h.mu.Unlock()
		if !ok || v.stamp != st || v.signed != (key != nil) {
			v = verifiedLog{stamp: st, signed: key != nil, log: verify(f, key)}
			v.log.Path = h.logName(f)
			h.mu.Lock()
			h.verified[f] = v
			h.mu.Unlock()
		}
		out = append(out, v.log)
	}
	return out, nil
}

// verify checks one log as `vak receipts ls` does.
func verify(f string, pub ed25519.PublicKey) receiptsLog {
	s := receipts.Summarize(f, pub)
	return receiptsLog{Records: s.Records, First: s.First, Last: s.Last, Verified: s.Problem == "", Signed: s.Signed, Problem: s.Problem}
}
