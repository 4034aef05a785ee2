package devcontainer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
)

// The template's files as the dev-containers tooling reads them: a fresh
// template, and the same hand-edited in ways that keep it working (JSON
// with comments and trailing commas, the string and object forms of
// initializeCommand, compose.yml rewritten as block YAML) have no problem;
// damaged ones are named with the file (and the line of a parse error).
func TestCheckFiles(t *testing.T) {
	cfgJSON := func(ws, initCmd string) string {
		return `{
  // hand-edited
  "name": "vak: ws",
  "dockerComposeFile": ["compose.yml"],
  "service": "app", /* the agent */
  "initializeCommand": ` + initCmd + `,
}
`
	}
	for _, tc := range []struct {
		name    string
		edit    func(ws string, cfg, compose string) (string, string)
		want    string // "" means no problem
		wantErr string // more of the message
	}{
		{"fresh", func(ws, cfg, compose string) (string, string) { return cfg, compose }, "", ""},
		{"comments and trailing commas", func(ws, cfg, compose string) (string, string) {
			return cfgJSON(ws, `["/opt/vak", "devcontainer", "prepare", "--workspace", "`+ws+`", "--label", "a=b",]`), compose
		}, "", ""},
		{"string initializeCommand", func(ws, cfg, compose string) (string, string) {
			return cfgJSON(ws, `"vak devcontainer prepare --workspace `+ws+` && echo ready"`), compose
		}, "", ""},
		{"object initializeCommand", func(ws, cfg, compose string) (string, string) {
			return cfgJSON(ws, `{"note": "echo hi", "vak": ["vak", "devcontainer", "prepare", "-w", "`+ws+`"]}`), compose
		}, "", ""},
		{"compose as block YAML", func(ws, cfg, compose string) (string, string) {
			return cfg, "services:\n  gateway:\n    image: vak-net:devcontainer\n  netclient:\n    image: vak-net:devcontainer\n  app:\n    image: x\n    environment:\n      TOKEN: vakph_x\n"
		}, "", ""},
		{"initializeCommand replaced", func(ws, cfg, compose string) (string, string) {
			return cfgJSON(ws, `["echo", "hello"]`), compose
		}, ConfigFile + ": initializeCommand does not run vak devcontainer prepare", "run vak devcontainer init --force"},
		{"initializeCommand removed", func(ws, cfg, compose string) (string, string) {
			return strings.Replace(cfg, `"initializeCommand"`, `"postCreateCommand"`, 1), compose
		}, ConfigFile + ": initializeCommand does not run vak devcontainer prepare", ""},
		{"prepare for another workspace", func(ws, cfg, compose string) (string, string) {
			return cfgJSON(ws, `["vak", "devcontainer", "prepare", "--workspace", "/elsewhere"]`), compose
		}, ConfigFile + ": initializeCommand does not run vak devcontainer prepare --workspace", ""},
		{"another compose file", func(ws, cfg, compose string) (string, string) {
			return strings.Replace(cfg, `"compose.yml"`, `"other.yml"`, 1), compose
		}, ConfigFile + ": dockerComposeFile does not name compose.yml", ""},
		{"devcontainer.json syntax", func(ws, cfg, compose string) (string, string) {
			return strings.Replace(cfg, `"service": "app",`, `"service": "app"`, 1), compose
		}, ConfigFile + ":7: ", "invalid character"}, // the next key's line
		{"compose.yml syntax", func(ws, cfg, compose string) (string, string) {
			lines := strings.Split(compose, "\n")
			lines[7] = strings.TrimSuffix(lines[7], ",") // "image": "...",
			return cfg, strings.Join(lines, "\n")
		}, ComposeFile + ":9: ", "invalid character"}, // the next key's line
		{"block YAML syntax", func(ws, cfg, compose string) (string, string) {
			return cfg, "services:\n  gateway: {}\n  netclient: {}\n  app:\n    image: [x\n"
		}, ComposeFile + ":", "did not find expected"},
		{"compose.yml without app", func(ws, cfg, compose string) (string, string) {
			return cfg, "services:\n  gateway: {}\n  netclient: {}\n"
		}, ComposeFile + " has no app service", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := testTemplate(t)
			if _, err := tp.Write(false); err != nil {
				t.Fatal(err)
			}
			ws := tp.Workspace
			cfgPath, composePath := filepath.Join(ws, Dir, ConfigFile), filepath.Join(ws, Dir, ComposeFile)
			cfg, _ := os.ReadFile(cfgPath)
			compose, _ := os.ReadFile(composePath)
			c, p := tc.edit(ws, string(cfg), string(compose))
			os.WriteFile(cfgPath, []byte(c), 0o644)
			os.WriteFile(composePath, []byte(p), 0o644)
			errs := CheckFiles(ws)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("problems: %v", errs)
				}
				return
			}
			if len(errs) != 1 || !errors.Is(errs[0], ErrBroken) || !strings.Contains(errs[0].Error(), filepath.Join(ws, Dir)+"/"+tc.want) || !strings.Contains(errs[0].Error(), tc.wantErr) {
				t.Fatalf("problems %v, want one naming %q and %q", errs, tc.want, tc.wantErr)
			}
			// doctor reports it (and so exits 1) however the services are.
			st := Status{Services: map[string]*container.Summary{}, Files: errs}
			if got := strings.Join(st.Problems(), "\n"); !strings.Contains(got, tc.want) || strings.Contains(got, ErrBroken.Error()) {
				t.Errorf("doctor's problems %q lack %q", got, tc.want)
			}
		})
	}
}

