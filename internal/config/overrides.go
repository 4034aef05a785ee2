package config

import (
	"fmt"
	"time"

	"vak/internal/netpolicy"
	"vak/internal/sandbox"
)

// Overrides are the trusted command-line flags that override a loaded
// config (--mode, --backend, --image, --runtime, --network, --home,
// --timeout); an empty field leaves the config's value.
type Overrides struct {
	Mode, Backend, Image, Runtime, Network, Home string
	Timeout                                      time.Duration
}

// Apply overrides c with o. Its errors name the flag at fault.
func (c *Config) Apply(o Overrides) error {
	if o.Mode != "" {
		m, err := sandbox.ParseMode(o.Mode)
		if err != nil {
			return fmt.Errorf("--mode: %w", err)
		}
		c.Sandbox.Mode = m
	}
	if o.Backend != "" {
		n, err := sandbox.ParseName(o.Backend)
		if err != nil {
			return fmt.Errorf("--backend: %w", err)
		}
		c.Sandbox.Backend = n
	}
	if o.Image != "" {
		c.Sandbox.Image = o.Image
	}
	if o.Runtime != "" {
		if err := ValidateRuntime(o.Runtime); err != nil {
			return fmt.Errorf("--runtime: %w", err)
		}
		c.Sandbox.Runtime = o.Runtime
	}
	if o.Network != "" {
		n, err := netpolicy.Parse(o.Network)
		if err != nil {
			return fmt.Errorf("--network: %w", err)
		}
		c.Network = n
	}
	if o.Home != "" {
		h, err := sandbox.ParseHome(o.Home)
		if err != nil {
			return fmt.Errorf("--home: %w", err)
		}
		c.Sandbox.Home, c.Sandbox.HomeSet = h, true
	}
	if o.Timeout < 0 {
		return fmt.Errorf("--timeout: must not be negative")
	}
	if o.Timeout > 0 {
		c.Sandbox.Timeout = o.Timeout
	}
	return nil
}
