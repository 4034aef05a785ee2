package dockerd

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/testenv"
)

// A sidecar that exits before its engine answers is reported by Start
// with its exit code and its last log lines (here: the entrypoint cannot
// copy a CA that is not there), not waited for until the timeout; and it
// is removed. Control: the same sidecar with the CA present starts.
func TestStartReportsADeadSidecar(t *testing.T) {
	cli := newClient(t)
	img := sidecarImage(t, cli)
	owner, _ := testenv.RunContainer(t, testenv.UniqueName("nsowner"), "bridge", testenv.Image(t), "sleep", "3600")
	trust := t.TempDir()
	os.Chmod(trust, 0o755)
	writeCA(t, trust)
	spec := func(ca string) Sidecar {
		name := testenv.UniqueName("dockerd")
		s := Sidecar{
			Name: name, Image: img, NetworkMode: "container:" + owner,
			Daemon:     Daemon{Pool: netip.MustParsePrefix("10.213.0.0/16"), Gateway: netip.MustParseAddr("10.231.9.1")},
			TrustCA:    ca,
			DataVolume: name + "-lib",
			Mounts:     []mount.Mount{{Type: mount.TypeBind, Source: trust, Target: "/etc/vak/trust", ReadOnly: true}},
			Labels:     map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: testenv.TestID(t)},
			Memory:     1 << 30, PidsLimit: 1024,
		}
		t.Cleanup(func() { Remove(context.Background(), cli, s.Name, s.DataVolume) })
		return s
	}
	bad := spec("/etc/vak/trust/missing-ca.pem")
	_, err := Start(context.Background(), cli, bad, 2*time.Minute)
	if err == nil || !strings.Contains(err.Error(), "is not running (exit 1)") || !strings.Contains(err.Error(), "missing-ca.pem") {
		t.Fatalf("a sidecar that exits at start: %v", err)
	}
	if _, e := cli.ContainerInspect(context.Background(), bad.Name, client.ContainerInspectOptions{}); e == nil {
		t.Errorf("the dead sidecar %s was not removed", bad.Name)
	}
	if _, err := Start(context.Background(), cli, spec("/etc/vak/trust/vak-ca.pem"), 2*time.Minute); err != nil {
		t.Fatalf("control: the same sidecar with its CA: %v", err)
	}
}
