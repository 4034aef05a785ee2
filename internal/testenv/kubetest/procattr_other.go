//go:build !linux

package kubetest

import "syscall"

// procAttr has nothing to add where there is no parent-death signal.
func procAttr() *syscall.SysProcAttr { return nil }
