package testenv

import (
	"os"
	"testing"

	"vak/internal/sandbox/landlock"
)

// RequireLandlock skips or fails t unless the kernel can run the landlock
// sandbox as designed (Landlock, user namespaces, seccomp; probed by the
// backend itself, never weaker).
func RequireLandlock(t testing.TB) {
	t.Helper()
	if st := landlock.Probe(false); st.Problem != "" {
		Missing(t, EnvRequireLandlock, "landlock sandbox unavailable: "+st.Problem)
	}
}

// EnvCgroup says what the test harness arranged for the limits of native
// sandboxes when the tests do not run as root: "delegated" (the tests run
// in cgroups delegated to their user, as scripts/test-nonroot arranges for
// one leg: every session must get a cgroup of its own) or "none" (nothing
// is delegated: the limits must be rlimits). See ExpectedLimits.
const EnvCgroup = "VAK_TEST_CGROUP"

// What ExpectedLimits returns.
const (
	LimitsByCgroup  = "cgroup"
	LimitsByRlimits = "rlimits"
)

// ExpectedLimits says what must enforce the limits of the native sandboxes
// this test process starts: LimitsByCgroup as root (it always gets one) or
// with VAK_TEST_CGROUP=delegated, LimitsByRlimits with
// VAK_TEST_CGROUP=none, "" (either: the test checks what vak doctor
// reports) when unset. Any other value fails t.
func ExpectedLimits(t testing.TB) string {
	t.Helper()
	v := os.Getenv(EnvCgroup)
	switch {
	case landlock.NeedCgroup():
		return LimitsByCgroup
	case v == "delegated":
		return LimitsByCgroup
	case v == "none":
		return LimitsByRlimits
	case v != "":
		t.Fatalf("%s=%q: want delegated or none", EnvCgroup, v)
	}
	return ""
}
