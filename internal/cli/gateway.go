package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/egress/admin"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/gateway"
	"vak/internal/egress/proxy"
	"vak/internal/egress/sandcat"
)

func (a *app) newGatewayCmd() *cobra.Command {
	// mode is --transparent-mode; file is --gateway-config.
	var (
		o          gateway.ServeOptions
		mode, file string
	)
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
		RunE: func(cmd *cobra.Command, _ []string) error { return a.gatewayRun(cmd.Context(), o, mode, file) },
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Listen, "listen", "", "explicit proxy address (default from [gateway] listen, else "+egressconfig.DefaultListen+")")
	fl.StringVar(&o.TransparentListen, "transparent", "", "transparent listener address (default from [gateway] transparent_listen; off when unset)")
	fl.StringVar(&mode, "transparent-mode", "proxy", "how the transparent listener learns destinations: proxy (PROXY v2 header) or redirect (SO_ORIGINAL_DST)")
	fl.StringVar(&o.DNSListen, "dns", "", "DNS server address, UDP and TCP (default from [gateway] dns_listen; off when unset)")
	fl.StringVar(&o.Receipts, "receipts", "", "receipts log (default <state>/receipts/<session>.jsonl)")
	fl.StringVar(&o.Session, "session", "", "session name for receipts (default random)")
	fl.StringVar(&file, "gateway-config", "", "standalone gateway config file with only [network], [gateway], [secrets]")
	fl.BoolVar(&o.RequireNoForwarding, "require-no-forwarding", false, "refuse to start unless IP forwarding is off in this network namespace")
	fl.StringVar(&o.Canary, "canary", "", "fence self-test canary address (TCP and UDP; arrivals are recorded in <state>/"+gateway.CanaryFile+")")
	fl.MarkHidden("canary")
	fl.IntVar(&o.Procs, "procs", gateway.DefaultProcs, "threads running Go code (GOMAXPROCS; 0: one per CPU); the GOMAXPROCS environment variable wins")
	a.socketFlag(cmd, &o.AdminSocket)
	cmd.AddCommand(
		a.newGatewayAdminCmd("reload", "Reload the running gateway's configuration (connections stay up)", &o.AdminSocket),
		a.newGatewayAdminCmd("revoke", "Reload and close existing connections the new policy denies", &o.AdminSocket),
		a.newGatewayAdminCmd("status", "Show the running gateway's status (JSON)", &o.AdminSocket),
		a.newGatewayAdminCmd("env", "Print the placeholder environment for the sandbox (NAME=placeholder)", &o.AdminSocket),
		a.newGatewayAsksCmd(&o.AdminSocket),
		a.newGatewayAnswerCmd(true, &o.AdminSocket),
		a.newGatewayAnswerCmd(false, &o.AdminSocket),
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

// gatewayRun is `vak gateway` (gateway.Serve) with the trusted user
// config, or the standalone file, as its config.
func (a *app) gatewayRun(ctx context.Context, o gateway.ServeOptions, mode, file string) error {
	load, cfgFile, err := config.GatewayLoader(file, a.userConfig, a.warn)
	if err != nil {
		return exit(ExitConfig, err)
	}
	modes := map[string]proxy.TransparentMode{"proxy": proxy.ProxyProtocol, "redirect": proxy.OriginalDst}
	if o.TransparentMode = modes[mode]; o.TransparentMode == 0 {
		return exit(ExitUsage, fmt.Errorf("--transparent-mode %q: want proxy or redirect", mode))
	}
	if o.Procs < 0 {
		return exit(ExitUsage, fmt.Errorf("--procs %d: want 0 (one per CPU) or a positive number", o.Procs))
	}
	o.Load, o.ConfigFile, o.Out = load, cfgFile, a.stdio.Err
	return exitFor(gateway.Serve(ctx, o))
}

func (a *app) newGatewayAdminCmd(name, short string, socket *string) *cobra.Command {
	return &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sock, err := gateway.AdminSocket(*socket)
			if err != nil {
				return exitFor(err)
			}
			return exitFor(admin.NewClient(sock).Command(cmd.Context(), name, a.stdio.Out))
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
			pem, err := gateway.CACertPEM()
			if err != nil {
				return exitFor(err)
			}
			_, err = a.stdio.Out.Write(pem)
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
			note := func(n string) { fmt.Fprintf(a.stdio.Err, "vak: note: %s\n", n) }
			return exitFor(sandcat.ConvertFile(args[0], out, a.stdio.Out, note))
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
			list, err := egressconfig.PresetList()
			if err != nil {
				return exit(ExitInternal, err)
			}
			fmt.Fprint(a.stdio.Out, list)
			return nil
		},
	}
}
