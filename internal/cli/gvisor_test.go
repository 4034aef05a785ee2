package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/testenv"
)

// vak run under gVisor (sandbox.runtime, --runtime): the command (also
// with -i) runs on gVisor's kernel and writes the workspace as the caller; a runtime the
// Engine does not list, or gVisor with a proxied network, refuses before
// anything runs (status 69, naming the runtime and the key); a session
// refuses the key (status 78) rather than run under the default runtime.
func TestRunGVisor(t *testing.T) {
	rt := testenv.RequireGVisor(t)
	img := testenv.Image(t)
	base := "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"" + img + "\"\n"
	ws := tempWorkspace(t)

	for _, tc := range []struct {
		name   string
		config string
		flags  []string
	}{
		{"flag", base, []string{"--runtime", rt}},
		{"config", base + "runtime = \"" + rt + "\"\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(filepath.Join(ws, "f"))
			args := append(append([]string{"run", "-w", ws}, tc.flags...), "--", "sh", "-c", "dmesg 2>&1 | head -1; echo written > f")
			code, out, errs := vakMain(t, writeConfig(t, tc.config), args...)
			if code != 0 || !strings.Contains(out, "Starting gVisor") {
				t.Fatalf("exit %d, out %q, want gVisor's kernel: %s", code, out, errs)
			}
			if data, err := os.ReadFile(filepath.Join(ws, "f")); string(data) != "written\n" {
				t.Fatalf("the workspace write: %q %v", data, err)
			}
		})
	}
	t.Run("interactive", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"--config", writeConfig(t, base), "run", "-i", "-w", ws, "--runtime", rt, "--", "sh", "-c", "cat; dmesg 2>&1 | head -1"},
			Stdio{In: strings.NewReader("from-stdin\n"), Out: &out, Err: &errb})
		if code != 0 || !strings.HasPrefix(out.String(), "from-stdin\n") || !strings.Contains(out.String(), "Starting gVisor") {
			t.Fatalf("-i under %s: exit %d, out %q: %s", rt, code, out.String(), errb.String())
		}
	})
	// Control: the same config without the runtime runs on the host's kernel.
	if code, out, errs := vakMain(t, writeConfig(t, base), "run", "-w", ws, "--", "sh", "-c", "dmesg 2>&1 | head -1"); code != 0 || strings.Contains(out, "Starting gVisor") {
		t.Fatalf("control: exit %d, out %q: %s", code, out, errs)
	}

	marker := filepath.Join(ws, "ran")
	refused := []struct {
		name   string
		config string
		flags  []string
		want   []string
	}{
		{"unlisted runtime", base, []string{"--runtime", "vak-no-such-runtime"}, []string{`"vak-no-such-runtime"`, "lists no such runtime", rt, "daemon.json"}},
		{"proxied network", base + "runtime = \"" + rt + "\"\n[network]\npolicy = \"proxied\"\n", nil, []string{`runtime "` + rt + `"`, "--network proxied", "default runtime", "--network none"}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run", "-w", ws}, tc.flags...), "--", "touch", marker)
			code, out, errs := vakMain(t, writeConfig(t, tc.config), args...)
			if code != ExitUnavailable {
				t.Fatalf("exit %d, want %d: %s %s", code, ExitUnavailable, out, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr does not name %s: %s", w, errs)
				}
			}
			if strings.Contains(errs, "starting the egress gateway") {
				t.Errorf("a gateway was started for a run that cannot use it: %s", errs)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran")
			}
		})
	}
	t.Run("doctor", func(t *testing.T) {
		cfg := writeConfig(t, base+"runtime = \""+rt+"\"\n")
		code, out, errs := vakMain(t, cfg, "doctor", "-w", ws)
		if code != 0 || !strings.Contains(out, "runtime "+rt+" (sandbox.runtime)") {
			t.Errorf("doctor with the runtime: exit %d:\n%s%s", code, out, errs)
		}
		code, out, errs = vakMain(t, cfg, "doctor", "-w", ws, "--runtime", "vak-no-such-runtime")
		if code != ExitUnavailable || !strings.Contains(out, `docker    command  unavailable: the Docker Engine lists no such runtime: "vak-no-such-runtime"`) {
			t.Errorf("doctor with an unlisted runtime: exit %d:\n%s%s", code, out, errs)
		}
	})
	t.Run("session", func(t *testing.T) {
		cfg := writeConfig(t, base+"runtime = \""+rt+"\"\n")
		code, out, errs := vakMain(t, cfg, "session", "create", "-w", ws)
		if code != ExitConfig {
			t.Fatalf("exit %d, want %d: %s %s", code, ExitConfig, out, errs)
		}
		for _, w := range []string{`sandbox.runtime = "` + rt + `"`, cfg, "vak run --runtime"} {
			if !strings.Contains(errs, w) {
				t.Errorf("stderr does not name %s: %s", w, errs)
			}
		}
	})
}
