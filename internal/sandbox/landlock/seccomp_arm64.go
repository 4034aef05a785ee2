//go:build linux && arm64

package landlock

import "golang.org/x/sys/unix"

const (
	nativeArch = unix.AUDIT_ARCH_AARCH64
	x32Bit     = 0
)

var archDenied = []uintptr{}

var archModeSyscalls = []modeArg{} // chmod(2) does not exist here: fchmodat only

const notifIDValid = 0x40082102 // SECCOMP_IOCTL_NOTIF_ID_VALID
