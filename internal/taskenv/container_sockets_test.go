package taskenv

import (
	"testing"
	"time"
)

// TestDockerSocketVolumeReadOnly: the session container sees the guard's
// socket volume read-only, so no command in it (not even an exec with
// --root) can swap reaper.sock for a link the sidecar's dockerd would
// follow to the raw socket.
func TestDockerSocketVolumeReadOnly(t *testing.T) {
	m := &Manager{}
	p := &plan{spec: Spec{Workspace: "/w", Docker: true}, id: "s1", worker: "/vak"}
	_, hc, err := m.containerConfig(p, "s1", "/run/x", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mt := range hc.Mounts {
		if mt.Target == ContainerDockerDir {
			found = true
			if !mt.ReadOnly {
				t.Errorf("%s is mounted read-write in the session container", ContainerDockerDir)
			}
		}
	}
	if !found {
		t.Fatalf("no mount at %s in a --docker session: %+v", ContainerDockerDir, hc.Mounts)
	}
}
