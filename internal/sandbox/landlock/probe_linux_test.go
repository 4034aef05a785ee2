package landlock

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestEvaluate(t *testing.T) {
	cgErr := errors.New("read-only file system")
	for _, tc := range []struct {
		name                      string
		abi                       int
		seccomp, userNS, needCG   bool
		cgErr                     error
		allowWeaker               bool
		wantAvailable, wantWeaker bool
		wantProblem               string
	}{
		{"everything", 7, true, true, false, nil, false, true, false, ""},
		{"root with cgroup", 7, true, true, true, nil, false, true, false, ""},
		{"no landlock: refused", 0, true, true, false, nil, false, false, false, "Landlock"},
		{"no landlock: weaker when allowed", 0, true, true, false, nil, true, true, true, "Landlock"},
		{"no userns: refused", 7, true, false, false, nil, false, false, false, "user namespaces"},
		{"no userns: weaker when allowed", 7, true, false, false, nil, true, true, true, "user namespaces"},
		{"root without cgroup: refused", 7, true, true, true, cgErr, false, false, false, "pids cgroup"},
		{"root without cgroup: weaker when allowed", 7, true, true, true, cgErr, true, true, true, "pids cgroup"},
		{"neither landlock nor userns: refused even when allowed", 0, true, false, false, nil, true, false, false, "Landlock"},
		{"no seccomp: refused even when allowed", 7, false, true, false, nil, true, false, false, "seccomp"},
	} {
		st := evaluate(tc.abi, tc.seccomp, tc.userNS, tc.needCG, tc.cgErr, tc.allowWeaker)
		available := st.Problem == "" || st.Weaker
		if available != tc.wantAvailable || st.Weaker != tc.wantWeaker || !strings.Contains(st.Problem, tc.wantProblem) {
			t.Errorf("%s: %+v", tc.name, st)
		}
	}
}

func TestBackendAvailableMatchesProbe(t *testing.T) {
	b := &Backend{}
	err := b.Available(context.Background())
	if st := b.Status(); (st.Problem == "" || st.Weaker) != (err == nil) {
		t.Fatalf("Available = %v but status %+v", err, st)
	}
}
