package taskenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

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
