package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/egress/egressconfig"
	"vak/internal/errclass"
)

// What Serve and ServeOnDemand return when the gateway cannot start or
// its options are wrong, by class (the command line's exit status).
func TestServeErrorClasses(t *testing.T) {
	valid := func() (*egressconfig.Config, error) { return egressconfig.Validate("test", nil) }
	invalidCfg := func() (*egressconfig.Config, error) {
		return nil, fmt.Errorf("%w: network.rules[0]: bad", egressconfig.ErrInvalid)
	}
	classedCfg := func() (*egressconfig.Config, error) {
		return nil, fmt.Errorf("load: %w", errclass.New(errclass.Config, "invalid config"))
	}
	broken := func() (*egressconfig.Config, error) { return nil, errors.New("disk on fire") }
	off := Options{Listen: "-", AdminSocket: "-"}
	tests := []struct {
		name  string
		o     ServeOptions
		class *errclass.Class
	}{
		{"invalid gateway config", ServeOptions{Options: withLoad(off, invalidCfg)}, errclass.Config},
		{"invalid user config", ServeOptions{Options: withLoad(off, classedCfg)}, errclass.Config},
		{"cannot start", ServeOptions{Options: withLoad(off, broken)}, errclass.Unavailable},
		{"bad canary", ServeOptions{Options: withLoad(off, valid), Canary: "256.0.0.1:0"}, errclass.Unavailable},
		{"negative procs", ServeOptions{Options: withLoad(off, valid), Procs: -1}, errclass.Invalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.o.StateDir, tc.o.Out = t.TempDir(), &out
			err := Serve(context.Background(), tc.o)
			if err == nil || errclass.Of(err) != tc.class {
				t.Fatalf("Serve: %v (class %v), want class %v; output:\n%s", err, errclass.Of(err), tc.class, out.String())
			}
		})
	}
	err := ServeOnDemand(context.Background(), OnDemandOptions{Load: invalidCfg, StateDir: t.TempDir(), Idle: time.Second, Out: &bytes.Buffer{}})
	if errclass.Of(err) != errclass.Config || !strings.Contains(err.Error(), "network.rules[0]") {
		t.Fatalf("ServeOnDemand: %v (class %v), want the config error, class Config", err, errclass.Of(err))
	}
}

// Serve runs until ctx ends, after saying what it serves.
func TestServeBanner(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := ServeOptions{Options: Options{Load: func() (*egressconfig.Config, error) { return egressconfig.Validate("test", nil) },
		StateDir: t.TempDir(), Listen: "127.0.0.1:0", AdminSocket: filepath.Join(t.TempDir(), "gw.sock")}, Out: &out}
	if err := Serve(ctx, o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vak gateway: session ", "vak gateway: proxy       127.0.0.1:", "vak gateway: CA ", "vak gateway: receipts "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}

func withLoad(o Options, load func() (*egressconfig.Config, error)) Options {
	o.Load = load
	return o
}
