// Package version says which vak this binary is: the version set at build
// time or the main module's, and the VCS revision its build info records
// (runtime/debug.ReadBuildInfo).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version, when set at build time (-ldflags "-X vak/internal/version.Version=v1.2.3"),
// is the version vak reports instead of the main module's version in the
// binary's build info.
var Version string

// Devel is the main module's version Go records when it has none (a test
// binary, -buildvcs=false, a build outside a repository).
const Devel = "(devel)"

// Build is what `vak version` reports, read from the binary's build info:
// the VCS fields are empty when the build recorded none.
type Build struct {
	Version  string `json:"version"`
	VCS      bool   `json:"vcs"`                // the build recorded a VCS revision
	Revision string `json:"revision,omitempty"` // vcs.revision, in full
	Time     string `json:"time,omitempty"`     // vcs.time (commit time, RFC 3339)
	Modified bool   `json:"modified"`           // vcs.modified: built from a tree with uncommitted changes
	Go       string `json:"go"`
	Platform string `json:"platform"` // GOOS/GOARCH
}

// Current is Of this binary's build info.
func Current() Build {
	info, _ := debug.ReadBuildInfo()
	return Of(info)
}

// Of reads info (nil when the binary carries no build info).
func Of(info *debug.BuildInfo) Build {
	v := Build{Version: Devel, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info != nil {
		if info.Main.Version != "" {
			v.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision, v.VCS = s.Value, s.Value != ""
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if Version != "" {
		v.Version = Version
	}
	return v
}

// shortRevision is how many hex digits of the revision the text form
// shows (as in Go's pseudo-versions).
const shortRevision = 12

// String is the one-line form: `vak VERSION (rev REV, TIME[, modified]) GO
// OS/ARCH`, or a note in place of the parenthesis when the build recorded
// no VCS information.
func (v Build) String() string {
	vcs := "no VCS information in this build"
	if v.VCS {
		rev := v.Revision
		if len(rev) > shortRevision {
			rev = rev[:shortRevision]
		}
		parts := []string{"rev " + rev}
		if v.Time != "" {
			parts = append(parts, v.Time)
		}
		if v.Modified {
			parts = append(parts, "modified")
		}
		vcs = strings.Join(parts, ", ")
	}
	return fmt.Sprintf("vak %s (%s) %s %s", v.Version, vcs, v.Go, v.Platform)
}
