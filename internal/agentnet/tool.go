package agentnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"vak/internal/worker/wire"
)

// MaxToolWait bounds an agent_network receive's wait_seconds (the tool
// call blocks).
const MaxToolWait = 60 * time.Second

// Do serves one agent_network call for the task: the operation the model
// asked for, with the task's token attached here. Results and errors name
// workspaces, ids and reasons, never a token.
func (t *Task) Do(ctx context.Context, in wire.AgentNetworkArgs) (wire.AgentNetworkResult, error) {
	var out wire.AgentNetworkResult
	if !utf8.ValidString(in.Message) {
		return out, errors.New("agent_network: message must be UTF-8 text")
	}
	var err error
	switch in.Op {
	case "peers":
		var ps []Peer
		ps, err = t.Peers(ctx)
		for _, p := range ps {
			out.Peers = append(out.Peers, wire.AgentNetworkPeer{ID: p.ID, Workspace: p.Workspace})
		}
	case "send":
		out.ID, err = t.Send(ctx, in.Peer, in.Topic, []byte(in.Message))
	case "request":
		out.Correlation, err = t.Request(ctx, in.Peer, in.Topic, []byte(in.Message))
	case "reply":
		err = t.Reply(ctx, in.Correlation, []byte(in.Message))
	case "receive":
		if in.WaitSeconds < 0 || time.Duration(in.WaitSeconds)*time.Second > MaxToolWait {
			return out, fmt.Errorf("agent_network: wait_seconds must be 0..%d", int(MaxToolWait/time.Second))
		}
		var m Message
		m, err = t.Receive(ctx, in.Topic, in.Correlation, time.Duration(in.WaitSeconds)*time.Second)
		if errors.Is(err, ErrTimeout) {
			return wire.AgentNetworkResult{TimedOut: true}, nil
		}
		if err == nil {
			out.Message = &wire.AgentNetworkMessage{ID: m.ID, From: m.From, Topic: m.Topic, Kind: m.Kind, Correlation: m.Correlation, Message: string(m.Body)}
		}
	default:
		return out, fmt.Errorf("agent_network: unknown op %q (peers, send, receive, request, reply)", in.Op)
	}
	if err != nil {
		return wire.AgentNetworkResult{}, fmt.Errorf("agent_network %s refused: %w", in.Op, err)
	}
	return out, nil
}

// Tool serves agent_network for a Task next to a worker's tools (it is a
// broker.HostTool): it is listed while the task's last refresh found it
// live with at least one live edge, and its calls run here, in the trusted
// process that holds the token, never in the worker.
type Tool struct {
	Task *Task
	live atomic.Bool
}

// Name is wire.ToolAgentNetwork.
func (t *Tool) Name() string { return wire.ToolAgentNetwork }

// Listed reports whether the last refresh found the task live.
func (t *Tool) Listed() bool { return t.live.Load() }

// Refresh refreshes the task (Task.Refresh) and the listing.
func (t *Tool) Refresh(ctx context.Context) (bool, error) {
	live, err := t.Task.Refresh(ctx)
	live = live && err == nil
	t.live.Store(live)
	return live, err
}

// Watch refreshes every interval until ctx ends.
func (t *Tool) Watch(ctx context.Context, interval time.Duration) {
	t.Task.Watch(ctx, interval, func(live bool) { t.live.Store(live) }, nil)
}

// Call decodes wire.AgentNetworkArgs (unknown fields are an error) and
// serves them (Task.Do).
func (t *Tool) Call(ctx context.Context, args json.RawMessage) (any, error) {
	var in wire.AgentNetworkArgs
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, wire.Errorf(wire.CodeProtocol, "agent_network: bad args: %v", err)
	}
	return t.Task.Do(ctx, in)
}
