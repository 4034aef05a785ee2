//go:build linux && amd64

package main

import "golang.org/x/sys/unix"

// sysChmod is chmod(2), which only some architectures have.
var sysChmod = unix.SYS_CHMOD
