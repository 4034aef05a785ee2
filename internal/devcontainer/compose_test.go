package devcontainer_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"vak/internal/devcontainer"
	"vak/internal/testenv"
)

// EnvComposeV2 names Compose v2's binary (the docker CLI plugin, which also
// runs standalone): scripts/install-compose-v2.sh prints it and .ci/run
// exports it.
const EnvComposeV2 = "VAK_COMPOSE_V2"

// composeFlavor is the compose the dev-containers CLI drives in a test.
// The CLI runs `docker compose` when that works and falls back to its
// --docker-compose-path (docker-compose) otherwise, as VS Code does.
type composeFlavor struct {
	name string
	// env is added to every command the test runs (the dev-containers
	// CLI, vak, compose): for v2, DOCKER_CONFIG with the plugin.
	env []string
	// cmd runs compose directly (a netclient-only recreate).
	cmd []string
	// cliRuns is how the dev-containers CLI's log shows it running this
	// compose ("Run: docker compose --project-name ...").
	cliRuns string
}

// composeV1 is Debian's docker-compose 1.29, which the dev-containers CLI
// uses when the docker CLI has no compose plugin.
func composeV1(t *testing.T) composeFlavor {
	t.Helper()
	p, err := exec.LookPath("docker-compose")
	if err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, "docker-compose (apt-get install docker-compose)")
	}
	if out, err := exec.Command(p, "version", "--short").Output(); err != nil || !strings.HasPrefix(string(out), "1.") {
		testenv.Missing(t, testenv.EnvRequireDocker, "docker-compose on PATH is not compose 1.x: "+strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("docker", "compose", "version", "--short").Output(); err == nil {
		// The dev-containers CLI would take the plugin instead.
		testenv.Missing(t, testenv.EnvRequireDocker, "the docker CLI has a Compose plugin ("+strings.TrimSpace(string(out))+"), which the dev-containers CLI prefers over docker-compose 1.29")
	}
	return composeFlavor{name: "1.29", cmd: []string{p}, cliRuns: "docker-compose"}
}

// composeV2 is Compose v2 ($VAK_COMPOSE_V2) as the docker CLI plugin of a
// DOCKER_CONFIG of the test's own, so that the dev-containers CLI runs
// `docker compose` (its first choice, VS Code's too) for this test only.
func composeV2(t *testing.T) composeFlavor {
	t.Helper()
	p := os.Getenv(EnvComposeV2)
	if p == "" {
		testenv.Missing(t, testenv.EnvRequireDocker, "Compose v2: set "+EnvComposeV2+" to its binary (scripts/install-compose-v2.sh installs Debian's and prints the path)")
	}
	out, err := exec.Command(p, "version", "--short").Output()
	if err != nil || !strings.HasPrefix(strings.TrimPrefix(string(out), "v"), "2.") {
		t.Fatalf("%s=%s is not Compose v2: %v %s", EnvComposeV2, p, err, out)
	}
	cfg := t.TempDir()
	if err := os.Mkdir(filepath.Join(cfg, "cli-plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p, filepath.Join(cfg, "cli-plugins", "docker-compose")); err != nil {
		t.Fatal(err)
	}
	env := []string{"DOCKER_CONFIG=" + cfg}
	cmd := exec.Command("docker", "compose", "version", "--short")
	cmd.Env = append(os.Environ(), env...)
	if got, err := cmd.Output(); err != nil || string(got) != string(out) {
		t.Fatalf("docker compose with DOCKER_CONFIG=%s: %v %q (want %q)", cfg, err, got, out)
	}
	return composeFlavor{name: "v2", env: env, cmd: []string{p}, cliRuns: "docker compose"}
}

var cliComposeRe = regexp.MustCompile(`Run: (docker compose|\S+) --project-name`)

// checkCLICompose fails unless the dev-containers CLI's output says it ran
// the flavor's compose (each flavor checked beforehand which compose that
// command is).
func (f composeFlavor) checkCLICompose(t *testing.T, out string) {
	t.Helper()
	ms := cliComposeRe.FindAllStringSubmatch(out, -1)
	if len(ms) == 0 {
		t.Fatalf("the dev-containers CLI ran no compose:\n%s", out)
	}
	for _, m := range ms {
		if m[1] != f.cliRuns {
			t.Fatalf("the dev-containers CLI ran %q, not compose %s (%s):\n%s", m[1], f.name, f.cliRuns, out)
		}
	}
}

// The generated files (plain and --docker, with protected and pinned
// paths) parse with both composes: one file for docker-compose 1.29 and
// Compose v2. v2's normalized form keeps the security-relevant settings.
func TestComposeConfigBothVersions(t *testing.T) {
	flavors := []composeFlavor{composeV1(t), composeV2(t)}
	for _, docker := range []bool{false, true} {
		ws, _ := filepath.EvalSymlinks(t.TempDir())
		os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
		tp := &devcontainer.Template{
			Workspace: ws, Key: "a1b2c3d4e5f6", Image: "example/agent:1",
			Placeholders:    map[string]string{"TOKEN": "vakph_x"},
			GatewayNetworks: []string{"corp"}, Labels: map[string]string{testenv.TestLabel: "1"},
			Vak: "/usr/local/bin/vak", Docker: docker, StateDir: filepath.Join(ws, "state"),
		}
		tp.Protected, tp.Pinned = devcontainer.ExistingProtected(ws, []string{".git/hooks"})
		if docker {
			if err := devcontainer.WriteSeccomp(tp.StateDir, tp.Key); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tp.Write(false); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(ws, devcontainer.Dir, devcontainer.ComposeFile)
		for _, f := range flavors {
			out, err := exec.Command(f.cmd[0], "-f", file, "config").CombinedOutput()
			if err != nil {
				t.Errorf("compose %s config (docker=%v): %v\n%s", f.name, docker, err, out)
			}
		}
		out, err := exec.Command(flavors[1].cmd[0], "-f", file, "config", "--format", "json").Output()
		if err != nil {
			t.Fatalf("compose v2 config --format json: %v", err)
		}
		var p struct {
			Services map[string]struct {
				CapDrop     []string `json:"cap_drop"`
				CapAdd      []string `json:"cap_add"`
				SecurityOpt []string `json:"security_opt"`
				NetworkMode string   `json:"network_mode"`
				Entrypoint  []string `json:"entrypoint"`
				ReadOnly    bool     `json:"read_only"`
				Cgroup      string   `json:"cgroup"`
				Volumes     []struct {
					Type     string `json:"type"`
					Source   string `json:"source"`
					Target   string `json:"target"`
					ReadOnly bool   `json:"read_only"`
				} `json:"volumes"`
				Networks map[string]*struct {
					IPv4Address string `json:"ipv4_address"`
				} `json:"networks"`
			} `json:"services"`
			Networks map[string]struct {
				Internal   bool              `json:"internal"`
				DriverOpts map[string]string `json:"driver_opts"`
			} `json:"networks"`
		}
		if err := json.Unmarshal(out, &p); err != nil {
			t.Fatalf("compose v2 config: %v\n%s", err, out)
		}
		app := p.Services["app"]
		ro := func(target string) bool {
			for _, v := range app.Volumes {
				if v.Target == target {
					return v.ReadOnly
				}
			}
			return false
		}
		checks := []struct {
			name string
			ok   bool
		}{
			{"app joins the netclient", app.NetworkMode == "service:netclient"},
			{"app drops every capability", slices.Equal(app.CapDrop, []string{"ALL"}) && len(app.CapAdd) == 0 && slices.Equal(app.SecurityOpt, []string{"no-new-privileges"})},
			{"the template dirs and .git/hooks read-only in app", ro(filepath.Join(ws, devcontainer.Dir)) && ro(filepath.Join(ws, devcontainer.VSCodeDir)) && ro(filepath.Join(ws, ".git/hooks")) && !ro(ws) && !ro(filepath.Join(ws, ".git"))},
			{"sandbox network internal, no host address", p.Networks["sandbox"].Internal && p.Networks["sandbox"].DriverOpts["com.docker.network.bridge.inhibit_ipv4"] == "true"},
			{"gateway at its fixed address, read-only", p.Services["gateway"].Networks["sandbox"] != nil && p.Services["gateway"].Networks["sandbox"].IPv4Address == devcontainer.GatewayIP(tp.Key).String() && p.Services["gateway"].ReadOnly},
		}
		if docker {
			d := p.Services["dockerd"]
			checks = append(checks,
				struct {
					name string
					ok   bool
				}{"dockerd creates its cgroup namespace (no cgroup key)", strings.Join(d.Entrypoint[:3], " ") == "unshare --cgroup --" && d.Cgroup == ""},
				struct {
					name string
					ok   bool
				}{"the guard's socket volume read-only in app", ro(devcontainer.DockerDir)},
			)
		}
		for _, c := range checks {
			if !c.ok {
				t.Errorf("docker=%v: %s: no\n%s", docker, c.name, out)
			}
		}
	}
}
