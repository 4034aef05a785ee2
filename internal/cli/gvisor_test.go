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
// anything runs (status 69, naming the runtime and the key); a session runs
// under the key too, snapshots included, and refuses a proxied network
// (status 78).
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
		if code != 0 || !strings.Contains(out, "runtime "+rt+" (sandbox.runtime)") ||
			!strings.Contains(out, "docker sessions: runtime "+rt+" (gVisor, --host-uds=create") || !strings.Contains(out, "snapshots too (--overlay2=none)") {
			t.Errorf("doctor with the runtime: exit %d:\n%s%s", code, out, errs)
		}
		code, out, errs = vakMain(t, cfg, "doctor", "-w", ws, "--runtime", "vak-no-such-runtime")
		if code != ExitUnavailable || !strings.Contains(out, `docker    command  unavailable: the Docker Engine lists no such runtime: "vak-no-such-runtime"`) ||
			!strings.Contains(out, `docker sessions: runtime vak-no-such-runtime: refused: `) {
			t.Errorf("doctor with an unlisted runtime: exit %d:\n%s%s", code, out, errs)
		}
	})
	t.Run("session", func(t *testing.T) {
		// A session under the runtime (the key, then the flag): created,
		// exec'd by a later process through its socket, snapshotted, a
		// session made from the snapshot, removed; a proxied one is
		// refused before anything is made (status 78, the runtime and the
		// key named).
		_, labels := sessionEnv(t)
		cfg := writeConfig(t, base+"runtime = \""+rt+"\"\n")
		code, out, errs := session(t, cfg, labels, "", "create", "-w", ws, "--task", "gvisor")
		if code != 0 {
			t.Fatalf("create: exit %d: %s", code, errs)
		}
		id := strings.TrimSpace(out)
		defer session(t, cfg, labels, "", "rm", id)
		if code, out, errs := session(t, cfg, labels, "", "exec", id, "--", "sh", "-c", "dmesg 2>&1 | head -1; echo s > from-session; echo pkg > $HOME/pkg"); code != 0 || !strings.Contains(out, "Starting gVisor") {
			t.Fatalf("exec: exit %d, out %q: %s", code, out, errs)
		}
		if data, err := os.ReadFile(filepath.Join(ws, "from-session")); string(data) != "s\n" {
			t.Fatalf("the session's workspace write: %q %v", data, err)
		}
		code, key, errs := session(t, cfg, labels, "", "snapshot", "-q", id, "-m", "step=gvisor")
		key = strings.TrimSpace(key)
		if code != 0 || key == "" {
			t.Fatalf("snapshot: exit %d %q: %s", code, key, errs)
		}
		// The flag instead of the key.
		code, out, errs = session(t, writeConfig(t, base), labels, "", "create", "-w", ws, "--task", "gvisor-from", "--from", key, "--runtime", rt)
		if code != 0 {
			t.Fatalf("create --from: exit %d: %s", code, errs)
		}
		id2 := strings.TrimSpace(out)
		defer session(t, cfg, labels, "", "rm", id2)
		if code, out, errs := session(t, cfg, labels, "", "exec", id2, "--", "sh", "-c", "cat $HOME/pkg; dmesg 2>&1 | head -1"); code != 0 || !strings.HasPrefix(out, "pkg\n") || !strings.Contains(out, "Starting gVisor") {
			t.Fatalf("exec in the session from the snapshot: exit %d, out %q: %s", code, out, errs)
		}
		for _, sid := range []string{id, id2} {
			if code, _, errs := session(t, cfg, labels, "", "rm", sid); code != 0 {
				t.Fatalf("rm %s: exit %d: %s", sid, code, errs)
			}
		}
		proxied := writeConfig(t, base+"runtime = \""+rt+"\"\n[network]\npolicy = \"proxied\"\n")
		code, _, errs = session(t, proxied, labels, "", "create", "-w", ws, "--task", "gvisor-proxied")
		if code != ExitConfig {
			t.Fatalf("a proxied session under %s: exit %d, want %d: %s", rt, code, ExitConfig, errs)
		}
		for _, w := range []string{`sandbox.runtime "` + rt + `"`, "--network proxied", "--network none"} {
			if !strings.Contains(errs, w) {
				t.Errorf("stderr does not name %s: %s", w, errs)
			}
		}
		if strings.Contains(errs, "starting the egress gateway") {
			t.Errorf("a gateway was started for a session that cannot use it: %s", errs)
		}
	})
}
