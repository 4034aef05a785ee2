package egressconfig

import (
	"errors"
	"strings"
	"testing"

	"vak/internal/egress/policy"
)

// Every built-in preset decodes, validates into a policy on its own, allows
// only, and carries no secret or credential opt-out.
func TestPresetsValid(t *testing.T) {
	t.Parallel()
	ps, err := Presets()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"anthropic", "debian", "github", "go-modules", "npm", "openai", "pypi", "vscode"}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
		if p.Description == "" || len(p.Source) == 0 {
			t.Errorf("%s: no description or source", p.Name)
		}
		cfg, err := Validate("test", &Sections{Network: &Network{Presets: []string{p.Name}}})
		if err != nil {
			t.Errorf("%s: %v", p.Name, err)
			continue
		}
		for _, r := range cfg.Policy.Rules() {
			if r.Action != policy.Allow || r.AllowForeignCredentials || len(r.Hosts) == 0 || len(r.Methods) == 0 || !strings.HasPrefix(r.Name, "preset:"+p.Name+"/") {
				t.Errorf("%s: rule %+v", p.Name, r)
			}
		}
		var body []string
		for _, l := range strings.Split(string(p.Source), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				body = append(body, l)
			}
		}
		if b := strings.Join(body, "\n"); strings.Contains(b, "secrets") || strings.Contains(b, "allow_foreign_credentials") {
			t.Errorf("%s mentions secrets or foreign credentials", p.Name)
		}
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("presets %v, want %v", names, want)
	}
}

