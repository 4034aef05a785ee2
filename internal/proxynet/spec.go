package proxynet

import (
	"net/netip"
	"strconv"

	"vak/internal/paths"
)

// Exported pieces of the topology's container specs, shared with the
// dev-container template (internal/devcontainer) so that the compose
// project runs the gateway and netclient exactly as Ensure does.
const (
	// GatewayDataDir is the gateway's volume inside its container.
	GatewayDataDir = gatewayData
	// GatewayStateDir is the gateway's vak state dir inside its volume.
	GatewayStateDir = gatewayStateDir
)

// GatewayCommand is the gateway container's command for topology key.
func GatewayCommand(key string) []string {
	return []string{"gateway", "--gateway-config", gatewayConfig, "--require-no-forwarding",
		"--listen", "0.0.0.0:" + strconv.Itoa(ProxyPort),
		"--transparent", "0.0.0.0:" + strconv.Itoa(TransparentPort),
		"--dns", "0.0.0.0:" + strconv.Itoa(DNSPort),
		"--canary", "0.0.0.0:" + strconv.Itoa(CanaryPort),
		"--session", key}
}

// GatewayHealthCommand is the gateway's health check (exec form).
func GatewayHealthCommand() []string {
	return []string{"/vak", "gateway", "status", "--socket", paths.GatewayAdminSocket(gatewayStateDir)}
}

// GatewayEnv is the gateway container's environment (no secret).
func GatewayEnv() []string { return []string{"XDG_STATE_HOME=" + gatewayData} }

// NetclientCommand is the netclient's command for a gateway at gw; a valid
// pool turns on netfence nested mode (a Docker engine joins the namespace).
func NetclientCommand(gw netip.Addr, pool netip.Prefix) []string {
	return (&Options{NestedPool: pool}).netclientCmd(gw)
}

// NetclientHealthCommand is the netclient's health check (exec form), with
// the same fence flags as NetclientCommand.
func NetclientHealthCommand(gw netip.Addr, pool netip.Prefix) []string {
	return append([]string{"/vak", "netclient", "--check"}, (&Options{NestedPool: pool}).fenceFlags(gw)...)
}

// JoinedHealthCommand is the health check of a container that joined a
// netclient's namespace (the dev container's dockerd), run with the vak
// binary at vak: the fence verifies, the uplink is up and the gateway
// answers, so it fails in a namespace whose netclient is gone.
func JoinedHealthCommand(vak string, gw netip.Addr, pool netip.Prefix) []string {
	return append([]string{vak, "netclient", "--check", "--joined"}, (&Options{NestedPool: pool}).fenceFlags(gw)...)
}

// GatewayPayload is the tar unpacked into a gateway's volume (config with
// host paths rewritten, installation CA, receipts key, secret files) for
// the checked sections, plus extra files (name relative to the volume).
// It reads secret values, so it must only ever go into the gateway's own
// volume.
func GatewayPayload(o Options, extra map[string][]byte) ([]byte, error) {
	s, err := gatewaySections(o.ConfigFile, o.Sections)
	if err != nil {
		return nil, err
	}
	o.extraFiles = extra
	payload, _, err := o.gatewayPayload(s)
	return payload, err
}
