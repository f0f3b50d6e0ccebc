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
type connLimits struct {
	open atomic.Int64 // connections counted and not yet released

	mu    sync.Mutex
	perIP map[netip.Addr]int // guarded by mu; only with a per-address limit
}

// admit counts a new connection from ip and reports whether it is over
// either limit (max: total, perIP: per address, 0 for none). A connection
// counted is released with release, whether over or not. Safe for
// concurrent use.
func (cl *connLimits) admit(ip netip.Addr, max, perIP int) (over bool) {
	over = cl.open.Add(1) > int64(max)
	if perIP > 0 {
		cl.mu.Lock()
		if cl.perIP == nil {
			cl.perIP = make(map[netip.Addr]int)
		}
		cl.perIP[ip]++
		over = over || cl.perIP[ip] > perIP
		cl.mu.Unlock()
	}
	return over
}

// release uncounts a connection admit counted.
func (cl *connLimits) release(ip netip.Addr, perIP int) {
	cl.open.Add(-1)
	if perIP > 0 {
		cl.mu.Lock()
		if cl.perIP[ip]--; cl.perIP[ip] <= 0 {
			delete(cl.perIP, ip)
		}
		cl.mu.Unlock()
	}
}

// remoteIP is the client address of a connection (IPv4-mapped addresses as
// IPv4), or the zero Addr.
func remoteIP(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// overLimit reports whether the connection was over --max-conns or
// --max-conns-per-ip when it opened: its upgrade is answered 503.
func (w *conn) overLimit() bool { return w.over }
