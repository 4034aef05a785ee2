package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/fsguard"
	"vak/internal/proxynet"
)

// gcImages is `vak gc --images [--dry-run]`: it removes (or lists) the
// vak-net and vak-dockerd images this vak does not use. labels (hidden
// --label, tests) restrict it to images carrying them.
func (a *app) gcImages(ctx context.Context, dryRun bool, labelArgs []string) error {
	labels := map[string]string{}
	for _, l := range labelArgs {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return exit(ExitUsage, fmt.Errorf("--label %q: want KEY=VALUE", l))
		}
		labels[k] = v
	}
	eng, err := engine.New()
	if err != nil {
		return exitFor(err)
	}
	defer eng.Close()
	keep := []string{dockerd.DefaultRecipe.Tag()}
	bin := workerExecutable
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return exit(ExitInternal, err)
		}
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return exit(ExitInternal, fmt.Errorf("vak gc --images: read this vak (%s) to name its image: %w", bin, err))
	}
	keep = append(keep, proxynet.ImageTag(data))
	res, err := proxynet.ImageGC(ctx, eng, proxynet.ImageGCOptions{
		Repos:  []string{proxynet.ImageRepo, dockerd.ImageRepo},
		Keep:   keep,
		Labels: labels,
		DryRun: dryRun,
	})
	var freed int64
	for _, r := range res {
		switch {
		case r.Removed:
			freed += r.Size
			fmt.Fprintf(a.stdio.Out, "removed %s (%s)\n", r.Tag, humanSize(fsguard.Usage{Bytes: r.Size}))
		case r.Reason != "":
			fmt.Fprintf(a.stdio.Out, "kept %s: %s\n", r.Tag, r.Reason)
		default:
			freed += r.Size
			fmt.Fprintf(a.stdio.Out, "would remove %s (%s)\n", r.Tag, humanSize(fsguard.Usage{Bytes: r.Size}))
		}
	}
	if err != nil {
		return exitFor(err)
	}
	if freed > 0 && !dryRun {
		fmt.Fprintf(a.stdio.Out, "freed up to %s (layers shared with kept images stay)\n", humanSize(fsguard.Usage{Bytes: freed}))
	}
	return nil
}
