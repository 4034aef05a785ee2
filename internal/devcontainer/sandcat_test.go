package devcontainer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/devcontainer"
	"vak/internal/testenv"
)

func writeFile(t *testing.T, p, data string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// sandcat's layers: user < project < local; env and secrets by name, the
// higher layer winning; network rules highest layer first.
func TestFromSandcatMerge(t *testing.T) {
	dir := t.TempDir()
	user := filepath.Join(t.TempDir(), "settings.json")
	writeFile(t, user, `{"env":{"GIT_AUTHOR_NAME":"user","A":"1"},"secrets":{"TOKEN":{"value":"user-secret","hosts":["api.user.test"]}},"network":[{"action":"allow","host":"user.test"}]}`)
	writeFile(t, filepath.Join(dir, ".sandcat", "settings.json"), `{"network":[{"action":"deny","host":"deny.test"},{"action":"allow","host":"project.test","method":"GET"}]}`)
	writeFile(t, filepath.Join(dir, ".sandcat", "settings.local.json"), `{"env":{"A":"2"},"secrets":{"TOKEN":{"value":"local-secret","hosts":["api.local.test"]}},"network":[{"action":"allow","host":"local.test"}]}`)
	sc, err := devcontainer.FromSandcat(dir, user)
	if err != nil {
		t.Fatal(err)
	}
	toml := string(sc.Result.TOML)
	if len(sc.Files) != 3 || sc.Env["A"] != "2" || sc.Env["GIT_AUTHOR_NAME"] != "user" {
		t.Errorf("files %v env %v", sc.Files, sc.Env)
	}
	if !strings.Contains(toml, "local-secret") || strings.Contains(toml, "user-secret") {
		t.Errorf("the local layer's secret must win:\n%s", toml)
	}
	l, d, p, u := strings.Index(toml, "local.test"), strings.Index(toml, "deny.test"), strings.Index(toml, "project.test"), strings.Index(toml, "user.test")
	if !(l >= 0 && l < d && d < p && p < u) {
		t.Errorf("rule order (want local, project, user):\n%s", toml)
	}
	if len(sc.Changes) == 0 {
		t.Errorf("no behaviour changes reported")
	}
	// Not a sandcat project.
	if _, err := devcontainer.FromSandcat(t.TempDir(), ""); err == nil {
		t.Errorf("a directory without .sandcat/settings.json was accepted")
	}
	// A deny rule that cannot be expressed fails rather than widening.
	bad := t.TempDir()
	writeFile(t, filepath.Join(bad, ".sandcat", "settings.json"), `{"network":[{"action":"deny","host":"a?c.test"},{"action":"allow","host":"*"}]}`)
	if _, err := devcontainer.FromSandcat(bad, ""); err == nil {
		t.Errorf("an inexpressible deny rule was accepted")
	}
}

// `vak devcontainer init --from-sandcat` as a user without a vak config:
// the conversion becomes the trusted user config (0600, outside the
// workspace), the template gets placeholders and sandcat's env, and no
// secret value lands in the workspace. A second project with the config
// now present is written next to it for merging, never over it.
func TestInitFromSandcat(t *testing.T) {
	vak := testenv.Vak(t)
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	writeFile(t, filepath.Join(ws, ".sandcat", "settings.json"), `{"env":{"GIT_AUTHOR_NAME":"Agent"},"secrets":{"GH_TOKEN":{"value":"ghp_realsecret123","hosts":["api.github.com"]}},"network":[{"action":"allow","host":"*.github.com"}]}`)
	cfgHome := filepath.Join(base, "config")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(vak, args...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+cfgHome, "XDG_STATE_HOME="+filepath.Join(base, "state"), "HOME="+base)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("devcontainer", "init", "-w", ws, "--from-sandcat", ws)
	if err != nil {
		t.Fatalf("init --from-sandcat: %v\n%s", err, out)
	}
	if !strings.Contains(out, "vak: changed: ") || !strings.Contains(out, "SANDCAT_PLACEHOLDER") {
		t.Errorf("behaviour changes not printed:\n%s", out)
	}
	cfg := filepath.Join(cfgHome, "vak", "config.toml")
	fi, err := os.Stat(cfg)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("user config: %v %v", fi, err)
	}
	if data, _ := os.ReadFile(cfg); !strings.Contains(string(data), "ghp_realsecret123") {
		t.Errorf("the secret did not go to the trusted config")
	}
	compose, _ := os.ReadFile(filepath.Join(ws, devcontainer.Dir, devcontainer.ComposeFile))
	if !strings.Contains(string(compose), `"GH_TOKEN=vakph_`) || !strings.Contains(string(compose), `"GIT_AUTHOR_NAME=Agent"`) {
		t.Errorf("compose.yml lacks the placeholder or sandcat's env:\n%s", compose)
	}
	filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && !strings.Contains(p, ".sandcat") {
			if data, _ := os.ReadFile(p); strings.Contains(string(data), "ghp_realsecret123") {
				t.Errorf("%s holds the secret value", p)
			}
		}
		return nil
	})
	// With the config present: written beside it, the config untouched.
	before, _ := os.ReadFile(cfg)
	ws2 := filepath.Join(base, "ws2")
	writeFile(t, filepath.Join(ws2, ".sandcat", "settings.json"), `{"network":[{"action":"allow","host":"example.org"}]}`)
	if out, err := run("devcontainer", "init", "-w", ws2, "--from-sandcat", ws2); err != nil || !strings.Contains(out, "merge its") {
		t.Errorf("second import: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(cfg); string(after) != string(before) {
		t.Errorf("the existing user config was changed")
	}
	if _, err := os.Stat(filepath.Join(cfgHome, "vak", "sandcat-import.toml")); err != nil {
		t.Errorf("sandcat-import.toml: %v", err)
	}
}

