// Command devcontainer measures the dev-container template (issue 15) with
// the real dev-containers CLI: `devcontainer up --workspace-folder WS` on a
// freshly generated template (initializeCommand `vak devcontainer prepare`,
// then compose up, all images local) until `devcontainer exec` works, and
// the Rebuild (`devcontainer up --remove-existing-container`) until it works
// again, for the plain and the --docker variant. "Works" is `devcontainer
// exec true` for the plain template (the agent's container starts only once
// the netclient and gateway are healthy) and `devcontainer exec docker
// version` through the guard for --docker (dockerd healthy and answering).
//
//	VAK_DEVCONTAINER_CLI=DIR/node_modules/.bin/devcontainer go run ./bench/devcontainer -n 3
//
// With -composes v1,v2 (and VAK_COMPOSE_V2, scripts/install-compose-v2.sh)
// each run measures docker-compose 1.29 and Compose v2 one after the other
// (interleaved): v2 as the docker CLI plugin of a DOCKER_CONFIG of the
// bench's own, so the dev-containers CLI runs `docker compose`.
//
// Needs docker-compose, the test image (scripts/build-test-images.sh), a
// static docker CLI on the host (copied into the --docker agent image), and
// root when the sidecar image must be built. Each run uses a new workspace
// and removes its containers, networks and volumes.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"vak/bench/internal/stats"
	"vak/internal/devcontainer"
	"vak/internal/paths"
	"vak/internal/proxynet"
)

func main() {
	n := flag.Int("n", 3, "runs per variant")
	img := flag.String("image", "vak-test:latest", "base of the agent's image")
	variants := flag.String("variants", "plain,docker", "comma-separated: plain, docker")
	composes := flag.String("composes", "v1", "comma-separated: v1 (docker-compose), v2 ($VAK_COMPOSE_V2 as the docker CLI plugin)")
	flag.Parse()
	dc := os.Getenv("VAK_DEVCONTAINER_CLI")
	if dc == "" {
		dc = "devcontainer"
	}
	if err := run(dc, *n, *img, strings.Split(*variants, ","), strings.Split(*composes, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "devcontainer:", err)
		os.Exit(1)
	}
}

type result struct {
	variant, compose string
	up, build        stats.Sample
}

// composeEnv is the environment that makes the dev-containers CLI run
// compose c: v1 is the machine's (docker-compose when the docker CLI has
// no compose plugin), v2 a DOCKER_CONFIG whose plugin is $VAK_COMPOSE_V2.
func composeEnv(c string) ([]string, func(), error) {
	switch c {
	case "v1":
		if exec.Command("docker", "compose", "version").Run() == nil {
			return nil, nil, fmt.Errorf("v1: the docker CLI has a compose plugin, which the dev-containers CLI prefers over docker-compose")
		}
		return nil, func() {}, nil
	case "v2":
		p := os.Getenv("VAK_COMPOSE_V2")
		if p == "" {
			return nil, nil, fmt.Errorf("v2: set VAK_COMPOSE_V2 (scripts/install-compose-v2.sh prints it)")
		}
		dir, err := os.MkdirTemp("", "vak-bench-dockercfg-")
		if err != nil {
			return nil, nil, err
		}
		os.Mkdir(filepath.Join(dir, "cli-plugins"), 0o755)
		if err := os.Symlink(p, filepath.Join(dir, "cli-plugins", "docker-compose")); err != nil {
			return nil, nil, err
		}
		return []string{"DOCKER_CONFIG=" + dir}, func() { os.RemoveAll(dir) }, nil
	}
	return nil, nil, fmt.Errorf("unknown compose %q", c)
}

func run(dc string, n int, img string, variants, composes []string) error {
	vak, err := stats.BuildVak()
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(vak))
	envs := map[string][]string{}
	for _, c := range composes {
		env, done, err := composeEnv(c)
		if err != nil {
			return err
		}
		defer done()
		envs[c] = env
	}
	var results []*result
	for _, v := range variants {
		image := img
		if v == "docker" {
			if image, err = dockerCLIImage(img); err != nil {
				return err
			}
			defer stats.RunQuiet("docker", "rmi", "-f", image)
		} else if v != "plain" {
			return fmt.Errorf("unknown variant %q", v)
		}
		rs := map[string]*result{}
		for _, c := range composes {
			rs[c] = &result{variant: v, compose: c}
			results = append(results, rs[c])
		}
		for i := 0; i < n; i++ {
			for _, c := range composes { // interleaved
				up, rebuild, err := once(dc, vak, image, v == "docker", envs[c])
				if err != nil {
					return fmt.Errorf("%s (compose %s) run %d: %w", v, c, i+1, err)
				}
				fmt.Fprintf(os.Stderr, "%s (compose %s) run %d: up %.1f s, rebuild %.1f s\n", v, c, i+1, up.Seconds(), rebuild.Seconds())
				rs[c].up.Add(up)
				rs[c].build.Add(rebuild)
			}
		}
	}
	target := map[string]string{"plain": "≤ 20 s", "docker": "≤ 30 s"}
	fmt.Println("| variant | compose | step | target | runs (s) | median |\n|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %s | `devcontainer up` to a working exec | %s | %s | %.1f s |\n", r.variant, r.compose, target[r.variant], secs(r.up), r.up.Median().Seconds())
		fmt.Printf("| %s | %s | Rebuild to a working exec | ≤ 15 s | %s | %.1f s |\n", r.variant, r.compose, secs(r.build), r.build.Median().Seconds())
	}
	return nil
}

