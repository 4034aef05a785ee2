package main

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setuidAttempts try to leave a setuid or setgid file in the current
// directory (named after the attempt) through every call that sets a mode.
// "chmod-plain" is the control: an ordinary mode change that must work.
var setuidAttempts = map[string]func(name string) error{
	"chmod-plain": func(n string) error {
		if err := create(n); err != nil {
			return err
		}
		return unix.Chmod(n, 0o755)
	},
	"setuid-chmod": func(n string) error {
		if err := create(n); err != nil {
			return err
		}
		return unix.Chmod(n, 0o4755)
	},
	"setgid-chmod": func(n string) error {
		if err := create(n); err != nil {
			return err
		}
		return unix.Chmod(n, 0o2755)
	},
	"setuid-fchmod": func(n string) error {
		fd, err := unix.Open(n, unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Fchmod(fd, 0o4755)
	},
	"setuid-fchmodat": func(n string) error {
		if err := create(n); err != nil {
			return err
		}
		_, _, e := syscall.Syscall6(unix.SYS_FCHMODAT, atFDCWD(), uintptr(unsafe.Pointer(cstr(n))), 0o4755, 0, 0, 0)
		return errnoErr(e)
	},
	"setuid-fchmodat2": func(n string) error {
		if err := create(n); err != nil {
			return err
		}
		_, _, e := syscall.Syscall6(sysFchmodat2, atFDCWD(), uintptr(unsafe.Pointer(cstr(n))), 0o4755, 0, 0, 0)
		return errnoErr(e)
	},
	"setuid-openat-creat": func(n string) error {
		fd, err := unix.Openat(unix.AT_FDCWD, n, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0o4755)
		if err == nil {
			unix.Close(fd)
		}
		return err
	},
	"setgid-openat-creat": func(n string) error {
		fd, err := unix.Openat(unix.AT_FDCWD, n, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0o2755)
		if err == nil {
			unix.Close(fd)
		}
		return err
	},
	"setuid-openat2-creat": func(n string) error {
		fd, err := unix.Openat2(unix.AT_FDCWD, n, &unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY | unix.O_EXCL, Mode: 0o4755})
		if err == nil {
			unix.Close(fd)
		}
		return err
	},
	"setuid-mknodat": func(n string) error {
		return unix.Mknodat(unix.AT_FDCWD, n, unix.S_IFREG|0o4755, 0)
	},
}

// sysFchmodat2 is fchmodat2(2) (Linux 6.6), the same number on amd64 and arm64.
const sysFchmodat2 = 452

func create(n string) error {
	fd, err := unix.Open(n, unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func cstr(s string) *byte {
	p, _ := unix.BytePtrFromString(s)
	return p
}

func atFDCWD() uintptr {
	fd := unix.AT_FDCWD
	return uintptr(fd)
}
