// Command nesteddocker measures the nested Docker engine (issue 14): the
// sidecar's time to ready (create -> `docker info` answers on the raw
// socket, and as a --docker session waits: through the guard as well; a
// fresh data volume each time), and the guard's overhead over the
// raw socket for `docker ps` and `docker run --rm IMAGE true` (also against
// the raw socket asked for what the guard injects: the trust bind, the CA
// variable, the DNS server), timed inside the sidecar (Debian's docker
// 20.10 CLI) and interleaved in a rotating order.
//
// With -sessions N it also times --docker sessions through the vak CLI,
// cold and claimed from the warm pool, interleaved in a rotating order:
// `vak session create --docker` alone, and create until `docker info`
// answers through the guard from inside the session (`vak session exec ID
// -- docker info`), next to the sidecar alone started the raw way (the
// same image and guard through the Engine API, create -> `docker info`
// answers through the guard, no session). The pool is filled (untimed)
// before each warm sample. With -against BINARY (e.g. a vak built from
// main), that binary's claims are timed too, in the same rotation, each
// binary claiming from a pool it filled itself.
//
//	go run ./bench/nesteddocker -n 10 -k 40 -sessions 10
//	go run ./bench/nesteddocker -n 0 -k 0 -sessions 10 -against /tmp/vak-main
//
// Needs root (the sidecar image is built by debootstrap if missing) and
// the test image (scripts/build-test-images.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/bench/internal/stats"
	"vak/internal/dockerd"
	"vak/internal/engine"
)

func main() {
	n := flag.Int("n", 10, "sidecar starts to time")
	k := flag.Int("k", 40, "docker ps / docker run pairs to time")
	img := flag.String("image", "vak-test:latest", "inner test image")
	sessions := flag.Int("sessions", 0, "--docker session creates to time, cold and from the warm pool (0: skip)")
	against := flag.String("against", "", "with -sessions: another vak binary whose warm-pool claims are timed in the same rotation")
	flag.Parse()
	if *sessions > 0 {
		if err := runSessions(*sessions, *img, *against); err != nil {
			fmt.Fprintln(os.Stderr, "nesteddocker:", err)
			os.Exit(1)
		}
		if *n == 0 && *k == 0 {
			return
		}
	}
	if err := run(*n, *k, *img); err != nil {
		fmt.Fprintln(os.Stderr, "nesteddocker:", err)
		os.Exit(1)
	}
}

