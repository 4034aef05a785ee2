package docker

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// setuidBits are the mode bits no sandboxed command may set.
const setuidBits = unix.S_ISUID | unix.S_ISGID

// modeArg says which argument of a syscall is a file mode, and which (if
// any, else -1) are its open flags: the mode only counts when the flags
// create a file.
type modeArg struct {
	name  string
	mode  uint
	flags int
}

// modeSyscalls are the calls that set a file's mode.
var modeSyscalls = []modeArg{
	{"chmod", 1, -1}, {"fchmod", 1, -1}, {"fchmodat", 2, -1}, {"fchmodat2", 2, -1},
	{"creat", 1, -1}, {"mknod", 1, -1}, {"mknodat", 2, -1},
	{"open", 2, 1}, {"openat", 3, 2},
}

// SeccompProfile returns Docker's default seccomp profile (from the moby
// module) with vak's rules, as the JSON the Engine takes:
//
//   - chmod, fchmod, fchmodat, fchmodat2, creat, mknod and mknodat are
//     allowed only when the mode has neither S_ISUID nor S_ISGID; open and
//     openat also when they create nothing (no O_CREAT, no O_TMPFILE); the
//     rest fails with the profile's default errno (EPERM).
//
// openat2 stays allowed: its mode sits behind a pointer the filter cannot
// read, and vak's own worker (fsguard) needs it inside session containers.
// A setuid file created through it is caught by the tripwire after the
// command, which clears the bits on the host side.
func SeccompProfile() ([]byte, error) {
	p := seccomp.DefaultProfile()
	var drop []string
	for _, m := range modeSyscalls {
		drop = append(drop, m.name)
	}
	for _, sc := range p.Syscalls {
		sc.Names = slices.DeleteFunc(sc.Names, func(n string) bool { return slices.Contains(drop, n) })
	}
	//lint:ignore SA1019 an entry of the default profile may still use the old single-name field
	p.Syscalls = slices.DeleteFunc(p.Syscalls, func(sc *seccomp.Syscall) bool { return len(sc.Names) == 0 && sc.Name == "" })
	creating := uint64(unix.O_CREAT | (unix.O_TMPFILE &^ unix.O_DIRECTORY))
	for _, m := range modeSyscalls {
		p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
			LinuxSyscall: specs.LinuxSyscall{
				Names:  []string{m.name},
				Action: specs.ActAllow,
				Args:   []specs.LinuxSeccompArg{{Index: m.mode, Value: setuidBits, ValueTwo: 0, Op: specs.OpMaskedEqual}},
			},
			Comment: "vak: no setuid or setgid bit",
		})
		if m.flags >= 0 {
			p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
				LinuxSyscall: specs.LinuxSyscall{
					Names:  []string{m.name},
					Action: specs.ActAllow,
					Args:   []specs.LinuxSeccompArg{{Index: uint(m.flags), Value: creating, ValueTwo: 0, Op: specs.OpMaskedEqual}},
				},
				Comment: "vak: opens that create nothing",
			})
		}
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("docker: seccomp profile: %w", err)
	}
	return data, nil
}
