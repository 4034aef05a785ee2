package cli

import (
	"errors"

	"vak/internal/launch"
)

// startErr maps a launch.Start error to vak's exit status: a stdin or
// terminal wish the backend cannot honour is a usage error, anything else
// means the sandbox could not start (nothing ran).
func startErr(err error) error {
	if errors.Is(err, launch.ErrNotInteractive) {
		return exit(ExitUsage, err)
	}
	return exit(ExitUnavailable, err)
}
