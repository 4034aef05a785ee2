package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Version, when set at build time (-ldflags "-X vak/internal/cli.Version=v1.2.3"),
// is the version vak reports instead of the main module's version in the
// binary's build info.
var Version string

// develVersion is the main module's version Go records when it has none
// (a test binary, -buildvcs=false, a build outside a repository).
const develVersion = "(devel)"

// buildVersion is what `vak version` reports, read from the binary's build
// info (runtime/debug.ReadBuildInfo): the VCS fields are empty when the
// build recorded none.
type buildVersion struct {
	Version  string `json:"version"`
	VCS      bool   `json:"vcs"`                // the build recorded a VCS revision
	Revision string `json:"revision,omitempty"` // vcs.revision, in full
	Time     string `json:"time,omitempty"`     // vcs.time (commit time, RFC 3339)
	Modified bool   `json:"modified"`           // vcs.modified: built from a tree with uncommitted changes
	Go       string `json:"go"`
	Platform string `json:"platform"` // GOOS/GOARCH
}

// versionOf reads info (nil when the binary carries no build info).
func versionOf(info *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: develVersion, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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
func (v buildVersion) String() string {
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

func (a *app) newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print vak's version and the revision it was built from",
		Long: `Print vak's version and what its build info records: the main module's
version, the VCS revision and commit time it was built from, and whether the
tree had uncommitted changes ("modified"). Go records them when it builds in
a git clone; a binary built without them (-buildvcs=false, a test binary, a
build outside a clone or in a git worktree, whose .git is a file) says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, _ := debug.ReadBuildInfo()
			v := versionOf(info)
			if asJSON {
				b, err := json.Marshal(v)
				if err != nil {
					return exit(ExitInternal, fmt.Errorf("version: %w", err))
				}
				fmt.Fprintf(a.stdio.Out, "%s\n", b)
				return nil
			}
			fmt.Fprintln(a.stdio.Out, v)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the fields as one JSON object")
	return cmd
}