func secs(s stats.Sample) string {
	var p []string
	for _, d := range s.D {
		p = append(p, fmt.Sprintf("%.1f", d.Seconds()))
	}
	return strings.Join(p, ", ")
}

// once generates a template in a new workspace, times up and Rebuild, and
// removes everything it created.
func once(dc, vak, image string, docker bool, composeEnv []string) (up, rebuild time.Duration, err error) {
	var rnd [4]byte
	rand.Read(rnd[:])
	base, err := os.MkdirTemp("", "vak-bench-dc-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(base)
	base, _ = filepath.EvalSymlinks(base)
	cfgDir := filepath.Join(base, "config", "vak")
	os.MkdirAll(cfgDir, 0o700)
	// Any rule: the template needs a network policy.
	if err := os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte("version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nname = \"bench\"\nhosts = [\"example.com\"]\n"), 0o600); err != nil {
		return 0, 0, err
	}
	ws := filepath.Join(base, "vakbench-ws-"+hex.EncodeToString(rnd[:]))
	os.MkdirAll(ws, 0o755)
	if ws, err = paths.CanonicalWorkspace(ws); err != nil {
		return 0, 0, err
	}
	env := append(append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(base, "state"), "XDG_CONFIG_HOME="+filepath.Join(base, "config")), composeEnv...)
	runCmd := func(name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Env, cmd.Dir = env, ws
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, lastLines(out, 15))
		}
		return nil
	}
	key := proxynet.Key(ws)
	defer cleanup(key)
	args := []string{"devcontainer", "init", "-w", ws, "--image", image, "--label", "vak.bench=1"}
	if docker {
		args = append(args, "--docker")
	}
	if err := runCmd(vak, args...); err != nil {
		return 0, 0, err
	}
	check := []string{"exec", "--workspace-folder", ws, "true"}
	if docker {
		check = []string{"exec", "--workspace-folder", ws, "docker", "version"}
	}
	up, err = stats.Time(func() error {
		if err := runCmd(dc, "up", "--workspace-folder", ws); err != nil {
			return err
		}
		return runCmd(dc, check...)
	})
	if err != nil {
		return 0, 0, err
	}
	rebuild, err = stats.Time(func() error {
		if err := runCmd(dc, "up", "--workspace-folder", ws, "--remove-existing-container"); err != nil {
			return err
		}
		return runCmd(dc, check...)
	})
	return up, rebuild, err
}

// cleanup removes the workspace's containers, networks and volumes (all
// carry the template's key label).
func cleanup(key string) {
	f := "label=" + devcontainer.LabelKey + "=" + key
	list := func(args ...string) []string {
		out, _ := exec.Command("docker", args...).Output()
		return strings.Fields(string(out))
	}
	if cs := list("ps", "-aq", "--filter", f); len(cs) > 0 {
		exec.Command("docker", append([]string{"rm", "-f"}, cs...)...).Run()
	}
	if ns := list("network", "ls", "-q", "--filter", f); len(ns) > 0 {
		exec.Command("docker", append([]string{"network", "rm"}, ns...)...).Run()
	}
	if vs := list("volume", "ls", "-q", "--filter", f); len(vs) > 0 {
		exec.Command("docker", append([]string{"volume", "rm", "-f"}, vs...)...).Run()
	}
}

// dockerCLIImage is base plus the host's docker CLI (it must be static).
func dockerCLIImage(base string) (string, error) {
	p, err := exec.LookPath("docker")
	if err != nil {
		return "", err
	}
	if out, _ := exec.Command("file", "-L", p).Output(); len(out) > 0 && !bytes.Contains(out, []byte("statically linked")) {
		return "", fmt.Errorf("the host's docker CLI is not static: %s", out)
	}
	dir, err := os.MkdirTemp("", "vak-bench-dockercli-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	data, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	os.MkdirAll(filepath.Join(dir, "root", "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "root", "bin", "docker"), data, 0o755); err != nil {
		return "", err
	}
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+base+"\nCOPY root/ /\n"), 0o644)
	var rnd [4]byte
	rand.Read(rnd[:])
	tag := "vak-bench-dockercli:" + hex.EncodeToString(rnd[:])
	cmd := exec.Command("docker", "build", "-q", "--label", "vak.bench=1", "-t", tag, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w: %s", tag, err, out)
	}
	return tag, nil
}

func lastLines(b []byte, n int) string {
	l := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