// prepare reports a compose.yml that does not parse as such, with its file
// and line, not as a template out of date.
func TestCheckTemplateBrokenCompose(t *testing.T) {
	tp := testTemplate(t)
	if _, err := tp.Write(false); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(tp.Workspace, Dir, ComposeFile)
	data, _ := os.ReadFile(p)
	lines := strings.Split(string(data), "\n")
	lines[7] = strings.TrimSuffix(lines[7], ",") // "image": "...",
	os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644)
	err := checkTemplate(tp.Workspace, tp.Placeholders)
	if !errors.Is(err, ErrBroken) || errors.Is(err, ErrStale) || !strings.Contains(err.Error(), p+":9: ") || strings.Contains(err.Error(), "placeholder") {
		t.Fatalf("broken compose.yml: %v", err)
	}
	t.Logf("prepare: %v", err)
}

func TestStripJSONC(t *testing.T) {
	for in, want := range map[string]string{
		`{"a": 1, // c` + "\n" + `}`:      `{"a": 1  ` + "    \n" + `}`,
		`{"a": "// not a comment", }`:     `{"a": "// not a comment"  }`,
		`[1, /* x, */ 2,]`:                `[1,          2 ]`,
		`{"a": "q\"uote, ]", "b": [1,],}`: `{"a": "q\"uote, ]", "b": [1 ] }`,
		`/* unterminated`:                 `               `,
	} {
		if got := string(stripJSONC([]byte(in))); got != want {
			t.Errorf("stripJSONC(%q) = %q, want %q", in, got, want)
		}
	}
}

// The files' parsers are reached by a workspace's own (untrusted) files.
func FuzzTemplateFiles(f *testing.F) {
	f.Add([]byte(`{"dockerComposeFile": "compose.yml", "initializeCommand": "vak devcontainer prepare"}`), []byte("services:\n  app:\n    environment: [A=b]\n"))
	f.Add([]byte("{/*"), []byte("# c\n{\"services\": {\"app\": {\"environment\": {\"A\": \"b\"}}}"))
	f.Fuzz(func(t *testing.T, cfg, compose []byte) {
		if err := checkConfig("devcontainer.json", "/ws", cfg); err != nil && !errors.Is(err, ErrBroken) {
			t.Fatalf("%v does not wrap ErrBroken", err)
		}
		if c, err := parseCompose("compose.yml", compose); err != nil && !errors.Is(err, ErrBroken) {
			t.Fatalf("%v does not wrap ErrBroken", err)
		} else if err == nil {
			c.env("app")
		}
		if len(stripJSONC(cfg)) != len(cfg) {
			t.Fatal("stripJSONC changed the length")
		}
	})
}
