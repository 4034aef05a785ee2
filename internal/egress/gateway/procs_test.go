package gateway

import (
	"runtime"
	"testing"
)

func TestSetProcs(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	for _, tc := range []struct {
		name  string
		n     int
		env   string
		start int
		want  int
		err   bool
	}{
		{name: "default keeps the runtime's", n: DefaultProcs, start: 3, want: 3},
		{name: "one", n: 1, start: 3, want: 1},
		{name: "explicit", n: 2, start: 1, want: 2},
		{name: "zero keeps the runtime's", n: 0, start: 3, want: 3},
		{name: "environment wins", n: 1, env: "3", start: 3, want: 3},
		{name: "negative refused", n: -1, start: 3, want: 3, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tc.env)
			runtime.GOMAXPROCS(tc.start)
			got, err := SetProcs(tc.n)
			if (err != nil) != tc.err {
				t.Fatalf("SetProcs(%d): error %v, want error %v", tc.n, err, tc.err)
			}
			if now := runtime.GOMAXPROCS(0); now != tc.want || (err == nil && got != now) {
				t.Fatalf("SetProcs(%d) with GOMAXPROCS=%q: returned %d, runtime has %d, want %d", tc.n, tc.env, got, now, tc.want)
			}
		})
	}
}
