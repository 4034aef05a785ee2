package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/testenv"
)

// TestProxiedGatewayDownExits69: when the proxied network cannot come up
// (no policy for the gateway, or a gateway that cannot start), `vak session
// create --network proxied` fails like `vak run --network proxied`: status
// 69 (unavailable), nothing created, nothing run.
func TestProxiedGatewayDownExits69(t *testing.T) {
	img := testenv.Image(t)
	missingCA := filepath.Join(t.TempDir(), "missing-ca.pem")
	tests := []struct {
		name    string
		network string // config sections besides [sandbox]
		want    string // in the error
	}{
		{"no gateway policy", "", "needs [network] rules"},
		{"gateway cannot start", fmt.Sprintf("[network]\npolicy = \"proxied\"\n[[network.rules]]\nhosts = [\"example.com\"]\n[gateway]\nextra_ca_bundles = [%q]\n", missingCA), "extra_ca_bundles[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_STATE_HOME", t.TempDir())
			ws := tempWorkspace(t)
			cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \""+img+"\"\n"+tc.network)
			run := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
			labels := []string{"--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", "vak.test.run=" + run}
			t.Cleanup(func() {
				out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=vak.test.run="+run).Output()
				if ids := strings.Fields(string(out)); len(ids) > 0 {
					exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
					t.Errorf("left containers behind: %v", ids)
				}
			})

			code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--network", "proxied", "--", "sh", "-c", "echo ran")
			if code != ExitUnavailable || strings.Contains(out, "ran") || !strings.Contains(errs, tc.want) {
				t.Fatalf("vak run: exit %d, want %d; stdout %q; stderr %q (want %q)", code, ExitUnavailable, out, errs, tc.want)
			}
			code, out, errs = session(t, cfg, labels, "", "create", "-w", ws, "--network", "proxied")
			if code != ExitUnavailable || !strings.Contains(errs, tc.want) {
				t.Fatalf("vak session create: exit %d, want %d (like vak run); stdout %q; stderr %q (want %q)", code, ExitUnavailable, out, errs, tc.want)
			}
			// Positive control: without --network proxied the same session
			// is created, so the failure above was the network's.
			if tc.network == "" {
				code, out, errs = session(t, cfg, labels, "", "create", "-w", ws)
				if code != 0 {
					t.Fatalf("control: session create without --network: %d %s %s", code, out, errs)
				}
				if code, _, errs := session(t, cfg, labels, "", "rm", strings.TrimSpace(out)); code != 0 {
					t.Fatalf("rm: %d %s", code, errs)
				}
			}
		})
	}
}

// TestRunProxiedWarm: vak run keeps its workspace's proxied network warm
// for session.run_network_idle, so the next run reuses the same gateway; vak
// gc removes it once that time has passed; with "0" each run removes it.
func TestRunProxiedWarm(t *testing.T) {
	img := testenv.Image(t)
	for _, tc := range []struct {
		name string
		idle string
		warm bool
	}{{"warm", "1h", true}, {"cold", "0", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_STATE_HOME", t.TempDir())
			ws := tempWorkspace(t)
			cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \""+img+"\"\n[network]\npolicy = \"proxied\"\npresets = [\"npm\"]\n[session]\nrun_network_idle = \""+tc.idle+"\"\n")
			run := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
			labels := []string{"--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", "vak.test.run=" + run}
			t.Cleanup(func() {
				for _, kind := range []string{"container", "network", "volume"} {
					out, _ := exec.Command("docker", kind, "ls", "-aq", "--filter", "label=vak.test.run="+run).Output()
					if kind != "container" {
						out, _ = exec.Command("docker", kind, "ls", "-q", "--filter", "label=vak.test.run="+run).Output()
					}
					if ids := strings.Fields(string(out)); len(ids) > 0 {
						exec.Command("docker", append([]string{kind, "rm", "-f"}, ids...)...).Run()
					}
				}
			})
			topology := func() string {
				out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label="+proxynet.LabelKey+"="+proxynet.Key(ws)).Output()
				if err != nil {
					t.Fatal(err)
				}
				f := strings.Fields(string(out))
				slices.Sort(f)
				return strings.Join(f, " ")
			}
			vakRun := func() {
				t.Helper()
				args := append([]string{"run"}, labels...)
				args = append(args, "-w", ws, "--network", "proxied", "--", "sh", "-c", "test -n \"$SSL_CERT_FILE\" && echo ran")
				code, out, errs := vakMain(t, cfg, args...)
				if code != 0 || !strings.Contains(out, "ran") {
					t.Fatalf("vak run --network proxied: exit %d; %q %q", code, out, errs)
				}
			}
			vakRun()
			first := topology()
			if !tc.warm {
				if first != "" {
					t.Fatalf("run_network_idle = 0 left the topology up: %s", first)
				}
				return
			}
			if first == "" {
				t.Fatal("the warm topology is gone after the run")
			}
			vakRun()
			if second := topology(); second != first {
				t.Fatalf("the second run did not reuse the warm topology: %s, then %s", first, second)
			}
			// Not expired: gc keeps it.
			gc := func() string {
				code, out, errs := vakMain(t, cfg, "gc", "--label", "vak.test.run="+run)
				if code != 0 {
					t.Fatalf("vak gc: %d %q %q", code, out, errs)
				}
				return out
			}
			gc()
			if topology() != first {
				t.Fatal("vak gc removed a warm topology before its time")
			}
			state, err := paths.EnsureStateDir()
			if err != nil {
				t.Fatal(err)
			}
			if err := proxynet.KeepWarm(state, ws, time.Now().Add(-time.Minute)); err != nil {
				t.Fatal(err)
			}
			if out := gc(); !strings.Contains(out, "removed proxied network "+proxynet.Key(ws)) {
				t.Errorf("vak gc output: %q", out)
			}
			if left := topology(); left != "" {
				t.Fatalf("the expired topology is still there: %s", left)
			}
		})
	}
}

