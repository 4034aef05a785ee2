// Package proxyproto reads and writes PROXY protocol version 2 headers (the
// binary form from HAProxy's proxy-protocol.txt). The sandbox's forwarder
// prefixes every connection it hands to the gateway's transparent listener
// with one, carrying the destination the sandboxed process dialled.
//
// Only what the gateway needs is accepted: version 2, the PROXY command,
// TCP over IPv4 or IPv6. TLVs are skipped (bounded by MaxHeaderLen). The
// LOCAL command, UNIX and UDP families, and version 1 text headers are
// refused. The destination carried here is a hint for receipts and for
// connections without a name; the gateway never dials it on a name's behalf.
package proxyproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
)

// Signature is the 12-byte magic that starts every version 2 header.
const Signature = "\r\n\r\n\x00\r\nQUIT\n"

// MaxHeaderLen bounds the address-and-TLV part of a header, so a peer cannot
// make the gateway read or buffer an arbitrary amount before the stream.
const MaxHeaderLen = 1024

// Errors.
var (
	// ErrNotProxy means the stream does not start with a version 2 signature.
	ErrNotProxy = errors.New("proxyproto: no PROXY v2 signature")
	// ErrUnsupported means a valid header the gateway does not accept
	// (LOCAL command, non-TCP transport, UNIX family).
	ErrUnsupported = errors.New("proxyproto: unsupported header")
	// ErrMalformed means a header with a bad version, length or address block.
	ErrMalformed = errors.New("proxyproto: malformed header")
)

// Header is a parsed PROXY v2 header for a TCP connection.
type Header struct {
	Source      netip.AddrPort
	Destination netip.AddrPort
}

const (
	fixedLen   = 16
	cmdLocal   = 0x0
	cmdProxy   = 0x1
	famInet    = 0x1
	famInet6   = 0x2
	transTCP   = 0x1
	inetLen    = 12
	inet6Len   = 36
	versionTwo = 0x2
)

// Parse parses a header at the start of b and returns it with its total
// length. It returns io.ErrUnexpectedEOF if b is a proper prefix of a header.
func Parse(b []byte) (Header, int, error) {
	n := min(len(b), len(Signature))
	if string(b[:n]) != Signature[:n] {
		return Header{}, 0, ErrNotProxy
	}
	if len(b) < fixedLen {
		return Header{}, 0, io.ErrUnexpectedEOF
	}
	verCmd, famTrans := b[12], b[13]
	bodyLen := int(binary.BigEndian.Uint16(b[14:16]))
	if verCmd>>4 != versionTwo {
		return Header{}, 0, fmt.Errorf("%w: version %d", ErrMalformed, verCmd>>4)
	}
	if bodyLen > MaxHeaderLen {
		return Header{}, 0, fmt.Errorf("%w: length %d exceeds %d", ErrMalformed, bodyLen, MaxHeaderLen)
	}
	total := fixedLen + bodyLen
	if len(b) < total {
		return Header{}, 0, io.ErrUnexpectedEOF
	}
	body := b[fixedLen:total]
	switch verCmd & 0xf {
	case cmdProxy:
	case cmdLocal:
		return Header{}, total, fmt.Errorf("%w: LOCAL command carries no destination", ErrUnsupported)
	default:
		return Header{}, 0, fmt.Errorf("%w: command %d", ErrMalformed, verCmd&0xf)
	}
	if famTrans&0xf != transTCP {
		return Header{}, total, fmt.Errorf("%w: transport %d is not TCP", ErrUnsupported, famTrans&0xf)
	}
	var h Header
	switch famTrans >> 4 {
	case famInet:
		if len(body) < inetLen {
			return Header{}, 0, fmt.Errorf("%w: IPv4 address block of %d bytes", ErrMalformed, len(body))
		}
		src := netip.AddrFrom4([4]byte(body[0:4]))
		dst := netip.AddrFrom4([4]byte(body[4:8]))
		h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(body[8:10]))
		h.Destination = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(body[10:12]))
	case famInet6:
		if len(body) < inet6Len {
			return Header{}, 0, fmt.Errorf("%w: IPv6 address block of %d bytes", ErrMalformed, len(body))
		}
		src := netip.AddrFrom16([16]byte(body[0:16]))
		dst := netip.AddrFrom16([16]byte(body[16:32]))
		h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(body[32:34]))
		h.Destination = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(body[34:36]))
	default:
		return Header{}, total, fmt.Errorf("%w: address family %d", ErrUnsupported, famTrans>>4)
	}
	if h.Destination.Port() == 0 {
		return Header{}, 0, fmt.Errorf("%w: destination port 0", ErrMalformed)
	}
	return h, total, nil
}

// Read reads exactly one header from r, never consuming bytes beyond it, so
// r can be handed on as the connection's stream.
func Read(r io.Reader) (Header, error) {
	var buf [fixedLen + MaxHeaderLen]byte
	if _, err := io.ReadFull(r, buf[:fixedLen]); err != nil {
		return Header{}, fmt.Errorf("proxyproto: reading header: %w", err)
	}
	if string(buf[:len(Signature)]) != Signature {
		return Header{}, ErrNotProxy
	}
	bodyLen := int(binary.BigEndian.Uint16(buf[14:16]))
	if bodyLen > MaxHeaderLen {
		return Header{}, fmt.Errorf("%w: length %d exceeds %d", ErrMalformed, bodyLen, MaxHeaderLen)
	}
	if _, err := io.ReadFull(r, buf[fixedLen:fixedLen+bodyLen]); err != nil {
		return Header{}, fmt.Errorf("%w: truncated: %w", ErrMalformed, err)
	}
	h, _, err := Parse(buf[:fixedLen+bodyLen])
	return h, err
}

// Append appends a PROXY v2 header for a TCP connection from src to dst.
// Two IPv4 addresses (or IPv4-mapped ones) are written as INET, anything else
// as INET6.
func Append(b []byte, src, dst netip.AddrPort) ([]byte, error) {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if !s.IsValid() || !d.IsValid() {
		return b, fmt.Errorf("%w: source %v and destination %v must be valid addresses", ErrUnsupported, src, dst)
	}
	if s.Is4() != d.Is4() {
		s, d = netip.AddrFrom16(s.As16()), netip.AddrFrom16(d.As16())
	}
	b = append(b, Signature...)
	b = append(b, versionTwo<<4|cmdProxy)
	if s.Is4() {
		b = append(b, famInet<<4|transTCP)
		b = binary.BigEndian.AppendUint16(b, inetLen)
		s4, d4 := s.As4(), d.As4()
		b = append(b, s4[:]...)
		b = append(b, d4[:]...)
	} else {
		b = append(b, famInet6<<4|transTCP)
		b = binary.BigEndian.AppendUint16(b, inet6Len)
		s16, d16 := s.As16(), d.As16()
		b = append(b, s16[:]...)
		b = append(b, d16[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, src.Port())
	b = binary.BigEndian.AppendUint16(b, dst.Port())
	return b, nil
}