func TestPresetDecisions(t *testing.T) {
	t.Parallel()
	deny := "deny"
	name := "no-count"
	cfg, err := Validate("test", &Sections{Network: &Network{
		Presets: []string{"anthropic", "openai", "github"},
		// The user's own rules come first: this deny wins over the preset.
		Rules: []Rule{{Name: &name, Action: &deny, Hosts: []string{"api.anthropic.com"}, Paths: []string{"/v1/messages/count_tokens"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, method, path string
		allow              bool
	}{
		{"api.anthropic.com", "POST", "/v1/messages", true},
		{"api.anthropic.com", "GET", "/v1/models", true},
		{"api.anthropic.com", "POST", "/v1/messages/count_tokens", false}, // the user's deny
		{"api.anthropic.com", "POST", "/v1/files", false},                 // uploads left out
		{"api.anthropic.com", "POST", "/v1/messages/batches", false},
		{"api.anthropic.com", "POST", "/v1/messages/batches/x/cancel", false},
		{"api.openai.com", "POST", "/v1/responses/x/cancel", false},
		{"api.openai.com", "GET", "/v1/responses/resp_1", true},
		{"api.anthropic.com", "DELETE", "/v1/messages", false},
		{"api.openai.com", "POST", "/v1/responses", true},
		{"api.openai.com", "POST", "/v1/files", false},
		{"api.openai.com", "POST", "/v1/uploads", false},
		{"api.openai.com", "POST", "/v1/vector_stores", false},
		{"github.com", "GET", "/owner/repo.git/info/refs", true},
		{"github.com", "POST", "/owner/repo.git/git-upload-pack", true},
		{"github.com", "POST", "/owner/repo.git/git-receive-pack", false}, // no push
		{"api.github.com", "POST", "/repos/o/r/issues", false},
		{"evil.example", "GET", "/", false},
		{"api.anthropic.com.evil.example", "POST", "/v1/messages", false},
	} {
		h, err := policy.NormalizeHost(tc.host)
		if err != nil {
			t.Fatal(err)
		}
		d := cfg.Policy.Decide(policy.Request{Proto: policy.ProtoHTTP, Host: h, Port: 443, Method: tc.method, Path: tc.path})
		if d.Allow != tc.allow {
			t.Errorf("%s %s%s: allow %v (%s), want %v", tc.method, tc.host, tc.path, d.Allow, d.Reason, tc.allow)
		}
	}
}

// The vscode preset (docs/devcontainer.md) allows the server and
// extension downloads and the gallery query, nothing else; without it
// (the default) none of them is allowed.
func TestPresetVSCode(t *testing.T) {
	t.Parallel()
	allow := "allow"
	name := "other"
	on, err := Validate("test", &Sections{Network: &Network{Presets: []string{"vscode"}}})
	if err != nil {
		t.Fatal(err)
	}
	off, err := Validate("test", &Sections{Network: &Network{Rules: []Rule{{Name: &name, Action: &allow, Hosts: []string{"example.com"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, method, path string
		allow              bool
	}{
		{"update.code.visualstudio.com", "GET", "/commit:abc/server-linux-x64/stable", true},
		{"vscode.download.prss.microsoft.com", "GET", "/dbazure/download/stable/abc/vscode-server-linux-x64.tar.gz", true},
		{"main.vscode-cdn.net", "GET", "/x", true},
		{"marketplace.visualstudio.com", "POST", "/_apis/public/gallery/extensionquery", true},
		{"ms-python.gallerycdn.vsassets.io", "GET", "/extensions/ms-python/python/1/Microsoft.VisualStudio.Services.VSIXPackage", true},
		{"marketplace.visualstudio.com", "POST", "/_apis/public/gallery/publishers/x/extensions", false}, // publishing
		{"marketplace.visualstudio.com", "PUT", "/_apis/public/gallery/extensionquery", false},
		{"update.code.visualstudio.com", "POST", "/api/update", false},
		{"x.rel.tunnels.api.visualstudio.com", "GET", "/", false},
		{"global.rel.tunnels.api.visualstudio.com", "GET", "/", false},
		{"mobile.events.data.microsoft.com", "POST", "/OneCollector/1.0", false},
		{"vscode-sync.trafficmanager.net", "GET", "/", false},
		{"attacker.blob.core.windows.net", "GET", "/", false},
		{"vscode-cdn.net.evil.example", "GET", "/", false},
	} {
		h, err := policy.NormalizeHost(tc.host)
		if err != nil {
			t.Fatal(err)
		}
		req := policy.Request{Proto: policy.ProtoHTTP, Host: h, Port: 443, Method: tc.method, Path: tc.path}
		if d := on.Policy.Decide(req); d.Allow != tc.allow {
			t.Errorf("with the preset, %s %s%s: allow %v (%s), want %v", tc.method, tc.host, tc.path, d.Allow, d.Reason, tc.allow)
		}
		if d := off.Policy.Decide(req); d.Allow {
			t.Errorf("without the preset, %s %s%s is allowed (%s)", tc.method, tc.host, tc.path, d.Reason)
		}
	}
}

func TestPresetErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		presets []string
		want    string
	}{
		{[]string{"anthropic", "nope"}, `test: network.presets[1]: unknown preset "nope" (built in: anthropic,`},
		{[]string{"npm", "npm"}, `test: network.presets[1]: "npm" is named twice`},
	} {
		_, err := Validate("test", &Sections{Network: &Network{Presets: tc.presets}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.presets, err, tc.want)
		}
	}
	// Decoded from TOML, a preset list is trusted config like the rules.
	s, err := Decode("cfg.toml", []byte("[network]\npolicy = \"proxied\"\npresets = [\"pypi\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := Validate("cfg.toml", s); err != nil || cfg.Policy.Len() != 1 {
		t.Fatalf("cfg %+v err %v", cfg, err)
	}
}

// A preset file can hold nothing but allow rules: secrets, deny rules and
// credential opt-outs are refused.
func TestParsePresetRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"version = 1\n[[rules]]\nname = \"a\"\nhosts = [\"a.com\"]\n[secrets.k]\nenv = \"K\"\n", "missing in the target"},
		{"version = 1\n[[rules]]\nname = \"a\"\naction = \"deny\"\nhosts = [\"a.com\"]\n", "presets only allow"},
		{"version = 1\n[[rules]]\nname = \"a\"\nallow_foreign_credentials = true\nhosts = [\"a.com\"]\n", "foreign credentials"},
		{"version = 2\n[[rules]]\nname = \"a\"\nhosts = [\"a.com\"]\n", "version 2"},
		{"version = 1\n", "no rules"},
		{"version = 1\n[[rules]]\nhosts = [\"a.com\"]\n", "no name"},
	} {
		_, err := parsePreset("x", "presets/x.toml", []byte(tc.src))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "presets/x.toml") {
			t.Errorf("%q: err = %v, want %q", tc.src, err, tc.want)
		}
	}
}

// PresetList names every preset on a line of its own, followed by its
// rules indented.
func TestPresetList(t *testing.T) {
	t.Parallel()
	list, err := PresetList()
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := Presets()
	rules := 0
	for _, p := range ps {
		if !strings.Contains(list, "\n"+p.Name+"\t"+p.Description+"\n") && !strings.HasPrefix(list, p.Name+"\t") {
			t.Errorf("%s not listed", p.Name)
		}
		rules += len(p.Rules)
	}
	if n := strings.Count(list, "\n  allow "); n != rules {
		t.Errorf("%d rule lines, want %d:\n%s", n, rules, list)
	}
}
