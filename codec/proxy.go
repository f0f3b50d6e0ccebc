package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
)

// The PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2) lets a
// load balancer that terminates or forwards TCP tell the server the client's
// address: a header sent before anything else on the connection. edge reads
// it with --proxy-protocol (CONTRACT.md section 11.5).
//
// ParseProxyHeader is a pure function over the bytes received so far, so that
// an event loop can call it again as more arrive (and a TLS handshake worker
// can call it on what it read before the ClientHello). It rejects a header as
// soon as the bytes seen cannot start one, and bounds it: a version 1 header
// is at most 107 bytes, a version 2 header 16 bytes plus its length field,
// at most max.

// ErrBadProxyHeader reports a missing or malformed PROXY protocol header.
var ErrBadProxyHeader = errors.New("codec: missing or malformed PROXY protocol header")

// ProxyHeader is what a PROXY protocol header says.
type ProxyHeader struct {
	// Version is 1 (text) or 2 (binary).
	Version int
	// Local is set when the header carries no client address: a version 2
	// LOCAL command (the balancer's own health check), a version 1 UNKNOWN,
	// or a version 2 family other than TCP over IPv4 or IPv6. The
	// connection's own peer address is the client's then.
	Local bool
	// Source is the client's address and port (IPv4-mapped IPv6 as IPv4)
	// when not Local.
	Source netip.AddrPort
}

// Sizes of the PROXY protocol headers.
const (
	// MaxProxyV1 is the longest version 1 header, CRLF included.
	MaxProxyV1 = 107
	// proxyV2Fixed is the signature, version and command, family and
	// length of a version 2 header.
	proxyV2Fixed = 16
	// DefaultMaxProxyV2 bounds a version 2 header (its TLVs) when the
	// caller gives no bound.
	DefaultMaxProxyV2 = 4096
)