func run(n, k int, img string) error {
	ctx := context.Background()
	cli, err := engine.New()
	if err != nil {
		return err
	}
	sb, cleanup, err := newSidecarBench(ctx, cli, img)
	defer cleanup()
	if err != nil {
		return err
	}
	spec, guardArgs, guard := sb.spec, sb.guardArgs, sb.guard
	ready := &stats.Sample{Name: "sidecar ready (cold, fresh volume)"}
	readyGuard := &stats.Sample{Name: "sidecar ready through the guard (cold, fresh volume)"}
	for i := 0; i < n; i++ {
		for _, c := range []struct {
			s     *stats.Sample
			guard bool
		}{{ready, false}, {readyGuard, true}} {
			s := spec(i)
			if c.guard {
				s.Guard, s.GuardSocket = guardArgs, guard
			}
			d, err := stats.Time(func() error { _, err := dockerd.Start(ctx, cli, s, 2*time.Minute); return err })
			dockerd.Remove(ctx, cli, s.Name, s.DataVolume)
			if err != nil {
				return err
			}
			c.s.Add(d)
		}
	}
	fmt.Printf("## sidecar ready\n\n%s\n", stats.Table(ready, readyGuard))

	s := spec(n)
	id, err := dockerd.Start(ctx, cli, s, 2*time.Minute)
	if err != nil {
		return err
	}
	defer dockerd.Remove(ctx, cli, s.Name, s.DataVolume)
	if err := stats.RunQuiet(append([]string{"docker", "exec", "-d", id}, guardArgs...)...); err != nil {
		return err
	}
	save := exec.Command("sh", "-c", "docker save "+img+" | docker exec -i "+id+" docker -H unix://"+dockerd.RawSocket+" load")
	if out, err := save.CombinedOutput(); err != nil {
		return fmt.Errorf("load %s: %w: %s", img, err, out)
	}
	inside := func(sock, args string) (time.Duration, error) {
		script := `t0=$(date +%s%N); docker -H unix://` + sock + ` ` + args + ` >/dev/null || exit 1; t1=$(date +%s%N); echo $((t1-t0))`
		out, err := exec.Command("docker", "exec", id, "sh", "-c", script).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s via %s: %w: %s", args, sock, err, out)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		return time.Duration(ns), err
	}
	// The guard adds a read-only bind, the CA variable and the DNS server
	// to every container it creates: the third docker run contender asks
	// the raw socket for the same, so the difference to the guard is the
	// guard's own cost, not the engine's work for the injected bind.
	injected := "run --rm -v /etc/vak/trust:/etc/vak/trust:ro -e SSL_CERT_FILE=/etc/vak/trust/vak-ca.pem --dns 10.231.9.1 " + img + " true"
	for _, c := range []struct{ title, args, same string }{
		{"docker ps", "ps -q", ""},
		{"docker run --rm IMAGE true", "run --rm " + img + " true", injected},
	} {
		raw, guarded := &stats.Sample{Name: c.title + " (raw socket)"}, &stats.Sample{Name: c.title + " (guard)"}
		type contender struct {
			s          *stats.Sample
			sock, args string
		}
		cs := []contender{{raw, dockerd.RawSocket, c.args}, {guarded, guard, c.args}}
		if c.same != "" {
			cs = append(cs, contender{&stats.Sample{Name: c.title + " (raw socket, the guard's injections)"}, dockerd.RawSocket, c.same})
		}
		for _, p := range cs { // warm every contender
			if _, err := inside(p.sock, p.args); err != nil {
				return err
			}
		}
		for i := 0; i < k; i++ {
			// The order rotates: a run leaves the engine cleaning up after
			// it, which the next call pays, so a fixed order would favour
			// whichever contender comes after the cheapest.
			for j := range cs {
				p := cs[(i+j)%len(cs)]
				d, err := inside(p.sock, p.args)
				if err != nil {
					return err
				}
				p.s.Add(d)
			}
		}
		samples := make([]*stats.Sample, len(cs))
		for i, p := range cs {
			samples[i] = p.s
		}
		fmt.Printf("## %s\n\n%s\n", c.title, stats.Table(samples[0], samples[1:]...))
	}
	return nil
}

// sidecarBench starts bench sidecars: the sidecar image, a static vak for
// the guard, a trust dir, and a container whose network namespace they join
// (as a session's sidecar joins the netclient's).
type sidecarBench struct {
	spec      func(i int) dockerd.Sidecar
	guardArgs []string
	guard     string
}

// withGuard is spec(i) with the guard started by the entrypoint, ready
// when `docker info` answers through it (as a --docker session waits).
func (b sidecarBench) withGuard(i int) dockerd.Sidecar {
	s := b.spec(i)
	s.Guard, s.GuardSocket = b.guardArgs, b.guard
	return s
}

