package proxynet

import (
	"errors"
	"testing"

	"vak/internal/egress/egressconfig"
)

// A proxied network needs a policy (rules, presets or both) that the
// config's loader validated: proxynet never validates the sections again.
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
			s := &egressconfig.Sections{Network: tc.net}
			egressconfig.Validate("cfg.toml", s) // as the config's loader does; an invalid one stays unvalidated
			_, err := gatewaySections("cfg.toml", s)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if !tc.ok && tc.net != nil && len(tc.net.Presets) == 0 && !errors.Is(err, ErrNoPolicy) {
				t.Fatalf("err = %v, want ErrNoPolicy", err)
			}
		})
	}
}

// Sections that were never validated are refused, even with a policy.
func TestGatewaySectionsNeedsValidation(t *testing.T) {
	allow := "allow"
	s := &egressconfig.Sections{Network: &egressconfig.Network{Rules: []egressconfig.Rule{{Action: &allow, Hosts: []string{"a.test"}}}}}
	if _, err := gatewaySections("cfg.toml", s); !errors.Is(err, egressconfig.ErrNotValidated) {
		t.Fatalf("unvalidated sections: err = %v, want ErrNotValidated", err)
	}
	if _, err := egressconfig.Validate("cfg.toml", s); err != nil {
		t.Fatal(err)
	}
	if _, err := gatewaySections("cfg.toml", s); err != nil {
		t.Fatalf("validated sections: %v", err)
	}
}
