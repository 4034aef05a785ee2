package cli

import (
	"context"
	"errors"
	"fmt"

	"vak/internal/fsguard"
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
	res, err := launch.ImageGC(ctx, workerExecutable, labels, dryRun)
	var freed int64
	for _, r := range res {
		switch {
		case r.Removed:
			freed += r.Size
			fmt.Fprintf(a.stdio.Out, "removed %s (%s)\n", r.Tag, fsguard.Usage{Bytes: r.Size}.Human())
		case r.Reason != "":
			fmt.Fprintf(a.stdio.Out, "kept %s: %s\n", r.Tag, r.Reason)
		default:
			freed += r.Size
			fmt.Fprintf(a.stdio.Out, "would remove %s (%s)\n", r.Tag, fsguard.Usage{Bytes: r.Size}.Human())
		}
	}
	if errors.Is(err, launch.ErrOwnBinary) {
		return exit(ExitInternal, err)
	} else if err != nil {
		return exitFor(err)
	}
	if freed > 0 && !dryRun {
		fmt.Fprintf(a.stdio.Out, "freed up to %s (layers shared with kept images stay)\n", fsguard.Usage{Bytes: freed}.Human())
	}
	return nil
}
