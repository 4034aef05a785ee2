package proxynet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"

	"vak/internal/egress/egressconfig"
	"vak/internal/engine"
	"vak/internal/paths"
)

// A topology's gateway works from a copy of the trusted config made when
// it was created. When a later run or session reuses the topology and the
// config (rules, DNS, secrets) has changed since, the new copy is put into
// the gateway's volume and the gateway reloads it live (connections stay
// up, placeholders of secrets that still exist are kept); the fence
// self-test then runs again before the topology is handed over.
// [gateway] extra_ca_bundles and the host roots are read at start only.

func configDigestFile(stateDir, key string) string {
	return filepath.Join(stateDir, "proxynet", key, "gateway-config.sha256")
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func writeConfigDigest(stateDir, key string, payload []byte) {
	p := configDigestFile(stateDir, key)
	os.MkdirAll(filepath.Dir(p), 0o700)
	os.WriteFile(p, []byte(digest(payload)), 0o600)
}

// refresh reloads the gateway of key when the config it would be given now
// differs from what it was given last. It reports whether it reloaded. A
// config that cannot be assembled now (an env-sourced secret whose
// variable is not set in this shell) keeps the running one.
func (o *Options) refresh(ctx context.Context, key string, sections *egressconfig.Sections) (bool, error) {
	payload, _, err := o.gatewayPayload(sections)
	if err != nil {
		o.progressf("keeping the running gateway's configuration: %v", err)
		return false, nil
	}
	if old, err := os.ReadFile(configDigestFile(o.StateDir, key)); err == nil && string(old) == digest(payload) {
		return false, nil
	}
	_, _, gwName, _, _ := names(key)
	o.progressf("reloading the egress gateway's configuration for %s", o.Workspace)
	if _, err := o.Engine.CopyToContainer(ctx, gwName, client.CopyToContainerOptions{DestinationPath: gatewayData, Content: bytes.NewReader(payload)}); err != nil {
		return false, fmt.Errorf("proxynet: give the gateway its new config: %w", err)
	}
	var out strings.Builder
	if err := engine.Exec(ctx, o.Engine, gwName, &out, &out, "/vak", "gateway", "reload", "--socket", paths.GatewayAdminSocket(gatewayStateDir)); err != nil {
		return false, fmt.Errorf("proxynet: gateway reload: %w: %s", err, out.String())
	}
	writeConfigDigest(o.StateDir, key, payload)
	return true, nil
}
