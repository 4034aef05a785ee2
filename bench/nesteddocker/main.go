// Command nesteddocker measures the nested Docker engine (issue 14): the
// sidecar's time to ready (create -> `docker info` answers on the raw
// socket, and as a --docker session waits: through the guard as well; a
// fresh data volume each time), and the guard's overhead over the
// raw socket for `docker ps` and `docker run --rm IMAGE true` (also against
// the raw socket asked for what the guard injects: the trust bind, the CA
// variable, the DNS server), timed inside the sidecar (Debian's docker
// 20.10 CLI) and interleaved in a rotating order.
//
//	go run ./bench/nesteddocker -n 10 -k 40
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
)

func main() {
	n := flag.Int("n", 10, "sidecar starts to time")
	k := flag.Int("k", 40, "docker ps / docker run pairs to time")
	img := flag.String("image", "vak-test:latest", "inner test image")
	flag.Parse()
	if err := run(*n, *k, *img); err != nil {
		fmt.Fprintln(os.Stderr, "nesteddocker:", err)
		os.Exit(1)
	}
}

func run(n, k int, img string) error {
	ctx := context.Background()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	tag, err := dockerd.EnsureImage(ctx, cli, dockerd.DefaultRecipe, os.Stderr)
	if err != nil {
		return err
	}
	vak, err := stats.BuildVak()
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(vak))
	os.Chmod(filepath.Dir(vak), 0o755)
	trust, err := os.MkdirTemp("", "vak-bench-trust-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(trust)
	os.Chmod(trust, 0o755)
	// Any PEM certificate will do for the sidecar's store: the host's first.
	ca, err := firstCert()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(trust, "vak-ca.pem"), ca, 0o644); err != nil {
		return err
	}
	owner := fmt.Sprintf("vak-bench-nsowner-%d", os.Getpid())
	if err := stats.RunQuiet("docker", "run", "-d", "--label", "vak.bench=1", "--name", owner, img, "sleep", "3600"); err != nil {
		return err
	}
	defer stats.RunQuiet("docker", "rm", "-f", owner)
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
			Labels: map[string]string{"vak.bench": "1"},
		}
	}

	// Ready as a --docker session waits for it: the guard started by the
	// entrypoint, `docker info` answering on the raw socket and through
	// the guard.
	const guard = "/run/vak-guard/docker.sock"
	guardArgs := []string{"/opt/vak/vak", "dockerguard", "--listen", guard,
		"--upstream", dockerd.RawSocket, "--workspace", "/nonexistent-ws", "--trust-dir", "/etc/vak/trust",
		"--pool", "10.213.0.0/16", "--dns", "10.231.9.1", "--trust-env", "SSL_CERT_FILE=/etc/vak/trust/vak-ca.pem"}
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
