package dockerd

import (
	"encoding/json"
	"fmt"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SeccompProfile is the sidecar's seccomp profile as the Engine API takes it
// (SecurityOpt "seccomp=<json>"): Docker's default profile
// (github.com/moby/profiles/seccomp) with one extra allow entry for
// ExtraSyscalls.
func SeccompProfile() ([]byte, error) {
	p := seccomp.DefaultProfile()
	p.Syscalls = append(p.Syscalls, &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{
		Names:  append([]string(nil), ExtraSyscalls...),
		Action: specs.ActAllow,
	}})
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("dockerd: encode seccomp profile: %w", err)
	}
	return b, nil
}
