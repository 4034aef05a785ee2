package engine

import (
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"syscall"

	"vak/internal/errclass"
)

// ErrWorkerBinary reports a vak binary that cannot be a container's
// entrypoint (a session's worker, a topology's gateway or netclient): not a
// Linux ELF executable for the image's architecture, or dynamically linked
// (the container has no matching C library, often none at all).
var ErrWorkerBinary = errclass.New(errclass.Unavailable, "unusable worker binary")

// elfMachines maps Docker/Go architecture names to ELF machines.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"x86_64":  elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"aarch64": elf.EM_AARCH64,
	"386":     elf.EM_386,
	"arm":     elf.EM_ARM,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// CheckWorkerBinary verifies that path is a statically linked Linux ELF
// executable for arch (a Docker architecture name; empty skips the check):
// the vak binary a session container or a proxied topology's gateway and
// netclient containers run. A dynamic binary has a PT_INTERP program header
// naming its loader, which the container does not have. The error wraps
// ErrWorkerBinary and names the file and the fix.
func CheckWorkerBinary(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%w %s: not a Linux ELF executable (%v); session containers run a Linux build of vak: build one with GOOS=linux CGO_ENABLED=0 and set session.worker to it", ErrWorkerBinary, path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%w %s: ELF type %v is not an executable", ErrWorkerBinary, path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := readInterp(p)
			return fmt.Errorf("%w %s: it is dynamically linked (interpreter %s), but a session container has no C library to load it: build vak with CGO_ENABLED=0 (e.g. CGO_ENABLED=0 go build -o vak ./cmd/vak), or set session.worker to a static Linux vak binary", ErrWorkerBinary, path, interp)
		}
	}
	if arch != "" {
		want, ok := elfMachines[strings.ToLower(arch)]
		if ok && f.Machine != want {
			return fmt.Errorf("%w %s: built for %v, but the image is %s: set session.worker to a vak built with GOARCH=%s CGO_ENABLED=0", ErrWorkerBinary, path, f.Machine, arch, arch)
		}
	}
	return nil
}

// CheckRunnableBy verifies that uid:gid may read and execute the regular
// file path (a session container runs the worker as the session's user).
// The error wraps ErrWorkerBinary and names the file, the user and the mode.
func CheckRunnableBy(path string, uid, gid int) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrWorkerBinary, path, err)
	}
	perm := fi.Mode().Perm()
	need := os.FileMode(0o005)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		switch {
		case uid == 0:
			need = 0o001 // root reads anything; it needs one x bit
			if perm&0o111 != 0 {
				perm |= 0o001
			}
		case int(st.Uid) == uid:
			perm >>= 6
		case int(st.Gid) == gid:
			perm >>= 3
		}
	}
	if !fi.Mode().IsRegular() || perm&need != need {
		return fmt.Errorf("%w %s: the session's user %d:%d cannot read and execute it (mode %v)", ErrWorkerBinary, path, uid, gid, fi.Mode())
	}
	return nil
}

func readInterp(p *elf.Prog) (string, error) {
	b := make([]byte, min(p.Filesz, 4096))
	if _, err := p.ReadAt(b, 0); err != nil {
		return "?", err
	}
	return strings.TrimRight(string(b), "\x00"), nil
}
