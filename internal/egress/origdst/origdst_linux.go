//go:build linux

package origdst

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Lookup returns the original destination of a redirected TCP connection.
func Lookup(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("origdst: %T has no file descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("origdst: %w", err)
	}
	is6 := false
	if ta, ok := c.LocalAddr().(*net.TCPAddr); ok && ta.IP.To4() == nil {
		is6 = true
	}
	var ap netip.AddrPort
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		ap, serr = getOrigDst(int(fd), is6)
	})
	if cerr != nil {
		return netip.AddrPort{}, fmt.Errorf("origdst: %w", cerr)
	}
	return ap, serr
}

func getOrigDst(fd int, is6 bool) (netip.AddrPort, error) {
	// struct sockaddr_in (16 bytes) or sockaddr_in6 (28 bytes).
	var buf [28]byte
	size := uint32(len(buf))
	level := unix.SOL_IP
	if is6 {
		level = unix.SOL_IPV6
	}
	// SO_ORIGINAL_DST and IP6T_SO_ORIGINAL_DST are both 80.
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(unix.SO_ORIGINAL_DST),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		if errors.Is(errno, unix.ENOENT) {
			return netip.AddrPort{}, ErrNotRedirected
		}
		return netip.AddrPort{}, fmt.Errorf("origdst: getsockopt SO_ORIGINAL_DST: %w", errno)
	}
	family := binary.NativeEndian.Uint16(buf[0:2])
	port := binary.BigEndian.Uint16(buf[2:4])
	switch family {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port), nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(buf[8:24])).Unmap(), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("origdst: unexpected address family %d", family)
}
