package proxynet

import (
	"errors"
	"testing"

	"vak/internal/egress/egressconfig"
)

// A proxied network needs a policy: rules, presets or both.
func TestGatewaySectionsNeedsPolicy(t *testing.T) {
	allow := "allow"
	for _, tc := range []struct {
		name string
		net  *egressconfig.Network
		ok   bool
	}{
		{"nothing", nil, false},
		{"empty", &egressconfig.Network{}, false},
		{"rules", &egressconfig.Network{Rules: []egressconfig.Rule{{Action: &allow, Hosts: []string{"a.test"}}}}, true},
		{"presets only", &egressconfig.Network{Presets: []string{"npm"}}, true},
		{"unknown preset", &egressconfig.Network{Presets: []string{"nope"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gatewaySections("cfg.toml", &egressconfig.Sections{Network: tc.net})
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if !tc.ok && tc.net != nil && len(tc.net.Presets) == 0 && !errors.Is(err, ErrNoPolicy) {
				t.Fatalf("err = %v, want ErrNoPolicy", err)
			}
		})
	}
}
