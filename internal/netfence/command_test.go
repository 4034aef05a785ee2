package netfence

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"vak/internal/errclass"
)

// The netclient's and the self-test's flags: what parses, and the usage
// errors (class Invalid) of what does not, before anything touches the
// namespace.
func TestCommandFlags(t *testing.T) {
	run := Flags{Gateway: "10.1.2.3", VerifyEvery: time.Second}
	tests := []struct {
		name    string
		f       Flags
		wantErr string
	}{
		{"run", run, ""},
		{"check", Flags{Gateway: "10.1.2.3", Check: true}, ""},
		{"nested", Flags{Gateway: "10.1.2.3", NestedPool: DefaultNestedPool.String(), VerifyEvery: time.Second}, ""},
		{"bad gateway", Flags{Gateway: "gw", VerifyEvery: time.Second}, "--gateway: "},
		{"loopback gateway", Flags{Gateway: "127.0.0.1", VerifyEvery: time.Second}, "netfence: gateway"},
		{"bad pool", Flags{Gateway: "10.1.2.3", NestedPool: "10.213.0.1", VerifyEvery: time.Second}, "--nested-pool: "},
		{"joined without check", Flags{Gateway: "10.1.2.3", Joined: true, VerifyEvery: time.Second}, "--joined needs --check"},
		{"no interval", Flags{Gateway: "10.1.2.3"}, "--verify-interval must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			err := tc.f.apply(&c)
			if tc.wantErr == "" {
				if err != nil || c.Gateway.String() != "10.1.2.3" || c.Nested() != (tc.f.NestedPool != "") {
					t.Fatalf("apply: %v, config %+v", err, c)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("apply: %v, want %q", err, tc.wantErr)
			}
			if cerr := Command(DefaultConfig(), tc.f, io.Discard); !errors.Is(cerr, errclass.Invalid) || cerr.Error() != err.Error() {
				t.Fatalf("Command: %v, want the same error of class Invalid", cerr)
			}
		})
	}
}

func TestSelfTestFlags(t *testing.T) {
	ok := SelfTestFlags{Gateway: "10.1.2.3", Targets: []string{"10.1.2.3:9", "172.20.0.2:9"}, Sinkhole: "0.0.0.0", Resolver: "127.0.0.11:53"}
	tests := []struct {
		name    string
		f       func(SelfTestFlags) SelfTestFlags
		wantErr string
	}{
		{"valid", func(f SelfTestFlags) SelfTestFlags { return f }, ""},
		{"bad gateway", func(f SelfTestFlags) SelfTestFlags { f.Gateway = ""; return f }, "--gateway: "},
		{"bad target", func(f SelfTestFlags) SelfTestFlags { f.Targets = []string{"10.1.2.3"}; return f }, "--target: "},
		{"bad sinkhole", func(f SelfTestFlags) SelfTestFlags { f.Sinkhole = "x"; return f }, "--sinkhole: "},
		{"bad resolver", func(f SelfTestFlags) SelfTestFlags { f.Resolver = "127.0.0.11"; return f }, "--resolver: "},
		{"bad pool", func(f SelfTestFlags) SelfTestFlags { f.NestedPool = "pool"; return f }, "--nested-pool: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := SelfTest{Config: DefaultConfig()}
			err := tc.f(ok).apply(&st)
			if tc.wantErr == "" {
				if err != nil || len(st.Targets) != 2 || !st.Sinkhole.IsValid() || st.Resolver.Port() != 53 {
					t.Fatalf("apply: %v, self-test %+v", err, st)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("apply: %v, want %q", err, tc.wantErr)
			}
			cerr := SelfTestCommand(context.Background(), SelfTest{Config: DefaultConfig()}, tc.f(ok), io.Discard)
			if !errors.Is(cerr, errclass.Invalid) || cerr.Error() != err.Error() {
				t.Fatalf("SelfTestCommand: %v, want the same error of class Invalid", cerr)
			}
		})
	}
}
