package config

import "vak/internal/egress/egressconfig"

// The wire structs mirror the TOML file exactly. Every field is a pointer or a
// slice so that "absent" is distinguishable from "zero"; decoding is strict,
// so a key that has no field here is an error naming file, line and key.

type fileWire struct {
	Version *int64       `toml:"version"`
	Sandbox *sandboxWire `toml:"sandbox"`
	Files   *filesWire   `toml:"files"`
	Session *sessionWire `toml:"session"`
	// egress: the gateway's trusted sections ([network], [gateway],
	// [secrets.NAME], [logins.NAME]) are declared by internal/egress/egressconfig and added here.
	Network *egressconfig.Network           `toml:"network"`
	Gateway *egressconfig.Gateway           `toml:"gateway"`
	Secrets map[string]*egressconfig.Secret `toml:"secrets"`
	Logins  map[string]*egressconfig.Login  `toml:"logins"`
	// AgentNetwork is [agent_network] (agentnet.go).
	AgentNetwork *agentNetworkWire `toml:"agent_network"`
	// Kubernetes is [kubernetes] (kubernetes.go).
	Kubernetes *kubernetesWire `toml:"kubernetes"`

	raw []byte // the file's bytes, to put line numbers on validation errors
}

type sandboxWire struct {
	Backend *string     `toml:"backend"`
	Mode    *string     `toml:"mode"`
	Image   *string     `toml:"image"`
	Runtime *string     `toml:"runtime"`
	User    *string     `toml:"user"`
	Timeout *string     `toml:"timeout"`
	Limits  *limitsWire `toml:"limits"`
	// AllowWeaker accepts a native sandbox without user namespaces or
	// without Landlock when the kernel lacks them.
	AllowWeaker *bool `toml:"allow_weaker"`
	// Read and Write are extra host paths the native sandbox may read, or
	// read and write (e.g. a module cache). "~/" is the home directory.
	Read  []string `toml:"read"`
	Write []string `toml:"write"`
	// Env names host environment variables passed into the sandbox on top
	// of the built-in allowlist.
	Env []string `toml:"env"`
	// Home is the sandbox's home: "fresh", "workspace" or "profile:NAME"
	// (agenthome). A project config may only set "fresh".
	Home *string `toml:"home"`
}

type limitsWire struct {
	Memory *string  `toml:"memory"`
	CPUs   *float64 `toml:"cpus"`
	Pids   *int64   `toml:"pids"`
	Tmpfs  *string  `toml:"tmpfs"`
}

type filesWire struct {
	Protected []string `toml:"protected"`
}

// sessionWire is [session]: session-scoped task environments (trusted only;
// see session.go).
type sessionWire struct {
	IdleTimeout      *string `toml:"idle_timeout"`
	MaxLifetime      *string `toml:"max_lifetime"`
	PoolSize         *int64  `toml:"pool_size"`
	AllowInstall     *bool   `toml:"allow_install"`
	Worker           *string `toml:"worker"`
	PolicyGeneration *string `toml:"policy_generation"`
	RunNetworkIdle   *string `toml:"run_network_idle"`
	Docker           *bool   `toml:"docker"`
	// DockerPlaceholders: see Session.DockerPlaceholders.
	DockerPlaceholders *[]string `toml:"docker_placeholders"`
	DockerRuntime      *string   `toml:"docker_runtime"`
	Backend            *string   `toml:"backend"`
}

// projectKeys are the only keys an untrusted project config may set. They can
// only narrow what the user config allows (see merge). Everything else in a
// project config is stripped with a warning: an allowlist, so a section added
// later is privileged until someone decides otherwise.
var projectKeys = map[string]bool{
	"version":         true,
	"sandbox.mode":    true,
	"sandbox.timeout": true,
	// sandbox.home may only be "fresh" (narrow); see applySandbox.
	"sandbox.home":    true,
	"files.protected": true,
	// agent_network.enabled may only be false (disable); see agentnet.go.
	"agent_network.enabled": true,
}
