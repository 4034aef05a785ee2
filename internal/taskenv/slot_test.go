package taskenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/engine"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// slotFixture starts stand-in containers (sleep) with the fixture's labels
// plus labels, removed at the end.
func (f *fixture) standIn(name string, labels map[string]string, run bool) string {
	t, ctx := f.t, context.Background()
	t.Helper()
	l := map[string]string{}
	for k, v := range f.m.Labels {
		l[k] = v
	}
	for k, v := range labels {
		l[k] = v
	}
	c, err := f.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Image: f.image,
		Config: &container.Config{Cmd: []string{"sleep", "300"}, Labels: l}, HostConfig: &container.HostConfig{NetworkMode: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true}) })
	if run {
		if _, err := f.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return c.ID
}

// sidecarStandIn is a stand-in sidecar of docker slot key with both
// volumes.
func (f *fixture) sidecarStandIn(key string, run bool) string {
	t, ctx := f.t, context.Background()
	t.Helper()
	name, dataVol, sockVol := sidecarNames(key)
	for _, v := range []string{dataVol, sockVol} {
		if _, err := f.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: v, Labels: f.m.Labels}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.cli.VolumeRemove(context.Background(), v, client.VolumeRemoveOptions{Force: true}) })
	}
	return f.standIn(name, map[string]string{LabelDocker: "true", LabelOwner: fmt.Sprint(os.Getuid()), LabelSession: key}, run)
}

func (f *fixture) exists(ref string) bool {
	_, err := f.cli.ContainerInspect(context.Background(), ref, client.ContainerInspectOptions{})
	return err == nil
}

func (f *fixture) volumeExists(name string) bool {
	_, err := f.cli.VolumeInspect(context.Background(), name, client.VolumeInspectOptions{})
	return err == nil
}

func poolSlot() string { return PoolSlotPrefix + randomHex(8) }

// The dead-sidecar check of exec and Discard use the docker slot key of
// the session's record, not its ID: with a decoy sidecar named by the
// session ID running, a record whose slot's sidecar is stopped is refused
// naming that sidecar, and Discard removes the slot's sidecar and volumes
// and leaves the decoy alone. A record without the field (made before it
// existed) means the session ID.
func TestDockerSlotFromRecord(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := "slotrec-" + randomHex(5)
	key := poolSlot()
	sess := f.standIn(SessionPrefix+id, nil, true)
	decoy := f.sidecarStandIn(id, true)
	f.sidecarStandIn(key, false) // created, never started: "not running"
	rp, err := f.m.recordPath(id)
	if err != nil {
		t.Fatal(err)
	}
	rec := &record{ID: id, Container: sess, Name: SessionPrefix + id, Created: time.Now(), Docker: true, DockerSlot: key}
	if err := writeJSON(rp, rec); err != nil {
		t.Fatal(err)
	}
	err = f.m.checkSidecar(ctx, rec)
	if !errors.Is(err, ErrDockerUnavailable) || !strings.Contains(err.Error(), SidecarPrefix+key) || !strings.Contains(err.Error(), "not running") {
		t.Errorf("exec check with the slot's sidecar stopped: %v (want it named)", err)
	}
	// Control: the old record shape (no slot) checks the sidecar named by
	// the ID, which runs; the fence check then looks at its network mode.
	old := *rec
	old.DockerSlot = ""
	if err := f.m.checkSidecar(ctx, &old); err == nil || strings.Contains(err.Error(), "not running") || !strings.Contains(err.Error(), "network mode") {
		t.Errorf("control: a record without a slot did not check the sidecar named by its ID: %v", err)
	}
	if err := f.m.Discard(ctx, id); err != nil {
		t.Fatal(err)
	}
	name, dataVol, sockVol := sidecarNames(key)
	if f.exists(name) || f.volumeExists(dataVol) || f.volumeExists(sockVol) {
		t.Errorf("Discard left the slot's sidecar or its volumes")
	}
	if !f.exists(decoy) {
		t.Errorf("Discard removed the sidecar named by the session ID, not the record's slot")
	}
	if f.exists(sess) {
		t.Errorf("Discard left the session container")
	}
	// A record naming something that is not a slot key is refused, and
	// nothing is removed by it.
	bad := &record{ID: id, Docker: true, DockerSlot: "../" + id}
	if err := f.m.checkSidecar(ctx, bad); !errors.Is(err, ErrDockerUnavailable) {
		t.Errorf("a record with a bad slot: %v", err)
	}
	if err := f.m.removeSidecar("vak-nc-x"); err == nil {
		t.Errorf("removeSidecar accepted a key that is not a slot")
	}
}

// GC with docker slots: a pool-slot sidecar whose pair is complete (a pool
// entry names it) and whose container is gone is removed with its volumes
// at once; one no container uses and nothing names is left alone while a
// fill may be starting it; one used by a container labelled with its slot
// (a claimed session, named by its own ID) is left to that session; a
// stopped claimed session is removed with its slot's sidecar.
func TestGCDockerSlots(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	me := fmt.Sprint(os.Getuid())
	sessLabels := func(key string) map[string]string {
		return map[string]string{engine.LabelManaged: "true", engine.LabelKind: KindSession, LabelOwner: me,
			LabelDocker: "true", LabelDockerSlot: key, LabelCreated: fmt.Sprint(time.Now().Unix())}
	}
	orphan, young, used, ended := poolSlot(), poolSlot(), poolSlot(), poolSlot()
	f.sidecarStandIn(orphan, true)
	f.sidecarStandIn(young, true)
	f.sidecarStandIn(used, true)
	f.sidecarStandIn(ended, true)
	// orphan: a pool entry names it, its pool container is gone.
	d, err := f.m.stateDir()
	if err != nil {
		t.Fatal(err)
	}
	pdir := filepath.Join(d, "pool", "0123456789abcdef01234567")
	os.MkdirAll(pdir, 0o700)
	if err := writeJSON(filepath.Join(pdir, "x.json"), &record{Container: "gone-" + randomHex(4), Docker: true, DockerSlot: orphan}); err != nil {
		t.Fatal(err)
	}
	// used: a running claimed session labelled with it.
	liveID := "slotlive-" + randomHex(5)
	f.standIn(SessionPrefix+liveID, sessLabels(used), true)
	// ended: a claimed session that stopped.
	endedID := "slotend-" + randomHex(5)
	endedC := f.standIn(SessionPrefix+endedID, sessLabels(ended), true)
	if _, err := f.cli.ContainerKill(ctx, endedC, client.ContainerKillOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		ins, err := f.cli.ContainerInspect(ctx, endedC, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !ins.Container.State.Running {
			break
		}
		if i == 200 {
			t.Fatal("the killed stand-in still runs")
		}
		time.Sleep(50 * time.Millisecond)
	}
	rep, err := f.m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gc: %+v", rep.Removed)
	for _, tc := range []struct {
		key  string
		gone bool
	}{{orphan, true}, {young, false}, {used, false}, {ended, true}} {
		name, dataVol, sockVol := sidecarNames(tc.key)
		if f.exists(name) == tc.gone || f.volumeExists(dataVol) == tc.gone || f.volumeExists(sockVol) == tc.gone {
			t.Errorf("sidecar %s: container %t, volumes %t %t; want gone=%t", name, f.exists(name), f.volumeExists(dataVol), f.volumeExists(sockVol), tc.gone)
		}
	}
	if f.exists(SessionPrefix + endedID) {
		t.Errorf("gc left the stopped session")
	}
	if !f.exists(SessionPrefix + liveID) {
		t.Errorf("gc removed the live session")
	}
}
