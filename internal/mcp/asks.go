package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/egress/admin"
	"vak/internal/egress/asks"
	"vak/internal/worker/wire"
)

// Asks through MCP elicitation: while a bash call runs in a sandbox whose
// gateway asks before refusing ([network] ask = true), each new ask is
// put to the person at the client as an elicitation (a question the
// client shows its user; the model never sees or answers it), and the
// answer goes back to the gateway over its admin socket. A client that
// does not support elicitation gets none: its asks wait for `vak gateway
// allow` or time out.
//
// MCP's multi round-trip requests carry the questions: the call returns
// "input required" with one elicitation per new ask and a request state
// naming the still running command; the client asks its user and calls
// again with the answers and that state, and the call goes on waiting
// for the command (or the next ask). Clients of older protocol versions
// get the same questions as elicitation requests from the SDK.

// elicitChoices are the answers an elicitation offers, in order.
var elicitChoices = []string{"allow once", "allow while the gateway runs", "deny"}

// elicitSchema is the form of the elicitation: one choice.
var elicitSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"decision": map[string]any{"type": "string", "title": "Decision", "enum": elicitChoices},
	},
	"required": []string{"decision"},
}

// keepFinished is how long the result of a call whose command finished
// while its client was answering is kept for the client's next call.
const keepFinished = 10 * time.Minute

// canElicit reports whether the client of ss takes form elicitations.
func canElicit(ss *sdk.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return false
	}
	e := p.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil
}

// askingCall is a bash call whose command runs while its asks go to the
// client.
type askingCall struct {
	ss      *sdk.ServerSession
	timeout time.Duration
	cancel  context.CancelFunc
	done    chan struct{} // closed when res, err are set
	res     *wire.BashResult
	err     error
	newAsks chan asks.Ask // asks not yet put to the client
}

// startAskingBash runs args on w apart from the tool call's request (the
// call may return to put a question to the client and be called again),
// follows the gateway's asks, and waits.
func (s *Server) startAskingBash(ctx context.Context, ss *sdk.ServerSession, w Worker, args wire.BashArgs, timeout time.Duration) (*sdk.CallToolResult, BashOutput, error) {
	// The command outlives this request, not the server's session.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &askingCall{ss: ss, timeout: timeout, cancel: cancel, done: make(chan struct{}), newAsks: make(chan asks.Ask, 64)}
	state := newState()
	go func() {
		c.res, c.err = w.Bash(cctx, args)
		close(c.done)
		cancel()
		// A client that never calls again does not keep it forever.
		time.AfterFunc(keepFinished, func() { s.forget(state) })
	}()
	go s.followAsks(cctx, c)
	s.callsMu.Lock()
	if s.calls == nil {
		s.calls = map[string]*askingCall{}
	}
	s.calls[state] = c
	s.callsMu.Unlock()
	return s.awaitBash(ctx, state, c)
}

// followAsks queues the gateway's new asks for c until ctx ends (the
// command's context, cancelled when the command has ended).
func (s *Server) followAsks(ctx context.Context, c *askingCall) {
	seen := map[string]bool{}
	err := admin.NewClient(s.opts.AskSocket).FollowAsks(ctx, func(e asks.Event) error {
		if e.Kind == "ask" && !seen[e.Ask.ID] {
			seen[e.Ask.ID] = true
			select {
			case c.newAsks <- e.Ask:
			default: // more than the buffer: left to vak gateway allow
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.opts.Log.Warn("following the gateway's asks", "err", err)
	}
}

// awaitBash waits for c's command, or returns the asks that came
// meanwhile as questions for the client (state names c for the answer).
func (s *Server) awaitBash(ctx context.Context, state string, c *askingCall) (*sdk.CallToolResult, BashOutput, error) {
	select {
	case <-c.done:
		s.forget(state)
		return s.bashResult(c.res, c.err)(c.timeout)
	case k := <-c.newAsks:
		qs := sdk.InputRequestMap{k.ID: question(k)}
		for more := true; more; {
			select {
			case k := <-c.newAsks:
				qs[k.ID] = question(k)
			default:
				more = false
			}
		}
		return &sdk.CallToolResult{InputRequests: qs, RequestState: state}, BashOutput{}, nil
	case <-ctx.Done():
		// The client gave up on the call: so does the command.
		c.cancel()
		s.forget(state)
		return nil, BashOutput{}, ctx.Err()
	}
}

func question(k asks.Ask) *sdk.ElicitParams {
	return &sdk.ElicitParams{
		Message: fmt.Sprintf("The sandbox wants to reach %s %s:%d%s, which no network rule allows. The request waits for your answer (ask %s; the agent cannot answer this).",
			k.Method, k.Host, k.Port, k.Path, k.ID),
		RequestedSchema: elicitSchema,
	}
}

// resumeBash takes the client's answers for the call state names, relays
// them to the gateway, and waits on.
func (s *Server) resumeBash(ctx context.Context, ss *sdk.ServerSession, state string, answers sdk.InputResponseMap) (*sdk.CallToolResult, BashOutput, error) {
	s.callsMu.Lock()
	c := s.calls[state]
	s.callsMu.Unlock()
	if c == nil || c.ss != ss {
		return nil, BashOutput{}, errors.New("bash: the call this answers is unknown or over (call bash again)")
	}
	cl := admin.NewClient(s.opts.AskSocket)
	via := "MCP elicitation"
	if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
		via += " (client " + p.ClientInfo.Name + ")"
	}
	for id, r := range answers {
		res, ok := r.(*sdk.ElicitResult)
		if !ok {
			continue
		}
		allow, scope, answer := decision(res)
		if !answer {
			continue // dismissed: left to time out
		}
		if _, err := cl.AnswerAskVia(ctx, id, allow, scope, "", via); err != nil {
			s.opts.Log.Warn("answering an ask", "ask", id, "err", err)
		}
	}
	return s.awaitBash(ctx, state, c)
}

// decision is what an elicitation result answers: allow (and how far),
// deny (a declined question too), or nothing (dismissed).
func decision(res *sdk.ElicitResult) (allow bool, scope asks.Scope, answer bool) {
	switch res.Action {
	case "accept":
		switch d, _ := res.Content["decision"].(string); d {
		case elicitChoices[0]:
			return true, asks.Once, true
		case elicitChoices[1]:
			return true, asks.Run, true
		case elicitChoices[2]:
			return false, "", true
		}
	case "decline":
		return false, "", true
	}
	return false, "", false
}

// forget drops the call state names; a finished one whose client is away
// is dropped after keepFinished.
func (s *Server) forget(state string) {
	s.callsMu.Lock()
	delete(s.calls, state)
	s.callsMu.Unlock()
}

func newState() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