func newSidecarBench(ctx context.Context, cli *client.Client, img string) (sidecarBench, func(), error) {
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	tag, err := dockerd.EnsureImage(ctx, cli, dockerd.DefaultRecipe, os.Stderr)
	if err != nil {
		return sidecarBench{}, cleanup, err
	}
	vak, err := stats.BuildVak()
	if err != nil {
		return sidecarBench{}, cleanup, err
	}
	undo = append(undo, func() { os.RemoveAll(filepath.Dir(vak)) })
	os.Chmod(filepath.Dir(vak), 0o755)
	trust, err := os.MkdirTemp("", "vak-bench-trust-")
	if err != nil {
		return sidecarBench{}, cleanup, err
	}
	undo = append(undo, func() { os.RemoveAll(trust) })
	os.Chmod(trust, 0o755)
	// Any PEM certificate will do for the sidecar's store: the host's first.
	ca, err := firstCert()
	if err != nil {
		return sidecarBench{}, cleanup, err
	}
	if err := os.WriteFile(filepath.Join(trust, "vak-ca.pem"), ca, 0o644); err != nil {
		return sidecarBench{}, cleanup, err
	}
	owner := fmt.Sprintf("vak-bench-nsowner-%d", os.Getpid())
	if err := stats.RunQuiet("docker", "run", "-d", "--label", "vak.bench=1", "--label", "vak.test=1", "--name", owner, img, "sleep", "3600"); err != nil {
		return sidecarBench{}, cleanup, err
	}
	undo = append(undo, func() { stats.RunQuiet("docker", "rm", "-f", owner) })
	spec := func(i int) dockerd.Sidecar {
		name := fmt.Sprintf("vak-bench-dockerd-%d-%d", os.Getpid(), i)
		return dockerd.Sidecar{
			Name: name, Image: tag, NetworkMode: "container:" + owner,
			Daemon:     dockerd.Daemon{Pool: netip.MustParsePrefix("10.213.0.0/16"), Gateway: netip.MustParseAddr("10.231.9.1")},
			TrustCA:    "/etc/vak/trust/vak-ca.pem",
			DataVolume: name + "-lib",
			Mounts: []mount.Mount{
				{Type: mount.TypeBind, Source: trust, Target: "/etc/vak/trust", ReadOnly: true},
				{Type: mount.TypeBind, Source: filepath.Dir(vak), Target: "/opt/vak", ReadOnly: true},
			},
			Labels: map[string]string{"vak.bench": "1", "vak.test": "1"},
		}
	}
	// Ready as a --docker session waits for it: the guard started by the
	// entrypoint, `docker info` answering on the raw socket and through
	// the guard.
	const guard = "/run/vak-guard/docker.sock"
	guardArgs := []string{"/opt/vak/vak", "dockerguard", "--listen", guard,
		"--upstream", dockerd.RawSocket, "--workspace", "/nonexistent-ws", "--trust-dir", "/etc/vak/trust",
		"--pool", "10.213.0.0/16", "--dns", "10.231.9.1", "--trust-env", "SSL_CERT_FILE=/etc/vak/trust/vak-ca.pem"}
	return sidecarBench{spec: spec, guardArgs: guardArgs, guard: guard}, cleanup, nil
}

func firstCert() ([]byte, error) {
	for _, f := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if i := strings.Index(string(data), "-----END CERTIFICATE-----"); i > 0 {
			return data[:i+len("-----END CERTIFICATE-----\n")], nil
		}
	}
	return nil, fmt.Errorf("no system CA bundle to take a certificate from")
}

