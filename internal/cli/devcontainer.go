package cli

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"vak/internal/devcontainer"
	"vak/internal/egress/egressconfig"
	"vak/internal/launch"
	"vak/internal/paths"
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

// resolve is the canonical workspace and the extra labels.
func (f *devcontainerFlags) resolve() (string, map[string]string, error) {
	ws, err := paths.CanonicalWorkspace(cmp.Or(f.workspace, "."))
	if err != nil {
		return "", nil, exit(ExitUsage, err)
	}
	labels := map[string]string{}
	if err := addLabels(labels, f.labels); err != nil {
		return "", nil, err
	}
	return ws, labels, nil
}

func (a *app) newDevcontainerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "devcontainer",
		Short: "The dev-container template (VS Code \"Reopen in Container\", devcontainer up)",
	}
	cmd.AddCommand(a.newDevcontainerInitCmd(), a.newDevcontainerPrepareCmd(), a.newDevcontainerDoctorCmd(), a.newDevcontainerDownCmd())
	return cmd
}

func (a *app) newDevcontainerInitCmd() *cobra.Command {
	var f devcontainerFlags
	var image, vakPath, fromSandcat string
	var nets, presets []string
	var force, withDocker bool
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
init runs (their parent directories, such as .git, are bound onto
themselves so that they cannot be renamed).

With --docker, a nested Docker engine too: a dockerd service (the sidecar of
vak session create --docker: the same capabilities, seccomp profile, limits
and private cgroup namespace) in the netclient's namespace (netfence nested
mode), vak's Docker API guard in front of it, and DOCKER_HOST in the agent's
container pointing at the guard. Its state (images) is on a named volume
that survives Rebuild Container. See docs/devcontainer.md.

--preset NAME (e.g. vscode, for VS Code's server and extension downloads)
makes init check that the trusted config names the gateway preset NAME and
fail, saying what to add, when it does not: init never writes policy, and a
preset in the workspace's files would be policy from the workspace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, labels, err := f.resolve()
			if err != nil {
				return err
			}
			var env map[string]string
			if fromSandcat != "" {
				sc, err := devcontainer.ImportSandcat(fromSandcat, a.userConfig, a.stdio.Err)
				if err != nil {
					return exitFor(err)
				}
				env = sc.Env
			}
			cfg, err := a.loadConfig(ws)
			if err != nil {
				return err
			}
			return exitFor(devcontainer.Init(devcontainer.InitOptions{
				Workspace: ws, Config: cfg, ConfigFile: launch.TrustedFile(cfg), Image: image, Vak: vakPath, GatewayNetworks: nets,
				Presets: presets, Labels: labels, Docker: withDocker, Force: force, Env: env, Out: a.stdio.Out,
				Note: func(n string) { fmt.Fprintf(a.stdio.Err, "vak: note: %s\n", n) },
			}))
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&image, "image", "", "the agent container's image (default "+devcontainer.DefaultImage+")")
	cmd.Flags().StringArrayVar(&nets, "gateway-network", nil, "an existing Docker network the gateway also joins (repeatable)")
	cmd.Flags().StringVar(&vakPath, "vak", "", "the vak the host runs as initializeCommand (default: this executable)")
	cmd.Flags().BoolVar(&withDocker, "docker", false, "add a nested Docker engine (dockerd service, API guard, DOCKER_HOST in the agent's container)")
	cmd.Flags().StringArrayVar(&presets, "preset", nil, "require the trusted config to name the gateway preset NAME, e.g. vscode (repeatable; init never writes policy)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite an existing devcontainer.json and compose.yml")
	cmd.Flags().StringVar(&fromSandcat, "from-sandcat", "", "convert the sandcat project DIR's settings (user, .sandcat/settings.json, settings.local.json) first")
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
			return exitFor(devcontainer.PrepareHere(cmd.Context(), devcontainer.PrepareOptions{
				Workspace: ws, Binary: cmp.Or(cfg.Session.Worker, workerExecutable), Sections: cfg.EgressSections,
				ConfigFile: launch.TrustedFile(cfg), Labels: labels, Progress: a.stdio.Err,
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
		Short: "Explain the state of each dev-container service and prove the fence",
		Long: `Print one line per service of the workspace's dev container (gateway,
netclient, app: container, state, health), name what is wrong (a missing or
unhealthy service, an agent container left in a dead netclient namespace),
and when all is running run the fence self-test that vak run --network
proxied runs before a sandbox joins. Exits 1 when anything is wrong.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, _, err := f.resolve()
			if err != nil {
				return err
			}
			err = devcontainer.Doctor(cmd.Context(), ws, func() (*egressconfig.Sections, string, error) {
				cfg, err := a.loadConfig(ws)
				if err != nil {
					return nil, "", err
				}
				return cfg.EgressSections, launch.TrustedFile(cfg), nil
			}, a.stdio.Out)
			if errors.Is(err, devcontainer.ErrUnhealthy) {
				return exit(ExitFailure, nil)
			}
			return exitFor(err)
		},
	}
	f.add(cmd)
	return cmd
}

func (a *app) newDevcontainerDownCmd() *cobra.Command {
	var f devcontainerFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove the workspace's dev-container containers, networks and volumes",
		Long: `Remove what the workspace's dev container leaves in Docker: its containers
(running or not), its compose networks (FOLDER_devcontainer_egress and
_sandbox) and its volumes (vak-dc-KEY-gateway, -trust and, with --docker,
dockerd's images and sockets), found by the template's vak.devcontainer=KEY
label: another workspace's or user's are never touched, even under the same
compose project name. Once the containers are gone, the gateway's receipts
are copied out of its volume into vak's state dir (receipts/proxynet-KEY,
listed by vak receipts ls); if that fails the networks and volumes are kept.
It keeps the template's files, the
images (vak-net and vak-dockerd serve every workspace: vak gc --images
removes old ones), the installation CA and the placeholders, so the next
Reopen in Container / devcontainer up starts afresh from the same files.
--dry-run lists what would be removed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, labels, err := f.resolve()
			if err != nil {
				return err
			}
			return exitFor(devcontainer.DownWorkspace(cmd.Context(), ws, dryRun, labels, a.stdio.Out))
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	return cmd
}
