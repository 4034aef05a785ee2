package mcp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/agentnet"
	"vak/internal/worker/wire"
)

// AgentNetToolName is the brokered workspace network's tool.
const AgentNetToolName = "agent_network"

// agentNet is the server's registration with the agentnet broker. The
// task token lives in task, in the trusted server process: no tool result,
// error or log line carries it.
type agentNet struct {
	task   *agentnet.Task
	mu     sync.Mutex
	listed bool
}

// AttachAgentNet registers the server's workspace with the broker behind
// client (started on demand through ensure, if set) and lists the
// agent_network tool while the registration is live with at least one
// live edge. Call RefreshAgentNet (WatchAgentNet, or after a policy
// change) to re-check; Close unregisters.
func (s *Server) AttachAgentNet(ctx context.Context, client *agentnet.Client, ensure func(context.Context) error) error {
	task := &agentnet.Task{Client: client, Workspace: s.opts.Workspace, Ensure: ensure}
	if _, err := task.Register(ctx); err != nil {
		return fmt.Errorf("agent network: %w", err)
	}
	s.an = &agentNet{task: task}
	_, err := s.RefreshAgentNet(ctx)
	return err
}

// RefreshAgentNet renews the token when it is due (registering again with
// a restarted broker, which ensure starts when none answers) and adds or
// removes the agent_network tool to match the broker's view (the SDK tells
// clients that the tool list changed). It reports whether the tool is
// listed.
func (s *Server) RefreshAgentNet(ctx context.Context) (bool, error) {
	an := s.an
	if an == nil {
		return false, nil
	}
	an.mu.Lock()
	defer an.mu.Unlock()
	live, err := an.task.Refresh(ctx)
	if err != nil {
		live = false
	}
	s.toolsMu.Lock()
	defer s.toolsMu.Unlock()
	switch {
	case live && !an.listed:
		s.addAgentNet()
		an.listed = true
		s.tools = append(s.tools, AgentNetToolName)
	case !live && an.listed:
		s.srv.RemoveTools(AgentNetToolName)
		an.listed = false
		s.tools = slices.DeleteFunc(s.tools, func(n string) bool { return n == AgentNetToolName })
	}
	return an.listed, err
}

// WatchAgentNet calls RefreshAgentNet every interval until ctx ends.
func (s *Server) WatchAgentNet(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.RefreshAgentNet(ctx); err != nil {
				s.opts.Log.Warn("agent network refresh", "err", err)
			}
		}
	}
}

// AgentNetLeaks reports whether data carries the server's task token or a
// part of it (tests scan every tool result with it).
func (s *Server) AgentNetLeaks(data []byte) bool {
	return s.an != nil && s.an.task.Leaks(data)
}

// closeAgentNet unregisters (the token is revoked at the broker).
func (s *Server) closeAgentNet() {
	if s.an == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.an.task.Close(ctx)
}

// AgentNetInput are agent_network's arguments.
type AgentNetInput struct {
	Op          string `json:"op" jsonschema:"peers, send, receive, request or reply"`
	Peer        string `json:"peer,omitempty" jsonschema:"send/request: the peer's id or workspace path (from peers)"`
	Topic       string `json:"topic,omitempty" jsonschema:"send/request/receive: the topic (1..128 bytes)"`
	Message     string `json:"message,omitempty" jsonschema:"send/request/reply: the message text (bounded by the edge's quota)"`
	Correlation string `json:"correlation,omitempty" jsonschema:"reply: the request's correlation id; receive: wait for the reply to this request"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"receive: seconds to wait for a message (0..60)"`
}

// AgentNetPeer is one reachable workspace.
type AgentNetPeer struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
}

// AgentNetMessage is a received message.
type AgentNetMessage struct {
	ID          string `json:"id"`
	From        string `json:"from" jsonschema:"the sender's workspace id"`
	Topic       string `json:"topic"`
	Kind        string `json:"kind" jsonschema:"message, request or reply"`
	Correlation string `json:"correlation,omitempty" jsonschema:"set on requests (pass it to reply) and replies"`
	Message     string `json:"message"`
}

// AgentNetOutput is agent_network's result.
type AgentNetOutput struct {
	Peers       []AgentNetPeer   `json:"peers,omitempty"`
	ID          string           `json:"id,omitempty" jsonschema:"send: the message id"`
	Correlation string           `json:"correlation,omitempty" jsonschema:"request: the correlation id to receive the reply with"`
	Message     *AgentNetMessage `json:"message,omitempty"`
	TimedOut    bool             `json:"timed_out,omitempty" jsonschema:"receive: no message arrived within wait_seconds"`
}

func (s *Server) addAgentNet() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        AgentNetToolName,
		Annotations: annotations("Talk to agents of approved peer workspaces", false, false),
		Description: `Exchange messages with agents working in other workspaces that both your user's policy and theirs approve (the brokered workspace network). Operations: peers (who you can reach), send (peer, topic, message), receive (topic, wait_seconds; optionally correlation), request (peer, topic, message -> correlation id), reply (correlation, message). Messages are text, bounded in size, rate and queue depth per edge; the network can be revoked at any time.`,
	}, func(ctx context.Context, _ *sdk.CallToolRequest, in AgentNetInput) (*sdk.CallToolResult, AgentNetOutput, error) {
		out, err := s.agentNetCall(ctx, in)
		if err != nil {
			return nil, AgentNetOutput{}, err
		}
		return nil, out, nil
	})
}

func (s *Server) agentNetCall(ctx context.Context, in AgentNetInput) (AgentNetOutput, error) {
	r, err := s.an.task.Do(ctx, wire.AgentNetworkArgs{Op: in.Op, Peer: in.Peer, Topic: in.Topic, Message: in.Message, Correlation: in.Correlation, WaitSeconds: in.WaitSeconds})
	if err != nil {
		return AgentNetOutput{}, err
	}
	out := AgentNetOutput{ID: r.ID, Correlation: r.Correlation, TimedOut: r.TimedOut}
	for _, p := range r.Peers {
		out.Peers = append(out.Peers, AgentNetPeer{ID: p.ID, Workspace: p.Workspace})
	}
	if m := r.Message; m != nil {
		out.Message = &AgentNetMessage{ID: m.ID, From: m.From, Topic: m.Topic, Kind: m.Kind, Correlation: m.Correlation, Message: m.Message}
	}
	return out, nil
}
