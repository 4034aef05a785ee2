package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/egress/admin"
	"vak/internal/egress/ca"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/gateway"
	"vak/internal/egress/proxy"
	"vak/internal/egress/sandcat"
	"vak/internal/netfence"
	"vak/internal/paths"
)

type gatewayFlags struct {
	listen, transparent, mode, dns, socket, receipts, session string
	file                                                      string
	// noForwarding refuses to start unless IP forwarding is off in this
	// network namespace (the gateway container of a proxied topology must
	// never route packets between its networks).
	noForwarding bool
	// canary is the fence self-test canary's address (proxied topology).
	canary string
	// procs is the gateway process's GOMAXPROCS (0: the runtime's).
	procs int
}

// CanaryFile, in the gateway's state dir, records what reached the fence
// self-test canary directly.
const CanaryFile = "fence-canary.log"

func (a *app) newGatewayCmd() *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the egress gateway (policy proxy, secrets, DNS, receipts)",
		Long: `Run the egress gateway: the only way out of a "proxied" sandbox.

It serves an explicit proxy (HTTP CONNECT and absolute-form; for HTTPS_PROXY),
a transparent listener (PROXY protocol v2 from the sandbox forwarder, or
SO_ORIGINAL_DST for a local REDIRECT), a policy-aware DNS server, and an admin
unix socket. It intercepts TLS with a per-installation CA kept in vak's state
directory, decides every request on names under [network] rules, swaps secret
placeholders for real values only toward bound hosts, redacts secrets from
responses, and writes one hash-chained receipt per decision.

Configuration comes from [network], [gateway] and [secrets] in the trusted user
config (--config), or from a standalone file (--gateway-config). SIGHUP or
'vak gateway reload' re-reads it without dropping connections; 'vak gateway
revoke' also closes connections the new policy denies.

Listener flags override the config; "-" disables a listener.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.gatewayRun(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "", "explicit proxy address (default from [gateway] listen, else "+egressconfig.DefaultListen+")")
	fl.StringVar(&f.transparent, "transparent", "", "transparent listener address (default from [gateway] transparent_listen; off when unset)")
	fl.StringVar(&f.mode, "transparent-mode", "proxy", "how the transparent listener learns destinations: proxy (PROXY v2 header) or redirect (SO_ORIGINAL_DST)")
	fl.StringVar(&f.dns, "dns", "", "DNS server address, UDP and TCP (default from [gateway] dns_listen; off when unset)")
	fl.StringVar(&f.receipts, "receipts", "", "receipts log (default <state>/receipts/<session>.jsonl)")
	fl.StringVar(&f.session, "session", "", "session name for receipts (default random)")
	fl.StringVar(&f.file, "gateway-config", "", "standalone gateway config file with only [network], [gateway], [secrets]")
	fl.BoolVar(&f.noForwarding, "require-no-forwarding", false, "refuse to start unless IP forwarding is off in this network namespace")
	fl.StringVar(&f.canary, "canary", "", "fence self-test canary address (TCP and UDP; arrivals are recorded in <state>/"+CanaryFile+")")
	fl.MarkHidden("canary")
	fl.IntVar(&f.procs, "procs", gateway.DefaultProcs, "threads running Go code (GOMAXPROCS; 0: one per CPU); the GOMAXPROCS environment variable wins")
	a.socketFlag(cmd, &f.socket)
	cmd.AddCommand(
		a.newGatewayAdminCmd("reload", "Reload the running gateway's configuration (connections stay up)", &f.socket),
		a.newGatewayAdminCmd("revoke", "Reload and close existing connections the new policy denies", &f.socket),
		a.newGatewayAdminCmd("status", "Show the running gateway's status (JSON)", &f.socket),
		a.newGatewayAdminCmd("env", "Print the placeholder environment for the sandbox (NAME=placeholder)", &f.socket),
		a.newGatewayCACmd(),
		a.newImportSandcatCmd(),
		a.newGatewayPresetsCmd(),
		a.newGatewayServeNativeCmd(),
	)
	return cmd
}

func (a *app) socketFlag(cmd *cobra.Command, dst *string) {
	cmd.PersistentFlags().StringVar(dst, "socket", "", "admin socket (default <state>/gateway.sock)")
}

// gatewayLoader returns the config loader the gateway uses for start and
// reloads.
func (a *app) gatewayLoader(file string) (func() (*egressconfig.Config, error), string, error) {
	if file != "" {
		return func() (*egressconfig.Config, error) { return egressconfig.LoadFile(file) }, file, nil
	}
	userFile := a.userConfig
	if userFile == "" {
		f, err := paths.UserConfigFile()
		if err != nil {
			return nil, "", err
		}
		userFile = f
	}
	return func() (*egressconfig.Config, error) {
		// The gateway reads only the trusted user config: a project config
		// can never widen network access or add secrets.
		cfg, err := config.Load(config.Options{UserFile: a.userConfig})
		if err != nil {
			return nil, err
		}
		for _, w := range cfg.Warnings {
			a.warnf("%s", w)
		}
		if cfg.Egress == nil {
			return egressconfig.Validate(userFile, nil)
		}
		return cfg.Egress, nil
	}, userFile, nil
}

func (a *app) gatewayRun(ctx context.Context, f gatewayFlags) error {
	load, cfgFile, err := a.gatewayLoader(f.file)
	if err != nil {
		return exit(ExitConfig, err)
	}
	var mode proxy.TransparentMode
	switch f.mode {
	case "proxy":
		mode = proxy.ProxyProtocol
	case "redirect":
		mode = proxy.OriginalDst
	default:
		return exit(ExitUsage, fmt.Errorf("--transparent-mode %q: want proxy or redirect", f.mode))
	}
	if f.procs < 0 {
		return exit(ExitUsage, fmt.Errorf("--procs %d: want 0 (one per CPU) or a positive number", f.procs))
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return exit(ExitInternal, err)
	}
	if f.canary != "" {
		c, err := netfence.ListenCanary(f.canary, filepath.Join(state, CanaryFile))
		if err != nil {
			return exit(ExitUnavailable, fmt.Errorf("gateway: %w", err))
		}
		defer c.Close()
	}
	g, err := gateway.New(gateway.Options{
		Load:              load,
		ConfigFile:        cfgFile,
		StateDir:          state,
		Session:           f.session,
		Listen:            f.listen,
		TransparentListen: f.transparent,
		TransparentMode:   mode,
		DNSListen:         f.dns,
		AdminSocket:       f.socket,
		Receipts:          f.receipts,
		HandleSIGHUP:      true,
		// Checked before anything opens; failing it exits 69.
		RequireNoForwarding: f.noForwarding,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(a.stdio.Err, "vak gateway: "+format+"\n", args...)
		},
	})
	if err != nil {
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, egressconfig.ErrInvalid) {
			return exit(ExitConfig, err)
		}
		return exit(ExitUnavailable, err)
	}
	if _, err := gateway.SetProcs(f.procs); err != nil {
		g.Close()
		return exit(ExitUsage, err)
	}
	st := g.Status().(gateway.Status)
	ad := g.Addrs()
	fmt.Fprintf(a.stdio.Err, "vak gateway: session %s, %d rule(s), %d secret(s)\n", st.Session, st.Rules, len(st.Secrets))
	for _, l := range [][2]string{{"proxy", ad.Proxy}, {"transparent", ad.Transparent}, {"dns", ad.DNS}, {"admin", ad.Admin}} {
		if l[1] != "" {
			fmt.Fprintf(a.stdio.Err, "vak gateway: %-11s %s\n", l[0], l[1])
		}
	}
	fmt.Fprintf(a.stdio.Err, "vak gateway: CA %s (sha256 %s)\nvak gateway: receipts %s\n", st.CACertFile, st.CAFingerprint, st.ReceiptsFile)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := g.Run(ctx); err != nil {
		return exit(ExitFailure, err)
	}
	return nil
}

func (a *app) adminClient(socket string) (*admin.Client, error) {
	if socket == "" {
		state, err := paths.StateDir()
		if err != nil {
			return nil, err
		}
		socket = gateway.DefaultAdminSocket(state)
	}
	return admin.NewClient(socket), nil
}

func (a *app) newGatewayAdminCmd(name, short string, socket *string) *cobra.Command {
	return &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.adminClient(*socket)
			if err != nil {
				return exit(ExitInternal, err)
			}
			ctx := cmd.Context()
			fail := func(err error) error {
				if errors.Is(err, admin.ErrNotRunning) {
					return exit(ExitUnavailable, err)
				}
				return exit(ExitFailure, err)
			}
			switch name {
			case "reload":
				if err := c.Reload(ctx); err != nil {
					return fail(err)
				}
				fmt.Fprintln(a.stdio.Out, "reloaded")
			case "revoke":
				n, err := c.Revoke(ctx)
				if err != nil {
					return fail(err)
				}
				fmt.Fprintf(a.stdio.Out, "reloaded; closed %d connection(s) the policy now denies\n", n)
			case "status":
				raw, err := c.Status(ctx)
				if err != nil {
					return fail(err)
				}
				var v any
				if json.Unmarshal(raw, &v) == nil {
					raw, _ = json.MarshalIndent(v, "", "  ")
				}
				fmt.Fprintf(a.stdio.Out, "%s\n", raw)
			case "env":
				env, err := c.Env(ctx)
				if err != nil {
					return fail(err)
				}
				var names []string
				for k := range env {
					names = append(names, k)
				}
				slices.Sort(names)
				for _, k := range names {
					fmt.Fprintf(a.stdio.Out, "%s=%s\n", k, env[k])
				}
			}
			return nil
		},
	}
}

func (a *app) newGatewayCACmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ca",
		Short: "Print the gateway CA certificate (PEM), creating the CA on first use",
		Long: `Print the gateway's CA certificate, to be trusted inside sandboxes. The CA
