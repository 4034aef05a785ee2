package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"vak/internal/devcontainer"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox/docker"
	"vak/internal/taskenv"
)

type devcontainerFlags struct {
	workspace string
	labels    []string // hidden: extra labels (tests set vak.test=1)
}

func (f *devcontainerFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.workspace, "workspace", "w", "", "workspace directory (default: the current directory)")
	cmd.Flags().StringArrayVar(&f.labels, "label", nil, "extra label KEY=VALUE on the Docker objects")
	cmd.Flags().MarkHidden("label")
}

func (f *devcontainerFlags) resolve() (string, map[string]string, error) {
	ws := f.workspace
	if ws == "" {
		ws = "."
	}
	ws, err := paths.CanonicalWorkspace(ws)
	if err != nil {
		return "", nil, exit(ExitUsage, err)
	}
	labels := map[string]string{}
	for _, l := range f.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return "", nil, exit(ExitUsage, fmt.Errorf("--label %q: want KEY=VALUE", l))
		}
		labels[k] = v
	}
	return ws, labels, nil
}

func (a *app) newDevcontainerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "devcontainer",
		Short: "The dev-container template (VS Code \"Reopen in Container\", devcontainer up)",
	}
	cmd.AddCommand(a.newDevcontainerInitCmd(), a.newDevcontainerPrepareCmd(), a.newDevcontainerDoctorCmd())
	return cmd
}

func (a *app) newDevcontainerInitCmd() *cobra.Command {
	var f devcontainerFlags
	var image, vakPath string
	var nets []string
	var force bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Write .devcontainer/devcontainer.json and compose.yml for the workspace",
		Long: `Write .devcontainer/devcontainer.json and .devcontainer/compose.yml: the
gateway and netclient (the vak-net image) and the agent's container (IMAGE,
joined to the netclient's namespace, all capabilities dropped). Nothing secret
is written: the trusted config's secrets appear only as placeholders, and the
template's initializeCommand (vak devcontainer prepare) places the gateway's
config on the host before compose starts. .devcontainer/ and .vscode/ are
mounted read-only in the agent's container, and so are the protected paths
of the trusted config (.git/hooks, .git/config, .envrc, ...) that exist when
init runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, labels, err := f.resolve()
			if err != nil {
				return err
			}
			cfg, err := a.loadConfig(ws)
			if err != nil {
				return err
			}
			if cfg.EgressSections == nil || cfg.EgressSections.Network == nil || len(cfg.EgressSections.Network.Rules) == 0 {
				return exit(ExitConfig, fmt.Errorf("%w (%s has none)", proxynet.ErrNoPolicy, trustedFile(cfg)))
			}
			state, err := paths.EnsureStateDir()
			if err != nil {
				return exitFor(err)
			}
			if vakPath == "" {
				if vakPath, err = os.Executable(); err != nil {
					return exitFor(err)
				}
			}
			key := proxynet.Key(ws)
			ph, err := devcontainer.Placeholders(state, key, devcontainer.SecretNames(cfg.EgressSections))
			if err != nil {
				return exitFor(err)
			}
			t := &devcontainer.Template{Workspace: ws, Image: image, Key: key, Placeholders: ph, GatewayNetworks: nets, Labels: labels, Vak: vakPath,
				Protected: devcontainer.ExistingProtected(ws, cfg.Files.Protected)}
			written, err := t.Write(force)
			if err != nil {
				return exitFor(err)
			}
			for _, p := range written {
				fmt.Fprintf(a.stdio.Out, "wrote %s\n", p)
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&image, "image", "", "the agent container's image (default "+devcontainer.DefaultImage+")")
	cmd.Flags().StringArrayVar(&nets, "gateway-network", nil, "an existing Docker network the gateway also joins (repeatable)")
	cmd.Flags().StringVar(&vakPath, "vak", "", "the vak the host runs as initializeCommand (default: this executable)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite an existing devcontainer.json and compose.yml")
	return cmd
}

func (a *app) newDevcontainerPrepareCmd() *cobra.Command {
	var f devcontainerFlags
	cmd := &cobra.Command{
		Use:   "prepare",
		Short: "Run on the host before compose (the template's initializeCommand)",
		Long: `Build or find the vak-net image, fill the gateway's volume from the trusted
config (policy, CA, secrets) and the trust volume (public CA files), restart a
running gateway whose config changed, and remove an agent container left in a
dead netclient namespace so that compose recreates it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, labels, err := f.resolve()
			if err != nil {
				return err
			}
			cfg, err := a.loadConfig(ws)
			if err != nil {
				return err
			}
			eng, err := taskenv.NewEngine()
			if err != nil {
				return exitFor(fmt.Errorf("%w: %w", docker.ErrDaemonUnavailable, err))
			}
			state, err := paths.EnsureStateDir()
			if err != nil {
				return exitFor(err)
			}
			bin := cfg.Session.Worker
			if bin == "" {
				bin = workerExecutable
			}
			if bin == "" {
				if bin, err = os.Executable(); err != nil {
					return exitFor(err)
				}
			}
			return exitFor(devcontainer.Prepare(cmd.Context(), devcontainer.PrepareOptions{
				Engine: eng, Workspace: ws, Binary: bin, Sections: cfg.EgressSections, ConfigFile: trustedFile(cfg),
				StateDir: state, Labels: labels, Progress: a.stdio.Err,
			}))
		},
	}
	f.add(cmd)
	return cmd
}

func (a *app) newDevcontainerDoctorCmd() *cobra.Command {
	var f devcontainerFlags
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Explain the state of each dev-container service",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, _, err := f.resolve()
			if err != nil {
				return err
			}
			eng, err := taskenv.NewEngine()
			if err != nil {
				return exitFor(fmt.Errorf("%w: %w", docker.ErrDaemonUnavailable, err))
			}
			st, err := devcontainer.Inspect(cmd.Context(), eng, ws)
			if err != nil {
				return exitFor(err)
			}
			st.Report(a.stdio.Out)
			if len(st.Problems()) > 0 {
				return exit(ExitFailure, nil)
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}
