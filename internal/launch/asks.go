package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"vak/internal/config"
	"vak/internal/egress/admin"
	"vak/internal/egress/asks"
	"vak/internal/egress/gateway"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/paths"
	"vak/internal/proxynet"
)

// AskAnswer is what answerAsk did.
type AskAnswer struct {
	Answer asks.Answer
	// ConfigFile is the user config a rule was added to ("": none).
	ConfigFile string
}

// answerAsk answers the pending ask id of the gateway c talks to: allow
// (scope asks.Once, asks.Run or asks.Always) or deny; always adds the
// answer as a rule to the trusted user config userConfig (empty: the
// default one; never a project config) and reloads the gateway, so later
// requests like it are decided by that rule, also after a restart. The
// rule: the ask's host and port, its method, and its path up to the last
// '/' (the directory of what was asked for).
//
// via names the channel an answer was relayed from ("": none), for the
// receipts.
func answerAsk(ctx context.Context, c *admin.Client, userConfig, id string, allow, always bool, scope asks.Scope, via string) (AskAnswer, error) {
	var res AskAnswer
	if !always {
		a, err := c.AnswerAskVia(ctx, id, allow, scope, "", via)
		res.Answer = a
		return res, err
	}
	list, err := c.Asks(ctx)
	if err != nil {
		return res, err
	}
	var k *asks.Ask
	for i := range list {
		if list[i].ID == id {
			k = &list[i]
		}
	}
	if k == nil {
		return res, errclass.Wrap(errclass.Invalid, fmt.Errorf("%w: %q (vak gateway asks lists them)", asks.ErrNoSuchAsk, id))
	}
	verb := "deny"
	if allow {
		verb = "allow"
	}
	prefix := "" // "OPTIONS *": any path
	if strings.HasPrefix(k.Path, "/") {
		prefix = k.Path[:strings.LastIndex(k.Path, "/")+1]
	}
	rule := config.AddedRule{
		Name:    "asked " + id + ": " + k.Host,
		Comment: fmt.Sprintf("added by `vak gateway %s %s --always` on %s, answering %s %s:%d%s", verb, id, time.Now().UTC().Format(time.RFC3339), k.Method, k.Host, k.Port, k.Path),
		Deny:    !allow, Host: k.Host, Port: k.Port, Method: k.Method, PathPrefix: prefix,
	}
	file, err := config.AddRule(userConfig, rule)
	if err != nil {
		return res, errclass.Wrap(errclass.Config, err)
	}
	res.ConfigFile = file
	rerr := c.Reload(ctx)
	if allow {
		scope = asks.Always
	}
	res.Answer, err = c.AnswerAskVia(ctx, id, allow, scope, rule.Name, via)
	if rerr != nil {
		err = errors.Join(err, fmt.Errorf("the rule is in %s, but the gateway did not reload: %w (vak gateway reload)", file, rerr))
	}
	return res, err
}

// workspaceGatewayAsk runs the ask command args (`asks`, `allow ID`, ...)
// against the gateway container of the docker-backed workspace dir, whose
// admin socket is in the container's volume: it runs there, through the
// engine, and its output comes to out and errOut.
func workspaceGatewayAsk(ctx context.Context, dir string, out, errOut io.Writer, args ...string) error {
	ws, err := paths.CanonicalWorkspace(dir)
	if err != nil {
		return errclass.Wrap(errclass.Invalid, err)
	}
	eng, err := engine.New()
	if err != nil {
		return err
	}
	defer eng.Close()
	err = proxynet.ExecGateway(ctx, eng, ws, out, errOut, args...)
	var ee *engine.ExitError
	switch {
	case errors.Is(err, proxynet.ErrNoGateway):
		return errclass.Wrap(errclass.Unavailable, err)
	case errors.As(err, &ee):
		// The command in the container said why on errOut.
		return fmt.Errorf("vak gateway %s in the gateway of %s: exit status %d", args[0], ws, ee.Code)
	}
	return err
}

// AskCommand is one of `vak gateway asks|allow|deny`.
type AskCommand struct {
	// Socket is the --socket flag (gateway.AskSocket); Workspace, when set,
	// picks the gateway container of that docker-backed workspace instead.
	Socket, Workspace string
	// UserConfig is the --config flag (where --always writes).
	UserConfig string
	// Follow: asks --follow; JSON: asks --json (the list as a JSON array,
	// or each event as a JSON line).
	Follow, JSON bool
	// ID, Allow, Scope, Always and Via are an answer's.
	ID     string
	Allow  bool
	Scope  asks.Scope
	Always bool
	Via    string
}

// ListAsksReport lists the pending asks of the gateway c names to out, or
// with Follow prints them and every change until ctx ends.
func ListAsksReport(ctx context.Context, c AskCommand, out, errOut io.Writer) error {
	if c.Workspace != "" {
		args := []string{"asks"}
		if c.Follow {
			args = append(args, "--follow")
		}
		if c.JSON {
			args = append(args, "--json")
		}
		return workspaceGatewayAsk(ctx, c.Workspace, out, errOut, args...)
	}
	cl, err := askClient(c.Socket)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	if c.Follow {
		return cl.FollowAsks(ctx, func(e asks.Event) error {
			if c.JSON {
				return enc.Encode(e)
			}
			return asks.WriteEvent(out, e)
		})
	}
	list, err := cl.Asks(ctx)
	switch {
	case err != nil:
		return err
	case c.JSON:
		return enc.Encode(append([]asks.Ask{}, list...))
	}
	return asks.WriteTable(out, list, time.Now())
}

// AnswerAskReport answers the ask c.ID (answerAsk) and prints what it
// did to out.
func AnswerAskReport(ctx context.Context, c AskCommand, out, errOut io.Writer) error {
	if c.Workspace != "" {
		return answerVia(ctx, c, fmt.Sprintf("docker exec by host uid %d", os.Getuid()), out, errOut)
	}
	cl, err := askClient(c.Socket)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := answerAsk(ctx, cl, c.UserConfig, c.ID, c.Allow, c.Always, c.Scope, c.Via)
	if res.ConfigFile != "" {
		fmt.Fprintf(out, "rule %q added to %s\n", res.Answer.Rule, res.ConfigFile)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ask %s: %s\n", c.ID, res.Answer.Summary())
	return nil
}

func askClient(flag string) (*admin.Client, error) {
	sock, err := gateway.AskSocket(flag)
	if err != nil {
		return nil, err
	}
	return admin.NewClient(sock), nil
}

// answerVia answers c.ID in the gateway container of c.Workspace, naming
// via as the channel in the receipts.
func answerVia(ctx context.Context, c AskCommand, via string, out, errOut io.Writer) error {
	if c.Always {
		return errclass.Wrap(errclass.Invalid, errors.New("--always with --workspace is not built yet: answer with --run (or --once) and add the rule to [network] rules of the user config yourself"))
	}
	args := []string{"deny", c.ID, "--via", via}
	if c.Allow {
		args[0] = "allow"
		args = append(args, "--"+string(c.Scope))
	}
	return workspaceGatewayAsk(ctx, c.Workspace, out, errOut, args...)
}
