package proxynet

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/client"
)

// ImageGCGrace is how old a vak image must be before `vak gc --images`
// removes it: a vak of another version may have just built it and be about
// to start a container from it.
const ImageGCGrace = time.Hour

// ImageGCOptions selects the images ImageGC considers.
type ImageGCOptions struct {
	// Repos are the repositories vak builds into (vak-net, vak-dockerd).
	// Only tags of these repositories are ever removed.
	Repos []string
	// Keep are the tags the running vak uses (its own vak-net tag, the
	// sidecar recipe's tag); they are never removed. Tags ending in
	// ":devcontainer" are kept too: generated dev-container projects name
	// them.
	Keep []string
	// Labels, when set, restrict ImageGC to images carrying all of them.
	Labels map[string]string
	// Grace keeps images younger than it (ImageGCGrace when zero).
	Grace time.Duration
	// DryRun lists what would be removed and removes nothing.
	DryRun bool
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// ImageGCResult is one tag ImageGC looked at.
type ImageGCResult struct {
	Tag     string
	Size    int64 // bytes of the image the tag names
	Removed bool  // false: kept (Reason says why) or, with DryRun, would be removed
	Reason  string
}

// ImageGC removes the tags of vak-built images that the running vak does
// not use: images left by earlier vak binaries (each builds its own
// content-addressed vak-net tag) and earlier sidecar recipes. A tag whose
// image a container still uses (running or not) is kept: the Engine refuses
// to remove it and ImageGC reports that. Nothing is forced.
func ImageGC(ctx context.Context, cli *client.Client, o ImageGCOptions) ([]ImageGCResult, error) {
	f := make(client.Filters)
	for _, r := range o.Repos {
		f.Add("reference", r)
	}
	for k, v := range o.Labels {
		f.Add("label", k+"="+v)
	}
	imgs, err := cli.ImageList(ctx, client.ImageListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("proxynet: list images: %w", err)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	plan := PlanImageGC(imgs.Items, o, now())
	for i := range plan {
		p := &plan[i]
		if p.Reason != "" || o.DryRun {
			continue
		}
		_, err := cli.ImageRemove(ctx, p.Tag, client.ImageRemoveOptions{PruneChildren: true})
		switch {
		case err == nil:
			p.Removed = true
		case cerrdefs.IsConflict(err):
			p.Reason = "in use by a container"
		case cerrdefs.IsNotFound(err):
			p.Reason = "already gone"
		default:
			return plan, fmt.Errorf("proxynet: remove image %s: %w", p.Tag, err)
		}
	}
	return plan, nil
}

// PlanImageGC decides, without touching the Engine, which tags of imgs
// ImageGC would remove: those with an empty Reason. It is sorted by tag.
func PlanImageGC(imgs []image.Summary, o ImageGCOptions, now time.Time) []ImageGCResult {
	grace := o.Grace
	if grace == 0 {
		grace = ImageGCGrace
	}
	keep := map[string]bool{}
	for _, k := range o.Keep {
		keep[k] = true
	}
	repo := map[string]bool{}
	for _, r := range o.Repos {
		repo[r] = true
	}
	var out []ImageGCResult
	for _, im := range imgs {
		// An image tagged for the running vak or for a dev container is
		// kept under all its tags: removing a sibling tag frees nothing.
		pinned := ""
		for _, t := range im.RepoTags {
			if keep[t] {
				pinned = "used by this vak"
			} else if strings.HasSuffix(t, ":devcontainer") && pinned == "" {
				pinned = "named by dev-container projects"
			}
		}
		for _, t := range im.RepoTags {
			r, _, ok := strings.Cut(t, ":")
			if !ok || !repo[r] {
				continue
			}
			res := ImageGCResult{Tag: t, Size: im.Size}
			switch {
			case pinned != "":
				res.Reason = pinned
			case now.Sub(time.Unix(im.Created, 0)) < grace:
				res.Reason = fmt.Sprintf("younger than %s", grace)
			}
			out = append(out, res)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}
