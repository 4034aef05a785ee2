package taskenv

import (
	"context"
	"errors"
	"testing"

	"vak/internal/hostenv"
)

func TestCommandEnv(t *testing.T) {
	host := map[string]string{"LANG": "C.UTF-8", "GOFLAGS": "-mod=mod", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	withGoflags := append(hostenv.Allowlist(), "GOFLAGS") // sandbox.env = ["GOFLAGS"]
	tests := []struct {
		name    string
		entries []string
		allow   []string
		want    map[string]string
		wantErr error
	}{
		{"values are set as given", []string{"FOO=bar", "EMPTY="}, nil, map[string]string{"FOO": "bar", "EMPTY": ""}, nil},
		{"an allowlisted name is copied", []string{"LANG"}, nil, map[string]string{"LANG": "C.UTF-8"}, nil},
		{"an allowlisted name that is unset is skipped", []string{"TZ"}, nil, map[string]string{}, nil},
		{"a secret is not copied", []string{"AWS_SECRET_ACCESS_KEY"}, nil, nil, ErrEnvNotAllowed},
		{"sandbox.env names are copied", []string{"GOFLAGS"}, withGoflags, map[string]string{"GOFLAGS": "-mod=mod"}, nil},
		{"without sandbox.env they are not", []string{"GOFLAGS"}, nil, nil, ErrEnvNotAllowed},
		{"sandbox.env does not open secrets", []string{"AWS_SECRET_ACCESS_KEY"}, withGoflags, nil, ErrEnvNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CommandEnv(tc.entries, tc.allow, lookup)
			if !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && !mapsEqual(got, tc.want) {
				t.Fatalf("env = %v, want %v", got, tc.want)
			}
			if err != nil && errors.Is(err, ErrEnvNotAllowed) && containsValue(err.Error(), host) {
				t.Fatalf("error %q carries a host value", err)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func containsValue(s string, host map[string]string) bool {
	for _, v := range host {
		if len(v) > 3 && len(s) >= len(v) {
			for i := 0; i+len(v) <= len(s); i++ {
				if s[i:i+len(v)] == v {
					return true
				}
			}
		}
	}
	return false
}

// TestSignalArgsRefusesOddInput: the signal name and the token reach a
// shell program in the container as arguments; anything but letters and
// digits is refused before a session is even looked up.
func TestSignalArgsRefusesOddInput(t *testing.T) {
	m := &Manager{}
	for _, tc := range []struct{ token, sig string }{
		{"", "INT"}, {"abc", ""}, {"ab c", "INT"}, {"abc", "INT;reboot"}, {"a$(x)", "KILL"}, {"abc\n", "INT"},
	} {
		if _, err := m.SignalArgs(context.Background(), "any", tc.token, tc.sig, true, false); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("SignalArgs(token %q, sig %q): %v, want ErrInvalidSpec", tc.token, tc.sig, err)
		}
	}
}
