package dockerguard

import (
	"errors"
	"strings"
	"testing"

	"vak/internal/errclass"
)

// Command's flags: what parses, and the usage errors (class Invalid) of
// what does not.
func TestFlagsApply(t *testing.T) {
	ok := Flags{Pool: "10.213.0.0/16", DNS: "10.0.0.1"}
	tests := []struct {
		name    string
		f       func(Flags) Flags
		wantErr string
	}{
		{"valid", func(f Flags) Flags { f.Labels, f.Env = []string{"a=b", "c="}, []string{"X=1"}; return f }, ""},
		{"bad pool", func(f Flags) Flags { f.Pool = "10.0.0.1"; return f }, "--pool: "},
		{"bad dns", func(f Flags) Flags { f.DNS = "x"; return f }, "--dns: "},
		{"label without =", func(f Flags) Flags { f.Labels = []string{"ab"}; return f }, `--label "ab": want KEY=VALUE`},
		{"label without a key", func(f Flags) Flags { f.Labels = []string{"=b"}; return f }, `--label "=b"`},
		{"env without a name", func(f Flags) Flags { f.Env = []string{"=1"}; return f }, "--env: want NAME=VALUE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Policy
			err := tc.f(ok).apply(&p)
			if tc.wantErr == "" {
				if err != nil || p.Labels["a"] != "b" || p.DNS.String() != "10.0.0.1" || len(p.Env) != 1 {
					t.Fatalf("apply: %v, policy %+v", err, p)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("apply: %v, want %q", err, tc.wantErr)
			}
			if cerr := Command(p, tc.f(ok), "/raw", nil); !errors.Is(cerr, errclass.Invalid) || cerr.Error() != err.Error() {
				t.Fatalf("Command: %v, want the same error of class Invalid", cerr)
			}
		})
	}
}
