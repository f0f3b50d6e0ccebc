package loop

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// connLimits counts the open connections, in total and per client address,
// for --max-conns and --max-conns-per-ip (CONTRACT.md section 11.1). It is
// updated when a connection opens and when it closes, never per message, so
// the mutex of the per-address counts is off the hot path.
//
// The total is counted when a connection opens. The per-address count
// needs the client's address (section 11.5): the peer's, counted when the
// connection opens too; the one a PROXY protocol header gives, counted once
// the header is read; or, from a --trusted-proxy peer, the one of
// X-Forwarded-For, counted at the upgrade. A connection releases exactly
// what it counted (conn.closed).
type connLimits struct {
	open atomic.Int64 // connections counted and not yet released

	mu    sync.Mutex
	perIP map[netip.Addr]int // guarded by mu; only with a per-address limit
}

// admit counts a new connection and reports whether it is over max. It is
// released with release, whether over or not. Safe for concurrent use.
func (cl *connLimits) admit(max int) (over bool) {
	return cl.open.Add(1) > int64(max)
}

// release uncounts a connection admit counted.
func (cl *connLimits) release() { cl.open.Add(-1) }

// admitIP counts a connection from ip and reports whether it is over
// perIP (> 0). It is released with releaseIP. Safe for concurrent use.
func (cl *connLimits) admitIP(ip netip.Addr, perIP int) (over bool) {
	cl.mu.Lock()
	if cl.perIP == nil {
		cl.perIP = make(map[netip.Addr]int)
	}
	cl.perIP[ip]++
	over = cl.perIP[ip] > perIP
	cl.mu.Unlock()
	return over
}

// releaseIP uncounts a connection admitIP counted.
func (cl *connLimits) releaseIP(ip netip.Addr) {
	cl.mu.Lock()
	if cl.perIP[ip]--; cl.perIP[ip] <= 0 {
		delete(cl.perIP, ip)
	}
	cl.mu.Unlock()
}

// remoteAddr is the address of a connection's peer (IPv4-mapped addresses
// as IPv4), or the zero AddrPort.
func remoteAddr(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// countIP sets the connection's client address and counts it against
// --max-conns-per-ip, once: a connection over the limit is answered 503 by
// its upgrade (an NDJSON one is closed).
func (w *conn) countIP(client netip.AddrPort) {
	if w.ipCounted {
		return // remote is what was counted, for releaseLimits
	}
	w.remote = client
	if per := w.cfg().MaxConnsPerIP; per > 0 {
		w.ipCounted = true
		if w.l.srv.limits.admitIP(client.Addr(), per) {
			w.over = true
		}
	}
}

// releaseLimits uncounts what the connection counted. Runs once, from
// closed.
func (w *conn) releaseLimits() {
	w.l.srv.limits.release()
	if w.ipCounted {
		w.ipCounted = false
		w.l.srv.limits.releaseIP(w.remote.Addr())
	}
}

// overLimit reports whether the connection is over --max-conns or
// --max-conns-per-ip: its upgrade is answered 503.
func (w *conn) overLimit() bool { return w.over }

// trustedProxy reports whether a is a --trusted-proxy address.
func (c *Config) trustedProxy(a netip.Addr) bool { return contains(c.TrustedProxies, a) }

// contains reports whether a is in one of ps.
func contains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
