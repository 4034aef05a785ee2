package taskenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"vak/internal/engine"
	"vak/internal/sandbox/docker"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// GC removes a running command container whose owner process is gone
// (the case the lifeline does not cover: a container that kept running),
// and nothing else: not one whose owner lives, not another user's, not one
// that is not named like a command container, not one without an owner.
func TestGCRemovesOrphanedRunContainers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sleeper := exec.Command("sleep", "100")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	dead, err := engine.OwnerToken(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	sleeper.Process.Kill()
	sleeper.Wait()
	live, err := engine.OwnerToken(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	me := fmt.Sprint(os.Getuid())
	start := func(name string, labels map[string]string) string {
		l := map[string]string{engine.LabelManaged: "true", engine.LabelKind: "run"}
		for k, v := range f.m.Labels {
			l[k] = v
		}
		for k, v := range labels {
			l[k] = v
		}
		c, err := f.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name + f.run, Image: f.image,
			Config: &container.Config{Cmd: []string{"sleep", "300"}, Labels: l}, HostConfig: &container.HostConfig{NetworkMode: "none"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true}) })
		if _, err := f.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	orphan := start(docker.NamePrefix+"orphan-", map[string]string{LabelOwner: me, LabelOwnerProc: dead})
	kept := []string{
		start(docker.NamePrefix+"live-", map[string]string{LabelOwner: me, LabelOwnerProc: live}),
		start(docker.NamePrefix+"other-user-", map[string]string{LabelOwner: "99999", LabelOwnerProc: dead}),
		start("not-a-run-", map[string]string{LabelOwner: me, LabelOwnerProc: dead}),
		start(docker.NamePrefix+"no-owner-", map[string]string{LabelOwner: me}),
	}
	rep, err := f.m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	for _, r := range rep.Removed {
		if r.Name == docker.NamePrefix+"orphan-"+f.run && r.Reason == "its owner process is gone" {
			removed = true
		} else {
			t.Errorf("gc removed %+v", r)
		}
	}
	if !removed {
		t.Errorf("gc did not report the orphaned command container: %+v", rep.Removed)
	}
	if _, err := f.cli.ContainerInspect(ctx, orphan, client.ContainerInspectOptions{}); err == nil {
		t.Error("the orphaned command container is still there")
	}
	for _, id := range kept {
		if _, err := f.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err != nil {
			t.Errorf("gc removed a container it must keep: %v", err)
		}
	}
}
