package proxynet

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"vak/internal/egress/egressconfig"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/netfence"
	"vak/internal/paths"
	"vak/internal/receipts"
)

// ErrFenceSelfTest reports a topology whose fence did not prove itself; the
// topology has been torn down and nothing may use it.
var ErrFenceSelfTest = errclass.New(errclass.Unavailable, "proxynet: fence self-test failed")

// CanaryPort is the gateway's fence self-test canary (TCP and UDP).
const CanaryPort = netfence.DefaultCanaryPort

// canaryFile is where the gateway records what reached its canary (see
// `vak gateway --canary`).
const canaryFile = gatewayStateDir + "/fence-canary.log"

// SelfTestLog is the host receipts log of a topology's self-tests.
func SelfTestLog(stateDir, key string) string {
	return filepath.Join(ReceiptsDir(stateDir, key), "fence-selftest.jsonl")
}

// selfTest proves the fence from inside the sandbox namespace (the
// netclient container, whose namespace every sandbox container joins):
// direct TCP and UDP to the gateway's canary, on its sandbox-side and its
// egress-side address, must not arrive (TCP only as a PROXY v2 relay that
// the gateway denies); DNS for a denied name is answered by the gateway
// itself; the nftables rules verify. The outcome is a receipt in
// SelfTestLog. A failure is ErrFenceSelfTest with the reason.
func (o *Options) selfTest(ctx context.Context, key string, gwIP netip.Addr, sections *egressconfig.Sections) error {
	egressNet, _, gwName, ncName, _ := names(key)
	egressIP, err := addressOn(ctx, o.Engine, gwName, egressNet)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFenceSelfTest, err)
	}
	return o.SelfTestContainers(ctx, key, gwName, ncName, gwIP, egressIP, sections)
}

// SelfTestContainers runs the fence self-test (see selfTest) for a topology
// whose containers were not created by Ensure (the dev-container template's
// compose services): gwName and ncName are the running gateway and
// netclient, gwIP the gateway's sandbox-side address and egressIP its
// egress-side one. The receipt goes to SelfTestLog(o.StateDir, key).
func (o *Options) SelfTestContainers(ctx context.Context, key, gwName, ncName string, gwIP, egressIP netip.Addr, sections *egressconfig.Sections) error {
	cfg, _ := sections.Validated()
	var rnd [8]byte
	rand.Read(rnd[:])
	nonce := hex.EncodeToString(rnd[:])
	// The rules are verified as the running netclient has them (a nested
	// topology also serves plain callers).
	nc, err := o.Engine.ContainerInspect(ctx, ncName, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFenceSelfTest, err)
	}
	fence := Options{NestedPool: NestedPoolOf(nc.Container.Config)}
	args := append([]string{"/vak", "netclient", "selftest"}, fence.fenceFlags(gwIP)...)
	args = append(args, "--nonce", nonce,
		"--target", netip.AddrPortFrom(gwIP, CanaryPort).String(),
		"--target", netip.AddrPortFrom(egressIP, CanaryPort).String())
	denied := "vak-selftest-" + nonce + ".invalid"
	if cfg != nil && cfg.Policy != nil && !cfg.Policy.AllowsName(denied) {
		args = append(args, "--denied-name", denied)
		if cfg.DNS.Sinkhole.IsValid() {
			args = append(args, "--sinkhole", cfg.DNS.Sinkhole.String())
		}
	}
	var outb strings.Builder
	runErr := engine.Exec(ctx, o.Engine, ncName, &outb, &outb, args...)
	out := outb.String()
	var problems []string
	if runErr != nil {
		problems = append(problems, fmt.Sprintf("in the sandbox namespace: %v", runErr))
	}
	hits, err := canaryHits(ctx, o.Engine, gwName, nonce)
	if err != nil {
		problems = append(problems, "read the canary: "+err.Error())
	}
	for _, h := range hits {
		problems = append(problems, "reached the canary directly: "+h)
	}
	rec := receipts.Record{Session: key, Protocol: "selftest", Host: gwIP.String(), Rule: -1, Decision: receipts.Allow,
		Reason: "fence self-test passed: " + oneLine(out)}
	if len(problems) > 0 {
		rec.Decision = receipts.Deny
		rec.Reason = "fence self-test FAILED: " + strings.Join(problems, "; ") + " | " + oneLine(out)
	}
	if err := appendReceipt(o.StateDir, SelfTestLog(o.StateDir, key), rec); err != nil {
		problems = append(problems, "record the self-test: "+err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s\n%s", ErrFenceSelfTest, strings.Join(problems, "; "), strings.TrimSpace(out))
	}
	o.progressf("fence self-test passed")
	return nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")), " ")
}

// appendReceipt appends r to a log signed with the installation's receipts
// key (the one the topology's gateways sign with).
func appendReceipt(stateDir, path string, r receipts.Record) error {
	key, err := receipts.LoadOrCreateKey(paths.GatewayReceiptsKeyDir(stateDir))
	if err != nil {
		return err
	}
	l, err := receipts.OpenSigned(path, key)
	if err != nil {
		return err
	}
	if err := l.Append(r); err != nil {
		l.Close()
		return err
	}
	return l.Close()
}

// canaryHits returns the canary's records of nonce (none when the canary
// never recorded anything).
func canaryHits(ctx context.Context, cli *client.Client, gw, nonce string) ([]string, error) {
	res, err := cli.CopyFromContainer(ctx, gw, client.CopyFromContainerOptions{SourcePath: canaryFile})
	if err != nil {
		if cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "Could not find the file") {
			return nil, nil // the canary never recorded anything
		}
		return nil, err
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	if _, err := tr.Next(); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
	if err != nil {
		return nil, err
	}
	return netfence.CanaryHits(data, nonce), nil
}

// selfTestMarker records which gateway start the last passed self-test
// proved, so a reused topology is tested again after a gateway restart.
func selfTestMarker(stateDir, key string) string {
	return filepath.Join(stateDir, "proxynet", key, "selftest-gateway")
}

func gatewayStart(ctx context.Context, cli *client.Client, gw string) (string, error) {
	ins, err := cli.ContainerInspect(ctx, gw, client.ContainerInspectOptions{})
	if err != nil {
		return "", err
	}
	if ins.Container.State == nil {
		return "", errors.New("no state")
	}
	return startOf(ins), nil
}

// startOf is gatewayStart for an inspected gateway with a state.
func startOf(ins client.ContainerInspectResult) string {
	return ins.Container.ID + " " + ins.Container.State.StartedAt
}

func markSelfTest(stateDir, key, start string) {
	p := selfTestMarker(stateDir, key)
	os.MkdirAll(filepath.Dir(p), 0o700)
	os.WriteFile(p, []byte(start), 0o600)
}

func selfTested(stateDir, key, start string) bool {
	data, err := os.ReadFile(selfTestMarker(stateDir, key))
	return err == nil && string(data) == start
}
