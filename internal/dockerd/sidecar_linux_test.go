package dockerd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/testenv"
)

// sidecarImage builds (once, cached by recipe hash) or finds the image.
func sidecarImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	tag := DefaultRecipe.Tag()
	if _, err := cli.ImageInspect(context.Background(), tag); err != nil && os.Geteuid() != 0 {
		testenv.Missing(t, testenv.EnvRequireDocker, "the sidecar image "+tag+" is not built and building it needs root")
	}
	tag, err := EnsureImage(context.Background(), cli, DefaultRecipe, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func writeCA(t *testing.T, dir string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vak test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vak-ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startSidecar starts a sidecar in the namespace of a plain test
// container and returns its id.
func startSidecar(t *testing.T, cli *client.Client, img string) string {
	t.Helper()
	owner, _ := testenv.RunContainer(t, testenv.UniqueName("nsowner"), "bridge", testenv.Image(t), "sleep", "3600")
	trust := t.TempDir()
	os.Chmod(trust, 0o755)
	writeCA(t, trust)
	labels := map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: testenv.TestID(t)}
	name := testenv.UniqueName("dockerd")
	s := Sidecar{
		Name: name, Image: img, NetworkMode: "container:" + owner,
		Daemon:     Daemon{Pool: netip.MustParsePrefix("10.213.0.0/16"), Gateway: netip.MustParseAddr("10.231.9.1")},
		TrustCA:    "/etc/vak/trust/vak-ca.pem",
		DataVolume: name + "-lib",
		Mounts:     []mount.Mount{{Type: mount.TypeBind, Source: trust, Target: "/etc/vak/trust", ReadOnly: true}},
		Labels:     labels, Memory: 1 << 30, PidsLimit: 1024,
	}
	t.Cleanup(func() {
		if err := Remove(context.Background(), cli, s.Name, s.DataVolume); err != nil {
			t.Error(err)
		}
	})
	id, err := Start(context.Background(), cli, s, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// raw runs the docker CLI inside the sidecar against the raw socket (the
// sidecar's own properties are tested without the guard in front).
func raw(t *testing.T, id string, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("docker", append([]string{"exec", "-i", id, "docker", "-H", "unix://" + RawSocket}, args...)...)
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func newClient(t *testing.T) *client.Client {
	t.Helper()
	testenv.RequireDocker(t)
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestSidecar starts the nested engine with the spec (no --privileged,
// the capability list, the generated seccomp profile, a private cgroup
// namespace) and checks that inner containers run with the pinned pool and
// the gateway as DNS, and that the cgroup-v1 release_agent escape fails even
// through the raw daemon.
func TestSidecar(t *testing.T) {
	cli := newClient(t)
	img := sidecarImage(t, cli)
	id := startSidecar(t, cli, img)

	save, err := exec.Command("docker", "save", testenv.Image(t)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := raw(t, id, save, "load"); err != nil {
		t.Fatalf("docker load into the nested daemon: %v %s", err, out)
	}
	timg := testenv.Image(t)

	t.Run("inner run uses the pool and the gateway DNS", func(t *testing.T) {
		out, err := raw(t, id, nil, "run", "--rm", timg, "sh", "-c", "ip addr show eth0; cat /etc/resolv.conf")
		if err != nil {
			t.Fatalf("inner docker run: %v %s", err, out)
		}
		if !strings.Contains(out, "inet 10.213.0.") {
			t.Errorf("inner container address not in the pinned pool: %s", out)
		}
		if !strings.Contains(out, "nameserver 10.231.9.1") || strings.Contains(out, "8.8.8.8") {
			t.Errorf("inner resolv.conf is not the gateway only: %s", out)
		}
	})

	t.Run("the CA is in the sidecar's system store", func(t *testing.T) {
		// Every line of the CA is in the system bundle, once (the
		// entrypoint appends it).
		script := "grep -c 'BEGIN CERTIFICATE' " + CAStoreFile + " && grep -v -e '^$' -e '^-----' " + CAStoreFile + " | while read -r l; do grep -cxF \"$l\" " + CABundle + "; done | sort -u"
		var b strings.Builder
		err := engine.Exec(context.Background(), cli, id, &b, &b, "sh", "-c", script)
		out := b.String()
		if err != nil || strings.TrimSpace(out) != "1\n1" {
			t.Fatalf("vak CA not in %s exactly once: %v %q", CABundle, err, out)
		}
	})

	t.Run("cgroup v1 release_agent escape fails through the raw daemon", func(t *testing.T) {
		probe := `mkdir -p /tmp/cg /tmp/tm; mount -t tmpfs none /tmp/tm && echo TMPFS-MOUNTED; ` +
			`if mount -t cgroup -o none,name=vakprobe cgroup /tmp/cg; then echo CGROUP-MOUNTED; ls /tmp/cg; umount /tmp/cg; fi; ` +
			`for f in /sys/fs/cgroup/*/release_agent; do [ -e "$f" ] && echo "RELEASE-AGENT $f"; done; true`
		// Positive control: outside the sidecar, a container in the host's
		// cgroup namespace with SYS_ADMIN can mount a new v1 hierarchy
		// (it only mounts and unmounts it), so the probe detects the class.
		ctl := exec.Command("docker", append(append([]string{"run", "--rm"}, testenv.LabelArgs(t)...),
			"--cgroupns", "host", "--cap-add", "SYS_ADMIN", "--security-opt", "apparmor=unconfined", timg, "sh", "-c", probe)...)
		cout, _ := ctl.CombinedOutput()
		if !strings.Contains(string(cout), "CGROUP-MOUNTED") || !strings.Contains(string(cout), "release_agent") {
			t.Fatalf("control: a host-cgroupns SYS_ADMIN container could not mount a v1 hierarchy (not a cgroup-v1 host?): %s", cout)
		}
		out, err := raw(t, id, nil, "run", "--rm", "--cgroupns", "host", "--cap-add", "SYS_ADMIN", "--security-opt", "apparmor=unconfined", timg, "sh", "-c", probe)
		if err != nil {
			t.Fatalf("inner docker run: %v %s", err, out)
		}
		if !strings.Contains(out, "TMPFS-MOUNTED") {
			t.Fatalf("inner container has no effective SYS_ADMIN, the probe proves nothing: %s", out)
		}
		if strings.Contains(out, "CGROUP-MOUNTED") || strings.Contains(out, "RELEASE-AGENT") {
			t.Fatalf("inner --cgroupns host --cap-add SYS_ADMIN reached a cgroup v1 release_agent: %s", out)
		}
	})
}

// TestEntrypointRefusesHostCgroupns runs the sidecar image with its
// entrypoint in the host's cgroup namespace: it must refuse to start. The
// control (private) gets past the check.
func TestEntrypointRefusesHostCgroupns(t *testing.T) {
	cli := newClient(t)
	img := sidecarImage(t, cli)
	d := Daemon{Pool: netip.MustParsePrefix("10.213.0.0/16"), Gateway: netip.MustParseAddr("10.231.9.1")}
	cmd, err := d.Entrypoint("/nonexistent/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"private", "host"} {
		args := append(append([]string{"run", "--rm"}, testenv.LabelArgs(t)...), "--network", "none", "--cgroupns", mode, "--entrypoint", cmd[0], img)
		out, err := exec.Command("docker", append(args, cmd[1:]...)...).CombinedOutput()
		refused := strings.Contains(string(out), "refusing to start: the cgroup namespace is not private")
		switch mode {
		case "private":
			// Gets past the check and fails at the (missing) CA instead.
			if refused || err == nil || !strings.Contains(string(out), "/nonexistent/ca.pem") {
				t.Errorf("control (private cgroupns): %v %s", err, out)
			}
		case "host":
			if !refused || err == nil {
				t.Errorf("the entrypoint started in the host cgroup namespace: %v %s", err, out)
			}
		}
	}
}
