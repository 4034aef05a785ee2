package taskenv

import (
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

// A claimed pool container must mount its slot's socket volume read-only
// at /.vak/docker (the socket the claim's `docker info` and the session's
// commands use): another volume, a bind, a writable mount or none is
// refused, naming what is there.
func TestMountsSocketVolume(t *testing.T) {
	const key = "pool-0123456789abcdef"
	_, _, sockVol := sidecarNames(key)
	with := func(ms ...mount.Mount) container.InspectResponse {
		return container.InspectResponse{HostConfig: &container.HostConfig{Mounts: ms}}
	}
	ws := mount.Mount{Type: mount.TypeBind, Source: "/ws", Target: "/ws"}
	for _, tc := range []struct {
		name string
		got  container.InspectResponse
		want string // "" = accepted
	}{
		{"own volume read-only", with(ws, mount.Mount{Type: mount.TypeVolume, Source: sockVol, Target: ContainerDockerDir, ReadOnly: true}), ""},
		{"another slot's volume", with(ws, mount.Mount{Type: mount.TypeVolume, Source: "vak-dockerd-pool-fedcba9876543210-sock", Target: ContainerDockerDir, ReadOnly: true}), "vak-dockerd-pool-fedcba9876543210-sock"},
		{"writable", with(mount.Mount{Type: mount.TypeVolume, Source: sockVol, Target: ContainerDockerDir}), "read-only false"},
		{"a bind", with(mount.Mount{Type: mount.TypeBind, Source: "/var/run", Target: ContainerDockerDir, ReadOnly: true}), "bind /var/run"},
		{"not mounted", with(ws), "is not mounted"},
		{"no host config", container.InspectResponse{}, "is not mounted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mountsSocketVolume(tc.got, key)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("= %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
