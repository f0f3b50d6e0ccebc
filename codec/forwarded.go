package codec

import (
	"bytes"
	"net/netip"
)

// ForwardedClient finds the client's address in an X-Forwarded-For value
// (CONTRACT.md section 11.5) received from a trusted proxy: walking the
// hops from right to left, the first one that trusted does not accept is
// the client (the hops to its right were appended by trusted proxies; any
// to its left are whatever the client sent and prove nothing). An entry is
// an IP address, optionally with a port (IP:PORT, [IPv6]:PORT or [IPv6]);
// IPv4-mapped addresses come back as IPv4, the port as 0 when none was
// given. When every hop is trusted, the leftmost is the client.
//
// ok is false for an empty value and for a malformed hop reached by the
// walk ("unknown", an obfuscated identifier, garbage): the caller then uses
// the peer's own address. A trusted proxy writes well-formed hops, so a
// malformed one means the chain cannot be followed further, and the
// peer's address is the safe answer: it is the proxy's, so a per-address
// limit counts the proxy rather than an address anyone could have
// written. Safe for concurrent use.
func ForwardedClient(xff []byte, trusted func(netip.Addr) bool) (client netip.AddrPort, ok bool) {
	rest := xff
	for {
		i := bytes.LastIndexByte(rest, ',')
		hop := trimOWS(rest[i+1:])
		a, good := parseHop(hop)
		if !good {
			return netip.AddrPort{}, false
		}
		client, ok = a, true
		if i < 0 || !trusted(a.Addr()) {
			return client, ok
		}
		rest = rest[:i]
	}
}

// parseHop parses one X-Forwarded-For entry.
func parseHop(h []byte) (netip.AddrPort, bool) {
	if len(h) == 0 || len(h) > 64 {
		return netip.AddrPort{}, false
	}
	s := string(h)
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.AddrPortFrom(a.Unmap(), 0), true
	}
	if h[0] == '[' && h[len(h)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() && a.Zone() == "" {
			return netip.AddrPortFrom(a.Unmap(), 0), true
		}
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}
