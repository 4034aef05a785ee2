package taskenv

import (
	"os/exec"
	"sync"
	"testing"

	"vak/internal/testenv"
)

// TestRemoveContainerConcurrently: removals of one session container by
// several vaks at once (session rm while vak gc collects it) all succeed:
// the ones that find the removal in progress wait until it is gone,
// rather than failing with the engine's "already in progress".
func TestRemoveContainerConcurrently(t *testing.T) {
	testenv.RequireDocker(t)
	img := testenv.Image(t)
	m := &Manager{}
	for round := range 4 {
		id := testenv.Docker(t, append(append([]string{"run", "-d"}, testenv.LabelArgs(t)...), img, "sleep", "300")...)
		t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", id).Run() })
		errs := make([]error, 6)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = m.removeContainer(id, "", "")
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, removal %d: %v", round, i, err)
			}
		}
		if out, err := exec.Command("docker", "inspect", id).CombinedOutput(); err == nil {
			t.Errorf("round %d: the container is still there: %s", round, out)
		}
	}
}
