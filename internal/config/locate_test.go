package config

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestValidationErrorLines: validation errors (not only decode errors)
// carry the line of the key at fault, as the README promises.
func TestValidationErrorLines(t *testing.T) {
	tests := []struct {
		name, doc string
		key       string
		line      int
	}{
		{"mode", "version = 1\n[sandbox]\nbackend = \"auto\"\nmode = \"bogus\"\n", "sandbox.mode", 4},
		{"limits", "version = 1\n[sandbox]\n[sandbox.limits]\ncpus = 2\nmemory = \"lots\"\n", "sandbox.limits.memory", 5},
		{"read path element", "version = 1\n\n[sandbox]\nread = [\"relative/dir\"]\n", "sandbox.read[0]", 4},
		{"env name", "version = 1\n[sandbox]\nenv = [\"GOOD\", \"not-a-name\"]\n", "sandbox.env[1]", 3},
		{"session", "version = 1\n[session]\npool_size = 1\nidle_timeout = \"1ms\"\n", "session.idle_timeout", 4},
		{"second rule of an array of tables", "version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nhosts = [\"a.test\"]\n[[network.rules]]\nname = \"b\"\nhosts = [\"a*b.test\"]\n", "network.rules[1].hosts[0]", 8},
		{"network policy", "version = 1\n[network]\n# comment\npolicy = \"sideways\"\n", "network.policy", 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("config.toml", []byte(tc.doc))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want a *config.Error", err)
			}
			if e.Key != tc.key || e.Line != tc.line {
				t.Fatalf("error %q: key %q line %d, want key %q line %d", err, e.Key, e.Line, tc.key, tc.line)
			}
			if !strings.HasPrefix(err.Error(), "config.toml:"+strconv.Itoa(tc.line)+": ") {
				t.Errorf("message %q does not start with file:line", err)
			}
		})
	}
}

func TestLocate(t *testing.T) {
	doc := "version = 1\n[network.dns.overrides]\n\"svc.corp.example\" = [\"10.0.0.1\"]\n[secrets.TOKEN]\nvalue = \"x\"\n"
	tests := []struct {
		key  string
		line int
	}{
		{"network.dns.overrides.\"svc.corp.example\"", 3},
		{"secrets.TOKEN.value", 5},
		{"secrets.TOKEN.hosts", 4}, // missing key: its table's header
		{"sandbox.mode", 0},
	}
	for _, tc := range tests {
		if got := locate([]byte(doc), tc.key); got != tc.line {
			t.Errorf("locate(%q) = %d, want %d", tc.key, got, tc.line)
		}
	}
}
