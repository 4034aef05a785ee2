package taskenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// GC removes a nested Docker sidecar whose session container is gone, with
// its volumes, when the session was complete (its record exists), and
// nothing else: not a sidecar a create may still be starting (no record,
// younger than the grace), not one whose session container is there, not
// another user's, not one whose name and session label disagree.
func TestGCRemovesOrphanedSidecars(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	me := fmt.Sprint(os.Getuid())
	id := func(n string) string { return "gcside" + n + "-" + randomHex(5) }
	start := func(name string, labels map[string]string) string { return f.standIn(name, labels, true) }
	sidecar := func(sid, owner, session string) string {
		return start(SidecarPrefix+sid, map[string]string{LabelDocker: "true", LabelOwner: owner, LabelSession: session})
	}
	record := func(sid string) {
		p, err := f.m.recordPath(sid)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeJSON(p, &record{ID: sid, Container: SessionPrefix + sid, Created: time.Now(), Docker: true}); err != nil {
			t.Fatal(err)
		}
	}
	orphanID := id("orphan")
	orphan := sidecar(orphanID, me, orphanID)
	record(orphanID)
	_, dataVol, sockVol := sidecarNames(orphanID)
	for _, v := range []string{dataVol, sockVol} {
		if _, err := f.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: v, Labels: f.m.Labels}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.cli.VolumeRemove(context.Background(), v, client.VolumeRemoveOptions{Force: true}) })
	}
	young := id("young") // no record: a create may be starting it
	withSession := id("live")
	other := id("other")
	mismatch := id("mismatch")
	kept := []string{
		sidecar(young, me, young),
		sidecar(withSession, me, withSession),
		start(SessionPrefix+withSession, nil),
		sidecar(other, "99999", other),
		sidecar(mismatch, me, "someone-else-0123456789"),
	}
	record(withSession)
	record(other)
	record(mismatch)
	rep, err := f.m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	for _, r := range rep.Removed {
		if r.Name == SidecarPrefix+orphanID && r.ID == orphanID {
			removed = true
		} else if r.Name != SessionPrefix+withSession {
			t.Errorf("gc removed %+v", r)
		}
	}
	if !removed {
		t.Errorf("gc did not report the orphaned sidecar: %+v", rep.Removed)
	}
	if _, err := f.cli.ContainerInspect(ctx, orphan, client.ContainerInspectOptions{}); err == nil {
		t.Error("the orphaned sidecar is still there")
	}
	for _, v := range []string{dataVol, sockVol} {
		if _, err := f.cli.VolumeInspect(ctx, v, client.VolumeInspectOptions{}); err == nil {
			t.Errorf("the orphaned sidecar's volume %s is still there", v)
		}
	}
	for _, c := range kept[:2] {
		if _, err := f.cli.ContainerInspect(ctx, c, client.ContainerInspectOptions{}); err != nil {
			t.Errorf("gc removed a sidecar it must keep: %v", err)
		}
	}
	for _, c := range kept[3:] {
		if _, err := f.cli.ContainerInspect(ctx, c, client.ContainerInspectOptions{}); err != nil {
			t.Errorf("gc removed a sidecar it must keep: %v", err)
		}
	}
}

// What the daemon will not remove because it is in use (here: an orphaned
// sidecar's socket volume, which another container mounts) is skipped by
// GC, named with the daemon's answer, and GC goes on without an error; the
// control: once that container is gone the volume goes.
func TestGCSkipsWhatIsInUse(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	key := "gcbusy-" + randomHex(5)
	f.sidecarStandIn(key, true)
	p, err := f.m.recordPath(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(p, &record{ID: key, Container: SessionPrefix + key, Created: time.Now(), Docker: true}); err != nil {
		t.Fatal(err)
	}
	name, _, sockVol := sidecarNames(key)
	user, err := f.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Image: f.image, Config: &container.Config{Cmd: []string{"true"}, Labels: f.m.Labels},
		HostConfig: &container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: sockVol, Target: "/sock"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.cli.ContainerRemove(context.Background(), user.ID, client.ContainerRemoveOptions{Force: true})
	})
	rep, err := f.m.GC(ctx)
	if err != nil {
		t.Fatalf("gc failed on a volume in use: %v", err)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Name != name || !strings.Contains(rep.Skipped[0].Reason, sockVol) || !strings.Contains(rep.Skipped[0].Reason, "in use") {
		t.Fatalf("gc skipped %+v, want %s naming %s in use", rep.Skipped, name, sockVol)
	}
	if !f.volumeExists(sockVol) {
		t.Fatal("the volume in use is gone")
	}
	if _, err := f.cli.ContainerRemove(ctx, user.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.VolumeRemove(ctx, sockVol, client.VolumeRemoveOptions{}); err != nil {
		t.Fatalf("control: the volume does not go once unused: %v", err)
	}
}
