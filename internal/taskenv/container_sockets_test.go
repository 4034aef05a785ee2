package taskenv

import (
	"errors"
	"testing"
	"time"
)

// TestDockerSocketVolumeReadOnly: the session container sees the guard's
// socket volume read-only, so no command in it (not even an exec with
// --root) can swap reaper.sock for a link the sidecar's dockerd would
// follow to the raw socket. The volume is the one of the container's
// docker slot (the session ID for a cold create, a pool slot for a warm
// pair), named by the vak.docker.slot label; a key of another shape is
// refused.
func TestDockerSocketVolumeReadOnly(t *testing.T) {
	m := &Manager{}
	const id = "t-0123456789"
	p := &plan{spec: Spec{Workspace: "/w", Docker: true}, id: id, worker: "/vak"}
	for _, tc := range []struct {
		name, session, pool, slot string
	}{
		{"Cold", id, "", id},
		{"Pool", "", "0123456789abcdef01234567", PoolSlotPrefix + "00112233445566ff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, hc, err := m.containerConfig(p, tc.session, "/run/x", tc.pool, tc.slot, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Labels[LabelDockerSlot]; got != tc.slot {
				t.Errorf("label %s = %q, want %q", LabelDockerSlot, got, tc.slot)
			}
			_, _, sockVol := sidecarNames(tc.slot)
			found := false
			for _, mt := range hc.Mounts {
				if mt.Target == ContainerDockerDir {
					found = true
					if !mt.ReadOnly {
						t.Errorf("%s is mounted read-write in the session container", ContainerDockerDir)
					}
					if mt.Source != sockVol {
						t.Errorf("%s is volume %q, want the slot's %q", ContainerDockerDir, mt.Source, sockVol)
					}
				}
			}
			if !found {
				t.Fatalf("no mount at %s in a --docker session: %+v", ContainerDockerDir, hc.Mounts)
			}
		})
	}
	for _, bad := range []string{"", "s1", "../x", "pool-xyz", PoolSlotPrefix + "0011223344556677aa"} {
		if _, _, err := m.containerConfig(p, id, "/run/x", "", bad, time.Now()); !errors.Is(err, ErrDockerUnavailable) {
			t.Errorf("slot %q: %v, want ErrDockerUnavailable", bad, err)
		}
	}
}

// TestDockerSlot: the slot key comes from the record; a record written
// before the field existed means the session ID; a key of another shape is
// refused (vak removes containers and volumes named by it). Pool slots and
// session IDs never collide.
func TestDockerSlot(t *testing.T) {
	const id = "t-0123456789"
	pool := PoolSlotPrefix + "0123456789abcdef"
	for _, tc := range []struct {
		rec     record
		want    string
		wantErr bool
	}{
		{record{ID: id, Docker: true}, id, false},
		{record{ID: id, Docker: true, DockerSlot: id}, id, false},
		{record{ID: id, Docker: true, DockerSlot: pool}, pool, false},
		{record{ID: id, Docker: true, DockerSlot: "../../etc"}, "", true},
		{record{ID: id, Docker: true, DockerSlot: "vak-nc-x"}, "", true},
	} {
		got, err := tc.rec.dockerSlot()
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q (error %t)", tc.rec, got, err, tc.want, tc.wantErr)
		}
	}
	if ValidID(pool) {
		t.Errorf("pool slot %q is also a session ID", pool)
	}
	if poolSlotRe().MatchString(SessionID("pool", "/w")) {
		t.Errorf("a session ID is a pool slot")
	}
}
