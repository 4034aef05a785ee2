package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/devcontainer"
	"vak/internal/egress/egressconfig"
	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/proxynet"
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

// resolveEngine is resolve and the Engine API client (engine.New), for the
// commands that drive Docker.
func (f *devcontainerFlags) resolveEngine() (string, map[string]string, *engine.Client, error) {
	ws, labels, err := f.resolve()
	if err != nil {
		return "", nil, nil, err
	}
	eng, err := engine.New()
	if err != nil {
		return "", nil, nil, exitFor(err)
	}
	return ws, labels, eng, nil
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
			var sc *devcontainer.Sandcat
			if fromSandcat != "" {
				if sc, err = a.importSandcat(fromSandcat); err != nil {
					return err
				}
			}
			cfg, err := a.loadConfig(ws)
			if err != nil {
				return err
			}
			if n := cfg.EgressSections; n == nil || n.Network == nil || len(n.Network.Rules)+len(n.Network.Presets) == 0 {
				return exit(ExitConfig, fmt.Errorf("%w (%s has none)", proxynet.ErrNoPolicy, trustedFile(cfg)))
			}
			for _, p := range presets {
				if !slices.Contains(egressconfig.PresetNames(), p) {
					return exit(ExitUsage, fmt.Errorf("--preset %q: %w (built in: %s)", p, egressconfig.ErrUnknownPreset, strings.Join(egressconfig.PresetNames(), ", ")))
				}
				if !slices.Contains(cfg.EgressSections.Network.Presets, p) {
					return exit(ExitConfig, fmt.Errorf("--preset %q: %s does not name it; add it under [network] there (presets = [%q]): init never writes policy (docs/devcontainer.md)", p, trustedFile(cfg), p))
				}
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
			user, err := devcontainer.WorkspaceUser(ws)
			if err != nil {
				return exitFor(err)
			}
			t := &devcontainer.Template{Workspace: ws, Image: image, Key: key, Placeholders: ph, GatewayNetworks: nets, Labels: labels, Vak: vakPath, User: user}
			if withDocker {
				t.Docker, t.StateDir = true, state
				if err := devcontainer.WriteSeccomp(state, key); err != nil {
					return exitFor(err)
				}
			}
			t.Protected, t.Pinned = devcontainer.ExistingProtected(ws, cfg.Files.Protected)
			if sc != nil {
				t.Env = sc.Env
			}
			written, err := t.Write(force)
			if err != nil {
				return exitFor(err)
			}
			for _, p := range written {
				fmt.Fprintf(a.stdio.Out, "wrote %s\n", p)
			}
			if !slices.Contains(cfg.EgressSections.Network.Presets, "vscode") {
				fmt.Fprintf(a.stdio.Err, "vak: note: VS Code's server and extension downloads are refused by the gateway unless %s names the preset: presets = [\"vscode\"] under [network] (docs/devcontainer.md)\n", trustedFile(cfg))
			}
			return nil
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

// importSandcat converts a sandcat project's settings into the trusted user
// config: written as that file when there is none yet, else next to it as
// sandcat-import.toml for the user to merge (vak never merges policy
// silently). Notes and behaviour changes go to stderr.
func (a *app) importSandcat(dir string) (*devcontainer.Sandcat, error) {
	sc, err := devcontainer.FromSandcat(dir, devcontainer.SandcatUserSettings())
	if err != nil {
		return nil, exit(ExitConfig, err)
	}
	for _, f := range sc.Files {
		fmt.Fprintf(a.stdio.Err, "vak: read %s\n", f)
	}
	for _, n := range sc.Result.Notes {
		fmt.Fprintf(a.stdio.Err, "vak: note: %s\n", n)
	}
	for _, c := range sc.Changes {
		fmt.Fprintf(a.stdio.Err, "vak: changed: %s\n", c)
	}
	cfgFile := a.userConfig
	if cfgFile == "" {
		if cfgFile, err = paths.UserConfigFile(); err != nil {
			return nil, exitFor(err)
		}
	}
	target, merge := cfgFile, false
	if _, err := os.Lstat(cfgFile); err == nil {
		target, merge = filepath.Join(filepath.Dir(cfgFile), "sandcat-import.toml"), true
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return nil, exitFor(err)
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, exit(ExitFailure, fmt.Errorf("write the converted settings: %w", err))
	}
	data := append([]byte(fmt.Sprintf("version = %d\n\n", config.Version)), sc.Result.TOML...)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, exit(ExitFailure, err)
	}
	if err := f.Close(); err != nil {
		return nil, exit(ExitFailure, err)
	}
	if merge {
		fmt.Fprintf(a.stdio.Err, "vak: wrote %s (mode 0600): %s exists, merge its [network] and [secrets] into it\n", target, cfgFile)
	} else {
		fmt.Fprintf(a.stdio.Err, "vak: wrote %s (mode 0600): the trusted user config\n", target)
	}
	return sc, nil
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
			ws, labels, eng, err := f.resolveEngine()
			if err != nil {
				return err
			}
			cfg, err := a.loadConfig(ws)
			if err != nil {
				return err
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
		Short: "Explain the state of each dev-container service and prove the fence",
		Long: `Print one line per service of the workspace's dev container (gateway,
netclient, app: container, state, health), name what is wrong (a missing or
unhealthy service, an agent container left in a dead netclient namespace),
and when all is running run the fence self-test that vak run --network
proxied runs before a sandbox joins. Exits 1 when anything is wrong.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, _, eng, err := f.resolveEngine()
			if err != nil {
				return err
			}
			st, err := devcontainer.Inspect(cmd.Context(), eng, ws)
			if err != nil {
				return exitFor(engine.Unreachable(eng.DaemonHost(), err))
			}
			st.Report(a.stdio.Out)
			if len(st.Problems()) > 0 {
				return exit(ExitFailure, nil)
			}
			cfg, err := a.loadConfig(ws)
			if err != nil {
				return err
			}
			state, err := paths.EnsureStateDir()
			if err != nil {
				return exitFor(err)
			}
			if err := st.SelfTest(cmd.Context(), devcontainer.PrepareOptions{Engine: eng, Workspace: ws, Sections: cfg.EgressSections, ConfigFile: trustedFile(cfg), StateDir: state}); err != nil {
				fmt.Fprintf(a.stdio.Out, "  problem: %v\n", err)
				return exit(ExitFailure, nil)
			}
			fmt.Fprintf(a.stdio.Out, "  fence self-test passed (receipt in %s)\n", proxynet.SelfTestLog(state, st.Key))
			return nil
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
			ws, labels, eng, err := f.resolveEngine()
			if err != nil {
				return err
			}
			defer eng.Close()
			state, err := paths.EnsureStateDir()
			if err != nil {
				return exitFor(err)
			}
			err = devcontainer.Down(cmd.Context(), devcontainer.DownOptions{Engine: eng, Workspace: ws, StateDir: state, DryRun: dryRun, Labels: labels, Out: a.stdio.Out})
			err = engine.APIError("", err)
			return exitFor(err)
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	return cmd
}