// runSessions times --docker sessions through the vak CLI (a static vak,
// a user config with a proxied network and session.pool_size = 1, the
// test image plus the host's static docker CLI as the session image):
// cold creates, claims of a pair from the warm pool (this vak's and, with
// against, another binary's), and the sidecar alone started through the
// Engine API, in a rotating order.
func runSessions(n int, img, against string) error {
	ctx := context.Background()
	cli, err := engine.New()
	if err != nil {
		return err
	}
	sb, cleanup, err := newSidecarBench(ctx, cli, img)
	defer cleanup()
	if err != nil {
		return err
	}
	vak, err := stats.BuildVak()
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(vak))
	os.Chmod(filepath.Dir(vak), 0o755)
	dir, err := os.MkdirTemp("", "vak-bench-nds-")
	if err != nil {
		return err
	}
	dir, _ = filepath.EvalSymlinks(dir)
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	// The session image: the test image plus the host's docker CLI.
	cliPath, err := exec.LookPath("docker")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(cliPath)
	if err != nil {
		return err
	}
	ctxDir := filepath.Join(dir, "img")
	os.MkdirAll(filepath.Join(ctxDir, "root", "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(ctxDir, "root", "bin", "docker"), data, 0o755); err != nil {
		return err
	}
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM "+img+"\nCOPY root/ /\n"), 0o644)
	sessImg := fmt.Sprintf("vak-bench-dockercli:%d", os.Getpid())
	build := exec.Command("docker", "build", "-q", "--label", "vak.bench=1", "--label", "vak.test=1", "-t", sessImg, ctxDir)
	build.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w: %s", sessImg, err, out)
	}
	defer stats.RunQuiet("docker", "rmi", "-f", sessImg)
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(ws, 0o777)
	os.Chmod(ws, 0o777)
	state := filepath.Join(dir, "state")
	os.MkdirAll(filepath.Join(state, "vak"), 0o700)
	cfg := filepath.Join(dir, "config.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`version = 1
[sandbox]
backend = "docker"
image = %q
[network]
policy = "proxied"
[[network.rules]]
name = "nothing reachable"
hosts = ["bench.invalid"]
cidrs = ["192.0.2.1/32"]
[session]
pool_size = 1
`, sessImg)), 0o600)
	env := append(os.Environ(), "XDG_STATE_HOME="+state)
	vakRun := func(bin string, args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"--config", cfg}, args...)...)
		cmd.Env = env
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, errb.String())
		}
		if w := strings.TrimSpace(errb.String()); w != "" && strings.Contains(w, "warm pool") {
			return "", fmt.Errorf("%s %s: %s", bin, strings.Join(args, " "), w)
		}
		return strings.TrimSpace(out.String()), nil
	}
	defer func() {
		vakRun(vak, "session", "gc")
		vakRun(vak, "gc")
	}()
	labels := []string{"--label", "vak.bench=1", "--label", "vak.test=1"}
	create := append(append([]string{"session", "create"}, labels...), "-w", ws, "--network", "proxied", "--docker", "--no-refill", "--task")
	type contender struct {
		bin          string
		warm         bool
		create, info *stats.Sample
	}
	cs := []*contender{
		{vak, false, &stats.Sample{Name: "`vak session create --docker` (cold)"}, &stats.Sample{Name: "create → `docker info` through the guard in the session (cold)"}},
		{vak, true, &stats.Sample{Name: "`vak session create --docker` (claimed from the warm pool)"}, &stats.Sample{Name: "create → `docker info` through the guard in the session (warm pool)"}},
	}
	if against != "" {
		cs = append(cs, &contender{against, true, &stats.Sample{Name: "`vak session create --docker` (claimed, " + against + ")"}, &stats.Sample{Name: "create → `docker info` through the guard in the session (warm pool, " + against + ")"}})
	}
	raw := &stats.Sample{Name: "the sidecar alone, through the Engine API (create → `docker info` through the guard, fresh volume)"}
	one := func(c *contender, task string) (time.Duration, time.Duration, error) {
		if c.warm {
			if out, err := vakRun(c.bin, append(append([]string{"session", "pool", "fill"}, labels...), "-w", ws, "--network", "proxied", "--docker")...); err != nil || out != "started 1" {
				return 0, 0, fmt.Errorf("pool fill (%s): %v %s", c.bin, err, out)
			}
		}
		t0 := time.Now()
		id, err := vakRun(c.bin, append(create, task)...)
		if err != nil {
			return 0, 0, err
		}
		t1 := time.Now()
		defer vakRun(c.bin, "session", "rm", id)
		if _, err := vakRun(c.bin, "session", "exec", id, "--", "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
			return 0, 0, err
		}
		t2 := time.Now()
		slot, _ := exec.Command("docker", "inspect", "-f", `{{index .Config.Labels "vak.docker.slot"}}`, "vak-session-"+id).Output()
		if got := strings.HasPrefix(string(slot), "pool-"); got != c.warm {
			return 0, 0, fmt.Errorf("session %s: claimed from the pool %t, want %t", id, got, c.warm)
		}
		return t1.Sub(t0), t2.Sub(t0), nil
	}
	rawOne := func(i int) (time.Duration, error) {
		s := sb.withGuard(1000 + i)
		d, err := stats.Time(func() error { _, err := dockerd.Start(ctx, cli, s, 2*time.Minute); return err })
		dockerd.Remove(ctx, cli, s.Name, s.DataVolume)
		return d, err
	}
	for i := -1; i < n; i++ {
		// The order rotates (i = -1 is a warm-up, not recorded): whatever
		// runs after a create pays for its cleanup.
		k := len(cs) + 1
		for j := 0; j < k; j++ {
			idx := (i + 1 + j) % k
			if idx == len(cs) {
				d, err := rawOne(i + 1)
				if err != nil {
					return err
				}
				if i >= 0 {
					raw.Add(d)
				}
				continue
			}
			c := cs[idx]
			cd, ci, err := one(c, fmt.Sprintf("b%d-%d", i+1, idx))
			if err != nil {
				return err
			}
			if i >= 0 {
				c.create.Add(cd)
				c.info.Add(ci)
			}
		}
	}
	creates, infos := []*stats.Sample{}, []*stats.Sample{}
	for _, c := range cs[1:] {
		creates, infos = append(creates, c.create), append(infos, c.info)
	}
	fmt.Printf("## --docker session ready, cold and from the warm pool (n=%d)\n\n%s\n%s\n", n,
		stats.Table(cs[0].create, creates...), stats.Table(cs[0].info, append(infos, raw)...))
	if against != "" {
		fmt.Printf("### claims: this vak against %s\n\n%s\n", against, stats.Table(cs[2].info, cs[1].info))
	}
	return nil
}
