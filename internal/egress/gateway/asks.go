package gateway

import (
	"context"
	"errors"
	"os"
	"time"

	"vak/internal/egress/asks"
	"vak/internal/egress/ondemand"
	"vak/internal/errclass"
	"vak/internal/paths"
)

// The gateway's side of asks (internal/egress/asks): with network.ask on,
// the proxy holds a request no rule allows in the registry until a person
// answers over the admin socket.

// ErrAskingOff is the answer of the ask API when network.ask is off.
var ErrAskingOff = errors.New("asking is off: set ask = true under [network] in the user config to hold requests no rule allows until you answer")

// asking is the registry when network.ask is on, else nil (Proxy.Asks).
func (g *Gateway) asking() *asks.Registry {
	if cfg := g.cfg.Load(); cfg == nil || !cfg.Ask {
		return nil
	}
	return g.asks.Load()
}

// applyAsk keeps a registry with the configured timeout: a changed
// timeout takes a new one (asks pending in the old keep their own).
func (g *Gateway) applyAsk(on bool, timeout time.Duration) {
	if !on {
		return
	}
	if cur := g.asks.Load(); cur != nil && cur.Timeout() == timeout {
		return
	}
	g.asks.Store(asks.New(asks.Options{Timeout: timeout}))
}

// Asks lists the pending asks.
func (g *Gateway) Asks() ([]asks.Ask, error) {
	reg := g.asking()
	if reg == nil {
		return nil, ErrAskingOff
	}
	return reg.Pending(), nil
}

// FollowAsks streams the pending asks, then every change, to fn until ctx
// ends or fn fails.
func (g *Gateway) FollowAsks(ctx context.Context, fn func(asks.Event) error) error {
	reg := g.asking()
	if reg == nil {
		return ErrAskingOff
	}
	return reg.Follow(ctx, fn)
}

// AnswerAsk answers a pending ask.
func (g *Gateway) AnswerAsk(id string, a asks.Answer) error {
	reg := g.asking()
	if reg == nil {
		return ErrAskingOff
	}
	return reg.Answer(id, a)
}

// AskSocket is the admin socket the ask commands talk to: flag when set;
// else the on-demand gateway's (the one native proxied runs share) when
// it is running; else the standalone gateway's default (AdminSocket).
func AskSocket(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	state, err := paths.StateDir()
	if err != nil {
		return "", errclass.Wrap(errclass.Internal, err)
	}
	if sock := ondemand.Layout(state).Admin; socketExists(sock) {
		return sock, nil
	}
	return DefaultAdminSocket(state), nil
}

func socketExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}
