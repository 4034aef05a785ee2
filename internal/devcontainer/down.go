package devcontainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	mnetwork "github.com/moby/moby/api/types/network"
	mvolume "github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"

	"vak/internal/proxynet"
)

// ErrReceiptsNotSaved reports that Down could not copy the gateway's
// receipts out of its volume; it then keeps the volumes and networks.
var ErrReceiptsNotSaved = errors.New("devcontainer: the gateway's receipts could not be saved")

// Leftovers are a workspace's dev-container objects in the Docker engine,
// found by the template's label (LabelKey=KEY, KEY being the workspace's
// and the user's proxied-topology key), never by the compose project name,
// which two workspaces with the same folder name share.
type Leftovers struct {
	Key        string
	Containers []container.Summary
	Networks   []mnetwork.Summary
	Volumes    []mvolume.Volume
}

// FindLeftovers lists the dev-container objects of workspace ws:
// containers (running or not), networks and volumes labelled LabelKey=KEY.
func FindLeftovers(ctx context.Context, cli *client.Client, ws string) (*Leftovers, error) {
	key := proxynet.Key(ws)
	f := make(client.Filters).Add("label", LabelKey+"="+key)
	l := &Leftovers{Key: key}
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("devcontainer: list containers: %w", err)
	}
	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("devcontainer: list networks: %w", err)
	}
	vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("devcontainer: list volumes: %w", err)
	}
	l.Containers, l.Networks = cs.Items, ns.Items
	for _, v := range vs.Items {
		if v.Labels[LabelKey] == key {
			l.Volumes = append(l.Volumes, v)
		}
	}
	slices.SortFunc(l.Volumes, func(a, b mvolume.Volume) int { return strings.Compare(a.Name, b.Name) })
	return l, nil
}

// DownOptions configure Down.
type DownOptions struct {
	Engine    *client.Client
	Workspace string // canonical
	StateDir  string // the receipts are kept below it
	// DryRun lists what Down would remove and removes nothing.
	DryRun bool
	// Labels are added to the short-lived container that copies the
	// receipts out (tests: vak.test=1).
	Labels map[string]string
	// Out gets one line per object (removed, or that would be).
	Out io.Writer
}

// Down removes a workspace's dev-container leftovers (FindLeftovers): it
// force-removes the containers, copies the gateway's receipts (the whole
// log, now that the gateway is gone) out of the gateway's volume into
// proxynet.ReceiptsDir, then removes the networks and the volumes; when
// the receipts cannot be saved it keeps them (ErrReceiptsNotSaved). It
// keeps what is not the workspace's alone: the images (vak-net,
// vak-dockerd and their :devcontainer tags serve every workspace), the
// installation CA, the kept receipts, the placeholders in the state dir
// (so that the template's next up works with the same files) and the
// template's files.
func Down(ctx context.Context, o DownOptions) error {
	l, err := FindLeftovers(ctx, o.Engine, o.Workspace)
	if err != nil {
		return err
	}
	verb := "removed"
	if o.DryRun {
		verb = "would remove"
	}
	var errs []error
	remove := func(kind, name string, rm func() error) {
		if !o.DryRun {
			if err := rm(); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("devcontainer: remove %s %s: %w", kind, name, err))
				return
			}
		}
		fmt.Fprintf(o.Out, "%s %s %s\n", verb, kind, name)
	}
	for _, c := range l.Containers {
		name := strings.TrimPrefix(firstOr(c.Names, c.ID), "/")
		remove("container", name+" ("+c.Labels["com.docker.compose.service"]+", "+string(c.State)+")", func() error {
			_, err := o.Engine.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
			return err
		})
	}
	switch {
	case o.DryRun && l.hasVolume(GatewayVolume(l.Key)):
		fmt.Fprintf(o.Out, "would copy the gateway's receipts to %s\n", proxynet.ReceiptsDir(o.StateDir, l.Key))
	case !o.DryRun:
		if err := l.saveReceipts(ctx, o); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	for _, n := range l.Networks {
		remove("network", n.Name, func() error {
			_, err := o.Engine.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
			return err
		})
	}
	for _, v := range l.Volumes {
		remove("volume", v.Name, func() error {
			_, err := o.Engine.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{})
			return err
		})
	}
	if len(l.Containers)+len(l.Networks)+len(l.Volumes) == 0 {
		fmt.Fprintf(o.Out, "no dev-container objects of %s (key %s)\n", o.Workspace, l.Key)
	}
	return errors.Join(errs...)
}

func (l *Leftovers) hasVolume(name string) bool {
	return slices.ContainsFunc(l.Volumes, func(v mvolume.Volume) bool { return v.Name == name })
}

// saveReceipts copies the receipts out of the gateway's volume (when there
// is one) through a created, never started container that mounts it: the
// gateway's own image, else NetImage.
func (l *Leftovers) saveReceipts(ctx context.Context, o DownOptions) error {
	vol := GatewayVolume(l.Key)
	if !l.hasVolume(vol) {
		return nil
	}
	image := NetImage
	for _, c := range l.Containers {
		if c.Labels["com.docker.compose.service"] == "gateway" && c.ImageID != "" {
			image = c.ImageID
		}
	}
	labels := map[string]string{LabelKey: l.Key}
	maps.Copy(labels, o.Labels)
	res, err := o.Engine.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Labels: labels, Cmd: []string{"version"}},
		HostConfig: &container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: proxynet.GatewayDataDir, ReadOnly: true}}},
	})
	if err != nil {
		return fmt.Errorf("%w from volume %s (the networks and volumes were kept): %w", ErrReceiptsNotSaved, vol, err)
	}
	defer o.Engine.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
	created := ""
	for _, v := range l.Volumes {
		if v.Name == vol {
			created = v.CreatedAt
		}
	}
	dst := proxynet.ReceiptsDir(o.StateDir, l.Key)
	files, err := proxynet.CopyReceipts(ctx, o.Engine, res.ID, dst, proxynet.ReceiptsPrefix(created, "devcontainer"))
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%w from volume %s (the networks and volumes were kept): %w", ErrReceiptsNotSaved, vol, err)
	}
	for _, f := range files {
		fmt.Fprintf(o.Out, "saved receipts %s\n", f)
	}
	return nil
}

func firstOr(l []string, def string) string {
	if len(l) > 0 {
		return l[0]
	}
	return def
}
