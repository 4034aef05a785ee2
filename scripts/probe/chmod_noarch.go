//go:build linux && !amd64

package main

// sysChmod: this architecture has no chmod(2), only fchmodat.
var sysChmod = -1
