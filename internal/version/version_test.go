package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestOf(t *testing.T) {
	const rev = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"
	goos := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	stamped := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{
			Main: debug.Module{Path: "vak", Version: "v0.0.0-20261202071342-1a2b3c4d5e6f+dirty"},
			Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
				{Key: "vcs.time", Value: "2026-12-02T07:13:42Z"}, {Key: "vcs.modified", Value: modified},
			},
		}
	}
	for _, tc := range []struct {
		name    string
		info    *debug.BuildInfo
		ldflags string // Version
		want    string
	}{
		{"modified", stamped("true"), "", "vak v0.0.0-20261202071342-1a2b3c4d5e6f+dirty (rev 1a2b3c4d5e6f, 2026-12-02T07:13:42Z, modified)"},
		{"clean", stamped("false"), "", "vak v0.0.0-20261202071342-1a2b3c4d5e6f+dirty (rev 1a2b3c4d5e6f, 2026-12-02T07:13:42Z)"},
		{"release", stamped("false"), "v1.2.3", "vak v1.2.3 (rev 1a2b3c4d5e6f, 2026-12-02T07:13:42Z)"},
		{"no VCS", &debug.BuildInfo{Main: debug.Module{Path: "vak", Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "-buildvcs", Value: "false"}}}, "", "vak (devel) (no VCS information in this build)"},
		{"test binary", &debug.BuildInfo{Main: debug.Module{Path: "vak"}}, "", "vak (devel) (no VCS information in this build)"},
		{"no build info", nil, "", "vak (devel) (no VCS information in this build)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(v string) { Version = v }(Version)
			Version = tc.ldflags
			if got := Of(tc.info).String(); got != tc.want+goos {
				t.Errorf("got  %q\nwant %q", got, tc.want+goos)
			}
		})
	}
}
