package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"vak/bench/internal/stats"
)

// contender is one way of running a command in the workspace.
type contender struct {
	key, name, kind string
	argv            func(cmd ...string) []string // the command line around cmd
	env             []string                     // added to the environment
	skip            string                       // why it does not run here

	contained string // result of the containment check
	seq       stats.Sample
	seqRuns   int
	burst     stats.Sample
	burstRuns int
	firstErr  string
}

// env is one bench run's workspace and the contenders' configuration.
type env struct {
	vak, peers, image   string
	root, ws, outside   string
	host                string // under the user's cache: Codex's home, outside
	vakCfg, vakDocker   string
	srtSettings, codexH string
}

func newEnv(vak, peers, image string, files int) (*env, error) {
	root, ws, err := workspace(files)
	if err != nil {
		return nil, err
	}
	e := &env{vak: vak, peers: peers, image: image, root: root, ws: ws}
	e.vakCfg = filepath.Join(root, "vak.toml")
	e.vakDocker = filepath.Join(root, "vak-docker.toml")
	e.srtSettings = filepath.Join(root, "srt-settings.json")
	// Outside the temp dir, under the user's cache: the containment check's
	// directory (some sandboxes leave /tmp writable on purpose, and a
	// file there is not a write to the user's files) and Codex's home
	// (Codex refuses to place its helper links under /tmp: it warns and
	// goes on).
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	if e.host, err = os.MkdirTemp(cache, "vak-bench-peers-"); err != nil {
		return nil, err
	}
	e.codexH, e.outside = filepath.Join(e.host, "codex"), filepath.Join(e.host, "outside")
	for _, d := range []string{e.codexH, e.outside} {
		if err := os.Mkdir(d, 0o777); err != nil {
			return nil, err
		}
	}
	writes := map[string]string{
		e.vakCfg:      "version = 1\n[sandbox]\nbackend = \"landlock\"\n",
		e.vakDocker:   fmt.Sprintf("version = 1\n[sandbox]\nbackend = \"docker\"\nimage = %q\n", image),
		e.srtSettings: fmt.Sprintf(`{"filesystem":{"denyRead":[],"allowWrite":[%q],"denyWrite":[]},"network":{"allowedDomains":[],"deniedDomains":[]}}`, ws),
	}
	for p, s := range writes {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *env) close() {
	os.RemoveAll(e.root)
	os.RemoveAll(e.host)
}

// contenders lists every contender, available or not, in table order.
func (e *env) contenders() []*contender {
	cs := []*contender{
		{key: "exec", name: "exec `true` (the floor)", kind: "none", argv: func(cmd ...string) []string { return cmd }},
		{key: "bwrap", name: "bubblewrap", kind: "sandbox", argv: e.bwrap},
		{key: "firejail", name: "firejail", kind: "sandbox", argv: e.firejail},
		{key: "vak", name: "`vak run` (landlock)", kind: "agent sandbox", argv: func(cmd ...string) []string {
			return append([]string{e.vak, "--config", e.vakCfg, "run", "-w", e.ws, "--"}, cmd...)
		}},
		{key: "codex", name: "`codex sandbox` (workspace-write)", kind: "agent sandbox", env: []string{"CODEX_HOME=" + e.codexH}, argv: func(cmd ...string) []string {
			return append([]string{e.npmBin("codex"), "sandbox", "-c", `sandbox_mode="workspace-write"`, "--"}, cmd...)
		}},
		{key: "srt", name: "`srt` (sandbox-runtime)", kind: "agent sandbox", argv: func(cmd ...string) []string {
			return []string{e.npmBin("srt"), "-s", e.srtSettings, "-c", shellJoin(cmd)}
		}},
		{key: "docker", name: "`docker run --rm --network none`", kind: "container", argv: func(cmd ...string) []string {
			return append([]string{"docker", "run", "--rm", "--network", "none", "-v", e.ws + ":" + e.ws, "-w", e.ws, e.image}, cmd...)
		}},
		{key: "vak-docker", name: "`vak run --backend docker`", kind: "agent sandbox (container)", argv: func(cmd ...string) []string {
			return append([]string{e.vak, "--config", e.vakDocker, "run", "-w", e.ws, "--"}, cmd...)
		}},
	}
	docker := e.dockerMissing()
	for _, c := range cs {
		switch c.key {
		case "bwrap", "firejail":
			if _, err := exec.LookPath(c.key); err != nil {
				c.skip = c.key + " is not installed (bench/peers/install.sh)"
			}
		case "codex", "srt":
			if _, err := os.Stat(e.npmBin(c.key)); err != nil {
				c.skip = c.key + " is not installed in " + e.peers + " or on PATH (bench/peers/install.sh)"
			}
		case "docker", "vak-docker":
			c.skip = docker
		}
	}
	return cs
}

// dockerMissing says why the container contenders cannot run here, or ""
// when they can.
func (e *env) dockerMissing() string {
	if e.image == "" {
		return "no -image given"
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return "docker is not installed"
	}
	if err := exec.Command("docker", "image", "inspect", e.image).Run(); err != nil {
		return "docker image " + e.image + " is not present (or no daemon)"
	}
	return ""
}

// npmBin finds an npm peer's command in the peers prefix, else on PATH.
func (e *env) npmBin(name string) string {
	p := filepath.Join(e.peers, "node_modules", ".bin", name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return p
}

// bwrap is bubblewrap with the kind of view vak's landlock backend builds
// (stats.Bwrap).
func (e *env) bwrap(cmd ...string) []string { return stats.Bwrap(e.ws, cmd...) }

// firejail: no profile, no network, the root read-only, the workspace
// writable.
func (e *env) firejail(cmd ...string) []string {
	return append([]string{"firejail", "--quiet", "--noprofile", "--net=none", "--read-only=/", "--read-write=" + e.ws, "--"}, cmd...)
}

// run runs the contender's command in the workspace, with a minute's
// limit, and returns its wall time.
func (e *env) run(c *contender, cmd ...string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	argv := c.argv(cmd...)
	x := exec.CommandContext(ctx, argv[0], argv[1:]...)
	x.Dir = e.ws
	x.Env = append(os.Environ(), c.env...)
	var out bytes.Buffer
	x.Stdout, x.Stderr = &out, &out
	t := time.Now()
	err := x.Run()
	d := time.Since(t)
	if err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return d, fmt.Errorf("%s: %w: %s", c.key, err, msg)
	}
	return d, nil
}

// containment runs, once, a command that writes a file in the workspace
// (its working directory) and one in a directory next to it, and says
// what reached the host.
func (e *env) containment(c *contender) string {
	in := ".peer-probe-" + c.key
	out := filepath.Join(e.outside, c.key)
	_, err := e.run(c, "sh", "-c", "echo x > "+in+"; echo x > "+out+"; true")
	_, inErr := os.Stat(filepath.Join(e.ws, in))
	_, outErr := os.Stat(out)
	os.Remove(filepath.Join(e.ws, in))
	os.Remove(out)
	switch {
	case err != nil:
		return "check failed: " + err.Error()
	case outErr == nil:
		return "no"
	case inErr == nil:
		return "yes"
	default:
		return "yes (the workspace was not writable either)"
	}
}

// shellJoin quotes argv for a POSIX shell.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
