package testenv

import (
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
