package testenv

import (
	"os"
	"os/user"
	"testing"
)

// UnprivilegedUser is the user a test runs something as to see what a user
// who is not root (and not in the docker group) gets: this one when it is
// not root, else the non-root leg's (created by .ci/run before the tests;
// VAK_NONROOT_USER or vak-ci), else vakuser. Without one it skips or fails
// t (EnvRequireDocker).
func UnprivilegedUser(t testing.TB) string {
	t.Helper()
	if os.Getuid() != 0 {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		return u.Username
	}
	for _, u := range []string{os.Getenv("VAK_NONROOT_USER"), "vak-ci", "vakuser"} {
		if u == "" {
			continue
		}
		if _, err := user.Lookup(u); err == nil {
			return u
		}
	}
	Missing(t, EnvRequireDocker, "running as root and there is no unprivileged user (VAK_NONROOT_USER, vak-ci or vakuser) to run as")
	return ""
}