key stays in vak's state directory (mode 0600) and is never printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			state, err := paths.EnsureStateDir()
			if err != nil {
				return exit(ExitInternal, err)
			}
			auth, err := ca.LoadOrCreate(gateway.CADir(state))
			if err != nil {
				return exit(ExitFailure, err)
			}
			_, err = a.stdio.Out.Write(auth.CertPEM())
			return err
		},
	}
}

func (a *app) newImportSandcatCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "import-sandcat SETTINGS.json",
		Short: "Convert a sandcat settings.json into vak [network] and [secrets] config",
		Long: `Convert a sandcat settings file (env, secrets with value/hosts, network rules
with action/host/method) into vak configuration, printed as TOML (or written
to --output with mode 0600, since it may hold secret values). Everything that
cannot be carried over exactly is reported on stderr. The conversion never
widens access: it fails when a deny rule cannot be expressed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return exit(ExitFailure, err)
			}
			res, err := sandcat.Convert(args[0], data)
			if err != nil {
				return exit(ExitFailure, err)
			}
			for _, n := range res.Notes {
				fmt.Fprintf(a.stdio.Err, "vak: note: %s\n", n)
			}
			if out == "" {
				_, err = a.stdio.Out.Write(res.TOML)
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return exit(ExitFailure, err)
			}
			if _, err := f.Write(res.TOML); err != nil {
				f.Close()
				return exit(ExitFailure, err)
			}
			return f.Close()
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the TOML to this new file (mode 0600) instead of stdout")
	return cmd
}

func (a *app) newGatewayPresetsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "presets [NAME]",
		Short: "List the built-in network presets, or print one preset's rules file",
		Long: `List the built-in network presets: versioned allow-rule sets for common
services that the trusted user config names in [network] presets, e.g.

  [network]
  policy = "proxied"
  presets = ["anthropic", "github", "npm"]

Each preset is a readable TOML file shipped with vak (NAME prints it). Presets
only allow, never carry secrets, and come after your own [[network.rules]], so
a deny rule of yours wins. Model-API presets leave out endpoints that would turn
an allowed host into an exfiltration channel (file uploads); add your own rule
for those if you need them.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				p, err := egressconfig.LoadPreset(args[0])
				if err != nil {
					return exit(ExitUsage, err)
				}
				a.stdio.Out.Write(p.Source)
				return nil
			}
			ps, err := egressconfig.Presets()
			if err != nil {
				return exit(ExitInternal, err)
			}
			for _, p := range ps {
				fmt.Fprintf(a.stdio.Out, "%s\t%s\n", p.Name, p.Description)
				for _, r := range p.Rules {
					line := "  allow " + strings.Join(r.Methods, ",") + " " + strings.Join(r.Hosts, " ")
					if len(r.Paths) > 0 {
						line += " paths " + strings.Join(r.Paths, " ")
					}
					fmt.Fprintln(a.stdio.Out, line)
				}
			}
			return nil
		},
	}
}