// TestRunProxiedWarmPlaceholders: warm runs get the running gateway's
// placeholders (read once per gateway start and configuration, then from
// the state dir), and a configuration that adds a secret is seen by the
// next run.
func TestRunProxiedWarmPlaceholders(t *testing.T) {
	img := testenv.Image(t)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	ws := tempWorkspace(t)
	run := "warm-placeholders-" + strconv.FormatInt(time.Now().UnixNano()%100000, 10)
	labels := []string{"--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", "vak.test.run=" + run}
	t.Cleanup(func() {
		for _, kind := range []string{"container", "network", "volume"} {
			args := []string{kind, "ls", "-q", "--filter", "label=vak.test.run=" + run}
			if kind == "container" {
				args = []string{kind, "ls", "-aq", "--filter", "label=vak.test.run=" + run}
			}
			out, _ := exec.Command("docker", args...).Output()
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				exec.Command("docker", append([]string{kind, "rm", "-f"}, ids...)...).Run()
			}
		}
	})
	base := "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"" + img + "\"\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nname = \"api\"\nhosts = [\"api.example.test\"]\n[session]\nrun_network_idle = \"1h\"\n" +
		"[secrets.TOK_A]\nvalue = \"real-secret-aaaa-1234\"\nhosts = [\"api.example.test\"]\n"
	cfg := writeConfig(t, base)
	env := func() (a, b string) {
		t.Helper()
		args := append([]string{"run"}, labels...)
		args = append(args, "-w", ws, "--network", "proxied", "--", "sh", "-c", "echo A=$TOK_A; echo B=$TOK_B")
		code, out, errs := vakMain(t, cfg, args...)
		if code != 0 {
			t.Fatalf("vak run --network proxied: exit %d; %q %q", code, out, errs)
		}
		if strings.Contains(out+errs, "real-secret") {
			t.Fatalf("a secret value reached the sandbox or the output: %q %q", out, errs)
		}
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, "A="); ok {
				a = v
			}
			if v, ok := strings.CutPrefix(l, "B="); ok {
				b = v
			}
		}
		return a, b
	}
	a1, b1 := env()
	if a1 == "" || b1 != "" {
		t.Fatalf("first run: TOK_A=%q TOK_B=%q (want a placeholder, and nothing)", a1, b1)
	}
	if a2, _ := env(); a2 != a1 {
		t.Fatalf("a warm run got another placeholder: %q, then %q", a1, a2)
	}
	// A new secret: the gateway reloads and the next run sees it.
	if err := os.WriteFile(cfg, []byte(base+"[secrets.TOK_B]\nvalue = \"real-secret-bbbb-5678\"\nhosts = [\"api.example.test\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, b3 := env(); b3 == "" {
		t.Fatal("the run after a secret was added has no placeholder for it (stale placeholders)")
	}
}
