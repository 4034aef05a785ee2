//go:build linux && arm64

package landlock

import "golang.org/x/sys/unix"

const (
	nativeArch = unix.AUDIT_ARCH_AARCH64
	x32Bit     = 0
)

var archDenied = []uintptr{}
