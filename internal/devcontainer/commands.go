package devcontainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"vak/internal/config"
	"vak/internal/egress/egressconfig"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/paths"
	"vak/internal/proxynet"
)

// ErrUnhealthy reports that Doctor found a problem; it has printed it.
var ErrUnhealthy = errors.New("devcontainer: the dev container is not healthy")

// InitOptions configure Init (vak devcontainer init).
type InitOptions struct {
	Workspace string         // canonical
	Config    *config.Config // the workspace's loaded config
	// ConfigFile names the trusted file the gateway sections come from
	// (or would).
	ConfigFile string
	Image      string // the agent container's image ("": DefaultImage)
	// Vak is the vak the host runs as initializeCommand ("": this
	// executable).
	Vak             string
	GatewayNetworks []string
	// Presets are gateway presets the trusted config must name.
	Presets []string
	Labels  map[string]string
	// Docker adds the nested Docker engine; Force overwrites existing
	// files.
	Docker, Force bool
	// Env is the agent container's plain environment (from sandcat).
	Env map[string]string
	// Out gets one line per file written; Note gets the notes.
	Out  io.Writer
	Note func(string)
}

// Init checks that the trusted config has the gateway policy the template
// needs (and names o.Presets), then writes the template's files with the
// secrets' placeholders.
func Init(o InitOptions) error {
	cfg, file := o.Config, o.ConfigFile
	if n := cfg.EgressSections; n == nil || n.Network == nil || len(n.Network.Rules)+len(n.Network.Presets) == 0 {
		return errclass.Wrap(errclass.Config, fmt.Errorf("%w (%s has none)", proxynet.ErrNoPolicy, file))
	}
	for _, p := range o.Presets {
		if !slices.Contains(egressconfig.PresetNames(), p) {
			return errclass.Wrap(errclass.Invalid, fmt.Errorf("--preset %q: %w (built in: %s)", p, egressconfig.ErrUnknownPreset, strings.Join(egressconfig.PresetNames(), ", ")))
		}
		if !slices.Contains(cfg.EgressSections.Network.Presets, p) {
			return errclass.Wrap(errclass.Config, fmt.Errorf("--preset %q: %s does not name it; add it under [network] there (presets = [%q]): init never writes policy (docs/devcontainer.md)", p, file, p))
		}
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return err
	}
	if o.Vak == "" {
		if o.Vak, err = os.Executable(); err != nil {
			return err
		}
	}
	key := proxynet.Key(o.Workspace)
	ph, err := Placeholders(state, key, SecretNames(cfg.EgressSections))
	if err != nil {
		return err
	}
	user, err := WorkspaceUser(o.Workspace)
	if err != nil {
		return err
	}
	t := &Template{Workspace: o.Workspace, Image: o.Image, Key: key, Placeholders: ph, GatewayNetworks: o.GatewayNetworks, Labels: o.Labels, Vak: o.Vak, User: user, Env: o.Env}
	if o.Docker {
		t.Docker, t.StateDir = true, state
		if err := WriteSeccomp(state, key); err != nil {
			return err
		}
	}
	t.Protected, t.Pinned = ExistingProtected(o.Workspace, cfg.Files.Protected)
	written, err := t.Write(o.Force)
	if err != nil {
		return err
	}
	for _, p := range written {
		fmt.Fprintf(o.Out, "wrote %s\n", p)
	}
	if !slices.Contains(cfg.EgressSections.Network.Presets, "vscode") {
		o.Note(fmt.Sprintf("VS Code's server and extension downloads are refused by the gateway unless %s names the preset: presets = [\"vscode\"] under [network] (docs/devcontainer.md)", file))
	}
	return nil
}

// ImportSandcat converts a sandcat project's settings into the trusted
// user config userConfig ("": the default path): written as that file
// when there is none yet, else next to it as sandcat-import.toml for the
// user to merge (vak never merges policy silently). Notes and behaviour
// changes go to log.
func ImportSandcat(dir, userConfig string, log io.Writer) (*Sandcat, error) {
	sc, err := FromSandcat(dir, SandcatUserSettings())
	if err != nil {
		return nil, errclass.Wrap(errclass.Config, err)
	}
	for _, f := range sc.Files {
		fmt.Fprintf(log, "vak: read %s\n", f)
	}
	for _, n := range sc.Result.Notes {
		fmt.Fprintf(log, "vak: note: %s\n", n)
	}
	for _, c := range sc.Changes {
		fmt.Fprintf(log, "vak: changed: %s\n", c)
	}
	if userConfig == "" {
		if userConfig, err = paths.UserConfigFile(); err != nil {
			return nil, err
		}
	}
	target, merge := userConfig, false
	if _, err := os.Lstat(userConfig); err == nil {
		target, merge = filepath.Join(filepath.Dir(userConfig), "sandcat-import.toml"), true
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("write the converted settings: %w", err)
	}
	data := append([]byte(fmt.Sprintf("version = %d\n\n", config.Version)), sc.Result.TOML...)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if merge {
		fmt.Fprintf(log, "vak: wrote %s (mode 0600): %s exists, merge its [network] and [secrets] into it\n", target, userConfig)
	} else {
		fmt.Fprintf(log, "vak: wrote %s (mode 0600): the trusted user config\n", target)
	}
	return sc, nil
}

// PrepareHere is Prepare with the Docker Engine of the environment and
// vak's state dir; an empty o.Binary is this executable.
func PrepareHere(ctx context.Context, o PrepareOptions) error {
	eng, err := engine.New()
	if err != nil {
		return err
	}
	defer eng.Close()
	if o.StateDir, err = paths.EnsureStateDir(); err != nil {
		return err
	}
	if o.Binary == "" {
		if o.Binary, err = os.Executable(); err != nil {
			return err
		}
	}
	o.Engine = eng
	return Prepare(ctx, o)
}

// Doctor prints the state of each of the workspace ws's dev-container
// services to out (Status.Report) and, when all is well, runs the fence
// self-test with the gateway sections and their file that policy returns
// (it loads the config). It returns ErrUnhealthy when it printed a
// problem.
func Doctor(ctx context.Context, ws string, policy func() (*egressconfig.Sections, string, error), out io.Writer) error {
	eng, err := engine.New()
	if err != nil {
		return err
	}
	defer eng.Close()
	st, err := Inspect(ctx, eng, ws)
	if err != nil {
		return engine.Unreachable(eng.DaemonHost(), err)
	}
	st.Report(out)
	if len(st.Problems()) > 0 {
		return ErrUnhealthy
	}
	sections, file, err := policy()
	if err != nil {
		return err
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return err
	}
	if err := st.SelfTest(ctx, PrepareOptions{Engine: eng, Workspace: ws, Sections: sections, ConfigFile: file, StateDir: state}); err != nil {
		fmt.Fprintf(out, "  problem: %v\n", err)
		return ErrUnhealthy
	}
	fmt.Fprintf(out, "  fence self-test passed (receipt in %s)\n", proxynet.SelfTestLog(state, st.Key))
	return nil
}

// DownWorkspace is Down for the workspace ws with the Docker Engine of the
// environment and vak's state dir.
func DownWorkspace(ctx context.Context, ws string, dryRun bool, labels map[string]string, out io.Writer) error {
	eng, err := engine.New()
	if err != nil {
		return err
	}
	defer eng.Close()
	state, err := paths.EnsureStateDir()
	if err != nil {
		return err
	}
	return engine.APIError("", Down(ctx, DownOptions{Engine: eng, Workspace: ws, StateDir: state, DryRun: dryRun, Labels: labels, Out: out}))
}