var (
	proxyV1Sig = []byte("PROXY ")
	proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

// ParseProxyHeader parses a PROXY protocol header at the front of b and
// returns it and its size. ErrNeedMore: b is a proper prefix of a header
// that may still be valid; ErrBadProxyHeader: b does not start with a
// valid header (or a version 2 header is longer than max bytes; max <= 0
// means DefaultMaxProxyV2). It does not allocate. Safe for concurrent use.
func ParseProxyHeader(b []byte, max int) (ProxyHeader, int, error) {
	if max <= 0 {
		max = DefaultMaxProxyV2
	}
	if len(b) == 0 {
		return ProxyHeader{}, 0, ErrNeedMore
	}
	switch b[0] {
	case 'P':
		return parseProxyV1(b)
	case '\r':
		return parseProxyV2(b, max)
	}
	return ProxyHeader{}, 0, ErrBadProxyHeader
}

// prefixOf reports whether b and sig agree on their common length: b may
// still become sig.
func prefixOf(b, sig []byte) bool {
	n := min(len(b), len(sig))
	return bytes.Equal(b[:n], sig[:n])
}

// parseProxyV1 parses "PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n" or
// "PROXY UNKNOWN...\r\n".
func parseProxyV1(b []byte) (ProxyHeader, int, error) {
	bad := func() (ProxyHeader, int, error) { return ProxyHeader{}, 0, ErrBadProxyHeader }
	if !prefixOf(b, proxyV1Sig) {
		return bad()
	}
	lim := min(len(b), MaxProxyV1)
	end := bytes.IndexByte(b[:lim], '\n')
	if end < 0 {
		if len(b) >= MaxProxyV1 {
			return bad()
		}
		// Refuse early what cannot become a header: a byte that no header
		// has (a slow client sending junk is stopped before 107 bytes).
		for _, c := range b[:lim] {
			if c != '\r' && (c < ' ' || c > '~') {
				return bad()
			}
		}
		return ProxyHeader{}, 0, ErrNeedMore
	}
	if end < len(proxyV1Sig)+1 || b[end-1] != '\r' {
		return bad()
	}
	line := b[len(proxyV1Sig) : end-1]
	n := end + 1
	proto, rest, _ := bytes.Cut(line, []byte{' '})
	switch string(proto) {
	case "UNKNOWN":
		// The rest of the line is to be ignored (the balancer could not
		// tell): the peer's address is the client's.
		for _, c := range rest {
			if c < ' ' || c > '~' {
				return bad()
			}
		}
		return ProxyHeader{Version: 1, Local: true}, n, nil
	case "TCP4", "TCP6":
	default:
		return bad()
	}
	var f [4][]byte
	for i := range f {
		var ok bool
		if i < 3 {
			f[i], rest, ok = bytes.Cut(rest, []byte{' '})
		} else {
			f[i], ok = rest, len(rest) > 0
		}
		if !ok || len(f[i]) == 0 {
			return bad()
		}
	}
	src, okS := parseV1Addr(f[0], proto[3] == '4')
	_, okD := parseV1Addr(f[1], proto[3] == '4')
	sport, okSP := parseV1Port(f[2])
	_, okDP := parseV1Port(f[3])
	if !okS || !okD || !okSP || !okDP {
		return bad()
	}
	return ProxyHeader{Version: 1, Source: netip.AddrPortFrom(src.Unmap(), sport)}, n, nil
}

// parseV1Addr parses an address of a version 1 header: dotted IPv4 for
// TCP4, IPv6 without a zone for TCP6.
func parseV1Addr(s []byte, v4 bool) (netip.Addr, bool) {
	if len(s) > 39 { // the longest IPv6 text
		return netip.Addr{}, false
	}
	var buf [39]byte
	a, err := netip.ParseAddr(string(append(buf[:0], s...)))
	if err != nil || a.Zone() != "" || a.Is4() != v4 {
		return netip.Addr{}, false
	}
	return a, true
}

// parseV1Port parses a decimal port 0-65535 without a sign or leading
// zeros.
func parseV1Port(s []byte) (uint16, bool) {
	if len(s) == 0 || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return uint16(n), n <= 65535
}

// parseProxyV2 parses the binary header: the 12-byte signature, version and
// command, family and transport, a big-endian length, then the addresses
// and TLVs (which are skipped).
func parseProxyV2(b []byte, max int) (ProxyHeader, int, error) {
	bad := func() (ProxyHeader, int, error) { return ProxyHeader{}, 0, ErrBadProxyHeader }
	if !prefixOf(b, proxyV2Sig) {
		return bad()
	}
	if len(b) > 12 {
		if b[12]>>4 != 2 || b[12]&0xf > 1 { // version 2; LOCAL or PROXY
			return bad()
		}
	}
	if len(b) < proxyV2Fixed {
		return ProxyHeader{}, 0, ErrNeedMore
	}
	length := int(binary.BigEndian.Uint16(b[14:16]))
	n := proxyV2Fixed + length
	if n > max {
		return bad()
	}
	fam := b[13]
	if fam>>4 > 3 || fam&0xf > 2 { // AF_UNSPEC..AF_UNIX; UNSPEC, STREAM, DGRAM
		return bad()
	}
	var need int
	switch fam {
	case 0x11: // TCP over IPv4
		need = 12
	case 0x21: // TCP over IPv6
		need = 36
	}
	if length < need {
		return bad()
	}
	if len(b) < n {
		return ProxyHeader{}, 0, ErrNeedMore
	}
	h := ProxyHeader{Version: 2}
	if b[12]&0xf == 0 { // LOCAL: the addresses, if any, are to be ignored
		h.Local = true
		return h, n, nil
	}
	a := b[proxyV2Fixed:n]
	switch fam {
	case 0x11:
		src := netip.AddrFrom4([4]byte(a[0:4]))
		h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(a[8:10]))
	case 0x21:
		src := netip.AddrFrom16([16]byte(a[0:16])).Unmap()
		h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(a[32:34]))
	default:
		// UNSPEC, UNIX or a datagram transport: the receiver uses the
		// connection's own address (proxy-protocol.txt section 2.2).
		h.Local = true
	}
	return h, n, nil
}