// `vak devcontainer init` as the user would run it, without Docker: the
// vscode preset note when the config lacks it (not with it), and --docker
// writing the dockerd service with its seccomp profile in the state dir,
// never in the workspace.
func TestInitDockerAndVSCodeNote(t *testing.T) {
	vak := testenv.Vak(t)
	for _, tc := range []struct {
		name, presets string
		docker, note  bool
		flags         []string
		refused       string // init fails, saying this (nothing written)
	}{
		{"plain without the preset", ``, false, true, nil, ""},
		{"docker with the preset", `presets = ["vscode"]`, true, false, nil, ""},
		{"--preset named by the trusted config", `presets = ["vscode"]`, false, false, []string{"--preset", "vscode"}, ""},
		{"--preset missing from the trusted config", ``, false, false, []string{"--preset", "vscode"}, `add it under [network] there (presets = ["vscode"])`},
		{"--preset unknown", `presets = ["vscode"]`, false, false, []string{"--preset", "vscodium"}, "unknown preset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			ws := filepath.Join(base, "ws")
			os.MkdirAll(ws, 0o755)
			cfgHome, state := filepath.Join(base, "config"), filepath.Join(base, "state")
			writeFile(t, filepath.Join(cfgHome, "vak", "config.toml"), "version = 1\n[network]\npolicy = \"proxied\"\n"+tc.presets+"\n[[network.rules]]\nname = \"x\"\nhosts = [\"example.com\"]\n")
			args := []string{"devcontainer", "init", "-w", ws}
			if tc.docker {
				args = append(args, "--docker")
			}
			args = append(args, tc.flags...)
			cmd := exec.Command(vak, args...)
			cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+cfgHome, "XDG_STATE_HOME="+state, "HOME="+base)
			out, err := cmd.CombinedOutput()
			if tc.refused != "" {
				if err == nil || !strings.Contains(string(out), tc.refused) {
					t.Errorf("init %v: %v, want a refusal saying %q\n%s", tc.flags, err, tc.refused, out)
				}
				if _, err := os.Stat(filepath.Join(ws, devcontainer.Dir)); err == nil {
					t.Errorf("init %v wrote %s although it refused", tc.flags, devcontainer.Dir)
				}
				return
			}
			if err != nil {
				t.Fatalf("init: %v\n%s", err, out)
			}
			if got := strings.Contains(string(out), `presets = ["vscode"]`); got != tc.note {
				t.Errorf("vscode note printed: %v, want %v\n%s", got, tc.note, out)
			}
			compose, _ := os.ReadFile(filepath.Join(ws, devcontainer.Dir, devcontainer.ComposeFile))
			if got := strings.Contains(string(compose), `"dockerd": {`); got != tc.docker {
				t.Errorf("dockerd service: %v, want %v", got, tc.docker)
			}
			profiles, _ := filepath.Glob(filepath.Join(state, "vak", "devcontainer", "*", "dockerd-seccomp.json"))
			if (len(profiles) == 1) != tc.docker {
				t.Errorf("seccomp profiles in the state dir: %v", profiles)
			}
			filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
				if err == nil && strings.Contains(p, "seccomp") {
					t.Errorf("%s: a seccomp profile in the workspace", p)
				}
				return nil
			})
			if tc.docker && len(profiles) == 1 && !strings.Contains(string(compose), "seccomp:"+profiles[0]) {
				t.Errorf("compose.yml does not name the profile %s", profiles[0])
			}
		})
	}
}
