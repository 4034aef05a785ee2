package launch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"vak/internal/config"
	"vak/internal/egress/admin"
	"vak/internal/egress/asks"
	"vak/internal/egress/gateway"
	"vak/internal/egress/ondemand"
	"vak/internal/egress/policy"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/netpolicy"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/receipts"
	"vak/internal/ui"
)

// UICommand is `vak ui`.
type UICommand struct {
	// Listen is the loopback address (--listen; "": a free port).
	Listen string
	// Sockets are more gateways' admin sockets to follow (--socket).
	Sockets []string
	// Out receives the address to open. (The page's refusals and answers
	// go to the request's Progress; its UserConfig has the rules shown,
	// and is where an "always" answer writes.)
	Out io.Writer
	// Ready, when set, also receives the address.
	Ready func(url string)
}

// UI serves `vak ui` until ctx ends: the gateways followed are the
// on-demand one of native proxied runs, the standalone `vak gateway` and
// c.Sockets; the receipts logs are those under vak's state directory.
func UI(ctx context.Context, req Request, c UICommand) error {
	state, err := paths.StateDir()
	if err != nil {
		return errclass.Wrap(errclass.Internal, err)
	}
	o := ui.Options{
		Listen: c.Listen,
		Gateways: []ui.Gateway{
			{Name: "native", Socket: ondemand.Layout(state).Admin},
			{Name: "standalone", Socket: gateway.DefaultAdminSocket(state)},
		},
		ReceiptsDirs: []string{filepath.Join(state, "receipts"), filepath.Join(state, ondemand.DirName, "receipts")},
		Log:          req.Progress,
	}
	for i, s := range c.Sockets {
		o.Gateways = append(o.Gateways, ui.Gateway{Name: fmt.Sprintf("socket%d", i+1), Socket: s})
	}
	o.ReceiptsKeyFile = filepath.Join(gateway.ReceiptsKeyDir(state), receipts.PubKeyFile)
	o.Discover = dockerGateways
	o.Rules = func() (ui.Rules, error) { return uiRules(req.UserConfig) }
	o.Sessions = func(ctx context.Context) ([]ui.Session, error) { return uiSessions(ctx, req) }
	via := fmt.Sprintf("vak ui, pid %d", os.Getpid())
	o.Answer = func(ctx context.Context, gw ui.Gateway, id string, allow, always bool, scope asks.Scope) (string, error) {
		if gw.Workspace != "" {
			return answerInContainer(ctx, gw.Workspace, id, allow, always, scope, via)
		}
		res, err := answerAsk(ctx, admin.NewClient(gw.Socket), req.UserConfig, id, allow, always, scope, via)
		msg := ""
		if res.ConfigFile != "" {
			msg = fmt.Sprintf("rule %q added to %s; ", res.Answer.Rule, res.ConfigFile)
		}
		if err != nil {
			return "", fmt.Errorf("%s%w", msg, err)
		}
		return msg + fmt.Sprintf("ask %s: %s", id, res.Answer.Summary()), nil
	}
	o.Ready = func(url string) {
		fmt.Fprintf(c.Out, "vak ui: open %s\n", url)
		fmt.Fprintln(c.Out, "vak ui: the address carries this start's token: keep it to yourself; Ctrl-C stops the page")
		if c.Ready != nil {
			c.Ready(url)
		}
	}
	err = ui.Serve(ctx, o)
	if errors.Is(err, ui.ErrNotLoopback) || errors.Is(err, errors.ErrUnsupported) {
		return errclass.Wrap(errclass.Invalid, err)
	}
	return err
}

// uiRules is the network policy of the user config file, as the page
// shows it.
func uiRules(userConfig string) (ui.Rules, error) {
	load, file, err := config.GatewayLoader("", userConfig, func(string) {})
	if err != nil {
		return ui.Rules{}, err
	}
	cfg, err := load()
	if err != nil {
		return ui.Rules{}, err
	}
	out := ui.Rules{File: file, Mode: string(cfg.Mode), Ask: cfg.Ask, Rules: []ui.Rule{}}
	if cfg.Policy == nil {
		return out, nil
	}
	for _, r := range cfg.Policy.Rules() {
		out.Rules = append(out.Rules, uiRule(r))
	}
	return out, nil
}

