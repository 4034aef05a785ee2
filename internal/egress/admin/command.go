package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Commands are the operations Command runs, as `vak gateway` names its
// subcommands.
var Commands = []string{"reload", "revoke", "status", "env"}

// Command runs the operation name (one of Commands) on the gateway and
// writes its result to w: a confirmation, the status as indented JSON, or
// the placeholder environment as sorted NAME=placeholder lines. A gateway
// that is not running is ErrNotRunning (errclass.Unavailable).
func (c *Client) Command(ctx context.Context, name string, w io.Writer) error {
	switch name {
	case "reload":
		if err := c.Reload(ctx); err != nil {
			return err
		}
		fmt.Fprintln(w, "reloaded")
	case "revoke":
		n, err := c.Revoke(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "reloaded; closed %d connection(s) the policy now denies\n", n)
	case "status":
		raw, err := c.Status(ctx)
		if err != nil {
			return err
		}
		var v any
		if json.Unmarshal(raw, &v) == nil {
			raw, _ = json.MarshalIndent(v, "", "  ")
		}
		fmt.Fprintf(w, "%s\n", raw)
	case "env":
		env, err := c.Env(ctx)
		if err != nil {
			return err
		}
		var names []string
		for k := range env {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			fmt.Fprintf(w, "%s=%s\n", k, env[k])
		}
	default:
		return fmt.Errorf("admin: unknown command %q (want one of %v)", name, Commands)
	}
	return nil
}
