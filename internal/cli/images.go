package cli

import (
	"context"
	"errors"

	"vak/internal/launch"
)

// gcImages is `vak gc --images [--dry-run]`: it removes (or lists) the
// vak-net and vak-dockerd images this vak does not use (launch.ImageGC).
// labels (hidden --label, tests) restrict it to images carrying them.
func (a *app) gcImages(ctx context.Context, dryRun bool, labelArgs []string) error {
	labels := map[string]string{}
	if err := addLabels(labels, labelArgs); err != nil {
		return err
	}
	err := launch.ImageGCReport(ctx, a.stdio.Out, workerExecutable, labels, dryRun)
	if errors.Is(err, launch.ErrOwnBinary) {
		return exit(ExitInternal, err)
	} else if err != nil {
		return exitFor(err)
	}
	return nil
}
