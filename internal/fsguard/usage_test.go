package fsguard

import "testing"

func TestUsageHuman(t *testing.T) {
	for _, tc := range []struct {
		u    Usage
		want string
	}{
		{Usage{}, "0 KiB"},
		{Usage{Bytes: 4096}, "4 KiB"},
		{Usage{Bytes: 1 << 20}, "1.0 MiB"},
		{Usage{Bytes: 3<<20 + 1<<19}, "3.5 MiB"},
		{Usage{Bytes: 8192, Truncated: true}, "more than 8 KiB"},
	} {
		if got := tc.u.Human(); got != tc.want {
			t.Errorf("%+v.Human() = %q, want %q", tc.u, got, tc.want)
		}
	}
}
