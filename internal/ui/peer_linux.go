//go:build linux

package ui

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// peerUID is the uid owning the other end of the loopback TCP connection
// c: the socket whose local address is c's remote one and whose remote
// address is c's local one, in the kernel's table of this network
// namespace (/proc/net/tcp, tcp6). Not found (it closed, or it is in
// another namespace) is an error, which refuses the peer.
func peerUID(c net.Conn) (int, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return -1, errors.New("ui: not a TCP connection")
	}
	l, r := local.AddrPort(), remote.AddrPort()
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		uid, err := findUID(table, r, l)
		if err == nil {
			return uid, nil
		}
		if !errors.Is(err, errNotFound) {
			return -1, err
		}
	}
	return -1, fmt.Errorf("ui: no socket %s -> %s in this network namespace", r, l)
}

var errNotFound = errors.New("ui: socket not found")

// findUID finds the socket local -> remote in table.
func findUID(table string, local, remote netip.AddrPort) (int, error) {
	f, err := os.Open(table)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		la, err1 := parseProcAddr(fs[1])
		ra, err2 := parseProcAddr(fs[2])
		if err1 != nil || err2 != nil || !sameAddrPort(la, local) || !sameAddrPort(ra, remote) {
			continue
		}
		uid, err := strconv.Atoi(fs[7])
		if err != nil {
			return -1, fmt.Errorf("ui: %s: uid %q: %w", table, fs[7], err)
		}
		return uid, nil
	}
	if err := sc.Err(); err != nil {
		return -1, err
	}
	return -1, errNotFound
}

func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// parseProcAddr parses an address of /proc/net/tcp{,6}: the address as
// 32-bit words in the kernel's byte order, in hex, then ':' and the port
// in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("ui: address %q", s)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("ui: address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("ui: port %q", s)
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		// The hex is of each word as a number: back to the kernel's order.
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// errPeerCheck is nil where peerUID works.
var errPeerCheck error
