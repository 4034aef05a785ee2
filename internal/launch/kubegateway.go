package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"vak/internal/catrust"
	"vak/internal/egress/ca"
	"vak/internal/egress/gateway"
	"vak/internal/errclass"
	"vak/internal/kubesession"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/receipts"
)

// kubeGatewayDir is the host's state of the gateway of m's cluster and
// namespace: its CA and receipts key (the host keeps them to verify what
// the gateway signs) and the placeholders sessions are given.
func kubeGatewayDir(state string, m *kubesession.Manager) string {
	sum := sha256.Sum256([]byte(m.Cluster.Config.Host + "\x00" + m.Cluster.Namespace))
	return filepath.Join(state, "kube-gateways", hex.EncodeToString(sum[:8]))
}

// kubeGateway deploys (or updates) the gateway of the session's namespace
// from the trusted config's [network], [gateway] and [secrets], and returns
// its address and what the session's environment gets: the trust
// variables and the secret placeholders, never a real value.
func kubeGateway(ctx context.Context, req Request, m *kubesession.Manager, worker string, pull corev1.PullPolicy) (netip.Addr, []string, error) {
	cfg := req.Config
	file := TrustedFile(cfg)
	sections := cfg.EgressSections
	if sections == nil || sections.Network == nil || len(sections.Network.Rules)+len(sections.Network.Presets) == 0 {
		return netip.Addr{}, nil, errclass.Wrap(errclass.Config, fmt.Errorf("%w (%s has none): a proxied kubernetes session's gateway enforces the [network] rules of the trusted config", proxynet.ErrNoPolicy, file))
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return netip.Addr{}, nil, err
	}
	dir := kubeGatewayDir(state, m)
	var names []string
	if sections.Secrets != nil {
		names = slices.Sorted(maps.Keys(sections.Secrets))
	}
	ph, err := proxynet.Placeholders(filepath.Join(dir, "placeholders.json"), names)
	if err != nil {
		return netip.Addr{}, nil, err
	}
	phJSON, _ := json.Marshal(ph)
	payload, err := proxynet.GatewayPayload(proxynet.Options{Sections: sections, ConfigFile: file, StateDir: dir},
		map[string][]byte{"vak/placeholders.json": phJSON})
	if err != nil {
		return netip.Addr{}, nil, err
	}
	trust, err := kubeTrust(dir)
	if err != nil {
		return netip.Addr{}, nil, err
	}
	g, err := m.EnsureGateway(ctx, kubesession.GatewaySpec{
		Payload: payload, Trust: trust, WorkerImage: worker, PullPolicy: pull,
		Session: "kube-" + m.Cluster.Namespace, Replicas: int32(cfg.Kubernetes.GatewayReplicas),
	})
	if err != nil {
		return netip.Addr{}, nil, err
	}
	return g.Addr, proxynet.SandboxEnv(kubesession.TrustDir, ph), nil
}

// kubeTrust is the trust files of the gateway CA kept in dir (created by
// the payload), for the ConfigMap session pods mount: the same bytes at
// every create while the CA and the host's roots stay the same.
func kubeTrust(dir string) (map[string][]byte, error) {
	caPEM, err := os.ReadFile(filepath.Join(paths.GatewayCADir(dir), ca.CertFile))
	if err != nil {
		return nil, fmt.Errorf("the cluster gateway's CA: %w", err)
	}
	// Kept in dir and rewritten only when the CA or the system roots change:
	// the Java trust store's encoding is salted at random, and trust bytes
	// that differed at each create would change the gateway's digest and
	// roll the namespace's gateway under its running sessions every time.
	tmp := filepath.Join(dir, "trust")
	if err := proxynet.WriteTrust(tmp, caPEM, proxynet.SystemRoots()); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, f := range catrust.Files {
		data, err := os.ReadFile(filepath.Join(tmp, f))
		if err != nil {
			return nil, err
		}
		out[f] = data
	}
	return out, nil
}

// KubeReceipts copies the receipts logs of the gateway of the cluster and
// namespace in req's config to this host (STATE/kube-gateways/.../receipts,
// one directory per gateway pod) and returns that directory, the public
// key that verifies them (kept beside them since the gateway was first
// deployed from this host) and the pods copied.
func KubeReceipts(ctx context.Context, req Request) (dir, key string, pods []string, err error) {
	if req.Config.Session.Backend != BackendKubernetes {
		return "", "", nil, errclass.Wrap(errclass.Invalid, fmt.Errorf("session.backend is %q in %s: the kubernetes gateway's receipts are fetched from the cluster sessions run on (backend = \"kubernetes\"); a local gateway's are already in vak's state directory (vak receipts ls)", req.Config.Session.Backend, TrustedFile(req.Config)))
	}
	m, err := kubeManager(req, req.Config.Kubernetes)
	if err != nil {
		return "", "", nil, err
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return "", "", nil, err
	}
	gw := kubeGatewayDir(state, m)
	key = filepath.Join(gateway.ReceiptsKeyDir(gw), receipts.PubKeyFile)
	if _, err := os.Stat(key); err != nil {
		return "", "", nil, errclass.Wrap(errclass.Invalid, fmt.Errorf("no receipts key for the gateway of %s on this host (%w): only the host that deployed it can verify its receipts", m.Cluster.Describe(), err))
	}
	dir = filepath.Join(gw, "receipts")
	pods, err = m.FetchGatewayReceipts(ctx, dir)
	return dir, key, pods, err
}
