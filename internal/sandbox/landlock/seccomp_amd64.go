//go:build linux && amd64

package landlock

import "golang.org/x/sys/unix"

const (
	nativeArch = unix.AUDIT_ARCH_X86_64
	x32Bit     = 0x40000000 // __X32_SYSCALL_BIT
)

var archDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB}

var archModeSyscalls = []modeArg{{unix.SYS_CHMOD, 1}}

const notifIDValid = 0x40082102 // SECCOMP_IOCTL_NOTIF_ID_VALID