func uiRule(r policy.Rule) ui.Rule {
	var hosts, ports, paths []string
	for _, h := range r.Hosts {
		hosts = append(hosts, h.String())
	}
	for _, c := range r.CIDRs {
		hosts = append(hosts, c.String())
	}
	for _, p := range r.Ports {
		ports = append(ports, fmt.Sprint(p))
	}
	for _, p := range r.Paths {
		paths = append(paths, p.String())
	}
	return ui.Rule{Name: r.Name, Action: r.Action.String(), Proto: r.Proto.String(), Hosts: strings.Join(hosts, " "),
		Methods: strings.Join(r.Methods, " "), Ports: strings.Join(ports, " "), Paths: strings.Join(paths, " ")}
}

// uiSessions lists the docker-backed sessions (none without a Docker
// engine: the error says why).
func uiSessions(ctx context.Context, req Request) ([]ui.Session, error) {
	list, err := Sessions(req, nil).List(ctx)
	if err != nil {
		return nil, err
	}
	var out []ui.Session
	for _, s := range list {
		if s.ID == "" {
			continue // a warm-pool container
		}
		network := netpolicy.None
		if s.Labels[proxynet.LabelClientOf] != "" {
			network = netpolicy.Proxied
		}
		out = append(out, ui.Session{ID: s.ID, Workspace: s.Workspace, Backend: "docker", Network: string(network),
			State: s.State, Created: s.Created.Format(time.RFC3339)})
	}
	return out, nil
}

// dockerGateways are the gateway containers of the running docker-backed
// workspaces, followed through the engine (their admin sockets are in
// their volumes); none without an engine.
func dockerGateways(ctx context.Context) ([]ui.Gateway, error) {
	eng, err := engine.New()
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	list, err := proxynet.RunningGateways(ctx, eng)
	if err != nil {
		return nil, err
	}
	var out []ui.Gateway
	for _, ws := range list {
		out = append(out, ui.Gateway{Name: "docker-" + proxynet.Key(ws), Workspace: ws,
			Follow: func(ctx context.Context, fn func(asks.Event) error) error { return followInContainer(ctx, ws, fn) }})
	}
	return out, nil
}

// followInContainer follows the asks of the gateway container of ws:
// `vak gateway asks --follow --json` there, one event per line.
func followInContainer(ctx context.Context, ws string, fn func(asks.Event) error) error {
	eng, err := engine.New()
	if err != nil {
		return err
	}
	defer eng.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	var errOut strings.Builder
	done := make(chan error, 1)
	go func() {
		err := proxynet.ExecGateway(ctx, eng, ws, pw, &limitedWriter{w: &errOut, n: 4096}, "asks", "--follow", "--json")
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ferr error
	for sc.Scan() {
		var e asks.Event
		if ferr = json.Unmarshal(sc.Bytes(), &e); ferr != nil {
			ferr = fmt.Errorf("the asks of the gateway of %s: %w", ws, ferr)
			break
		}
		if ferr = fn(e); ferr != nil {
			break
		}
	}
	cancel()
	pr.Close()
	err = <-done
	if ferr != nil {
		return ferr
	}
	if err == nil {
		err = errors.New("the gateway ended the stream of asks")
	}
	if msg := strings.TrimSpace(errOut.String()); msg != "" {
		err = fmt.Errorf("%w: %s", err, msg)
	}
	return err
}

// answerInContainer answers ask id in the gateway container of ws, as
// `vak gateway allow|deny -w` does.
func answerInContainer(ctx context.Context, ws, id string, allow, always bool, scope asks.Scope, via string) (string, error) {
	var out, errOut strings.Builder
	c := AskCommand{Workspace: ws, ID: id, Allow: allow, Scope: scope, Always: always}
	err := answerVia(ctx, c, fmt.Sprintf("%s, docker exec by host uid %d", via, os.Getuid()), &out, &errOut)
	if err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return "", err
	}
	return strings.TrimSpace(out.String()), nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
