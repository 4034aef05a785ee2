package config

import (
	"strings"
	"testing"
	"time"

	"vak/internal/sandbox"
)

func TestApplyOverrides(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       Overrides
		check   func(*Config) bool
		wantErr string
	}{
		{"empty keeps defaults", Overrides{}, func(c *Config) bool {
			d := Default()
			return c.Sandbox.Mode == d.Sandbox.Mode && c.Sandbox.Image == d.Sandbox.Image && c.Network == d.Network && !c.Sandbox.HomeSet
		}, ""},
		{"mode", Overrides{Mode: "read-only"}, func(c *Config) bool { return c.Sandbox.Mode == sandbox.ReadOnly }, ""},
		{"image", Overrides{Image: "x:1"}, func(c *Config) bool { return c.Sandbox.Image == "x:1" }, ""},
		{"runtime", Overrides{Runtime: "runsc"}, func(c *Config) bool { return c.Sandbox.Runtime == "runsc" }, ""},
		{"bad runtime", Overrides{Runtime: "run sc"}, nil, "--runtime"},
		{"network", Overrides{Network: "proxied"}, func(c *Config) bool { return c.Network == sandbox.NetworkProxied }, ""},
		{"home", Overrides{Home: "fresh"}, func(c *Config) bool { return c.Sandbox.HomeSet }, ""},
		{"timeout", Overrides{Timeout: time.Second}, func(c *Config) bool { return c.Sandbox.Timeout == time.Second }, ""},
		{"bad mode", Overrides{Mode: "rw"}, nil, "--mode"},
		{"bad backend", Overrides{Backend: "vm"}, nil, "--backend"},
		{"bad network", Overrides{Network: "open"}, nil, "--network"},
		{"bad home", Overrides{Home: "profile:"}, nil, "--home"},
		{"negative timeout", Overrides{Timeout: -time.Second}, nil, "--timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			err := c.Apply(tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("Apply(%+v) = %v, want an error naming %s", tc.o, err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("Apply(%+v) = %v; config %+v", tc.o, err, c.Sandbox)
			}
		})
	}
}
