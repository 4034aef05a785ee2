package kubetest

import "syscall"

// procAttr makes the kernel stop a started process when the test process
// dies without running its cleanups (a timeout panic, a kill).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
