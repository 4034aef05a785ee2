package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddRule(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	orig := "version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nname = \"first\"\naction = \"deny\"\nhosts = [\"api.test\"]\npaths = [\"/admin\"]\n[network.dns.overrides]\n\"api.test\" = [\"127.0.0.2\"]"
	os.WriteFile(file, []byte(orig), 0o640)
	for _, r := range []AddedRule{
		{Name: "asked a1: api.test", Comment: "added by vak gateway allow a1 --always\nnot a new line", Host: "api.test", Port: 443, Method: "GET", PathPrefix: "/v1/"},
		{Name: "asked b2", Comment: "deny", Deny: true, Host: "203.0.113.9", Port: 8443},
	} {
		if got, err := AddRule(file, r); err != nil || got != file {
			t.Fatalf("AddRule(%+v) = %q, %v", r, got, err)
		}
	}
	data, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(data), orig+"\n") {
		t.Fatalf("the existing config was changed:\n%s", data)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	cfg, err := Load(Options{UserFile: file})
	if err != nil {
		t.Fatal(err)
	}
	rules := cfg.Egress.Policy.Rules()
	if len(rules) != 3 || rules[0].Name != "first" || rules[1].Name != "asked a1: api.test" || rules[2].Name != "asked b2" {
		t.Fatalf("rules %+v", rules)
	}
	if strings.Count(string(data), "\n# ") != 2 || strings.Contains(string(data), "\nnot a new line") {
		t.Errorf("the comments:\n%s", data)
	}
	// A config the rule cannot be added to (rules given inline) is left
	// as it was.
	inline := "version = 1\n[network]\npolicy = \"proxied\"\nrules = [{hosts = [\"a.test\"]}]\n"
	os.WriteFile(file, []byte(inline), 0o600)
	if _, err := AddRule(file, AddedRule{Name: "x", Host: "b.test"}); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("AddRule into inline rules: %v", err)
	}
	if data, _ := os.ReadFile(file); string(data) != inline {
		t.Fatalf("a failed AddRule changed the file:\n%s", data)
	}
	// A missing user config is created with the rule.
	fresh := filepath.Join(dir, "sub", "config.toml")
	if _, err := AddRule(fresh, AddedRule{Name: "x", Host: "b.test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(Options{UserFile: fresh}); err != nil {
		t.Fatal(err)
	}
}

// FuzzAddRule: what an ask names comes from the sandbox (host, method,
// path). Whatever they hold, AddRule either refuses and leaves the file as
// it was, or adds exactly one rule holding exactly those values: nothing
// the agent puts in a path or name can add another rule or key.
func FuzzAddRule(f *testing.F) {
	f.Add("api.test", "GET", "/v1/", "ask 1", false)
	f.Add("api.test", "GET", "/x\"]\n[[network.rules]]\nhosts = [\"*\"]\n#", "a\nb", false)
	f.Add("203.0.113.9", "PUT", "/\x01", "c\x7f", true)
	f.Add("h\"]\nhosts=[\"*", "GET", "/", "\u2028", false)
	f.Fuzz(func(t *testing.T, host, method, path, comment string, deny bool) {
		dir := t.TempDir()
		file := filepath.Join(dir, "config.toml")
		orig := "version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nname = \"first\"\nhosts = [\"first.test\"]\n"
		os.WriteFile(file, []byte(orig), 0o600)
		r := AddedRule{Name: "asked x: " + host, Comment: comment, Deny: deny, Host: host, Port: 443, Method: method, PathPrefix: path}
		if _, err := AddRule(file, r); err != nil {
			if data, _ := os.ReadFile(file); string(data) != orig {
				t.Fatalf("a refused rule changed the file:\n%s", data)
			}
			return
		}
		cfg, err := Load(Options{UserFile: file})
		if err != nil {
			t.Fatalf("AddRule wrote a config that does not load: %v", err)
		}
		rules := cfg.Egress.Policy.Rules()
		if len(rules) != 2 || rules[0].Name != "first" {
			t.Fatalf("rules after AddRule: %+v", rules)
		}
		got := rules[1]
		if got.Name != r.Name || len(got.Ports) != 1 || got.Ports[0] != 443 || len(got.Methods) > 1 || len(got.Paths) > 1 || len(got.Hosts)+len(got.CIDRs) != 1 {
			t.Fatalf("the added rule is not the answer's: %+v (from %+v)", got, r)
		}
		for _, h := range got.Hosts {
			if h.String() != host && !strings.EqualFold(h.String(), host) {
				t.Fatalf("the added rule's host %q is not the ask's %q", h, host)
			}
		}
	})
}
