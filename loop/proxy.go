package loop

import (
	"errors"
	"net/netip"

	"github.com/openengine/edge/codec"
)

// The client's address (CONTRACT.md section 11.5). With --proxy-protocol the
// WebSocket listener is behind a load balancer that sends a PROXY protocol
// header (v1 or v2) before anything else: the connection starts in
// stateHandshake with proxyPending set, and proxyHeader parses the header
// from the bytes received so far on every turn until it is complete (bytes
// may arrive split; gnet keeps the unconsumed ones). A missing or malformed
// header, or one over its bound (107 bytes for v1, --max-header-bytes for
// v2), closes the connection without an answer (it may not be HTTP) and
// counts rejected{reason="proxy_header"}; one that is slow is bounded by
// --handshake-timeout like the upgrade. The header is trusted as sent, so
// only from the balancer: a connection whose TCP peer is outside every
// --proxy-protocol-from CIDR is closed by the acceptor as soon as it is
// accepted (peerAllowed), before a byte is read, a TLS handshake is started
// or a descriptor is registered on a loop, and counts
// rejected{reason="proxy_untrusted"}.
//
// With --trusted-proxy, a peer (or a PROXY header's source) in one of the
// CIDRs is a proxy that forwards HTTP: its upgrade request's
// X-Forwarded-For names the client (codec.ForwardedClient). The per-address
// count then waits for the upgrade, where the header is; the total is
// counted when the connection opens, as always.
// On a wss:// listener the header comes before the ClientHello: the loop
// reads it the same way before handing the handshake to a worker
// (conn.tlsHello).

// proxyHeader reads the PROXY header at the front of buf and returns the
// bytes it used: 0 while it is incomplete.
func (w *conn) proxyHeader(buf []byte) int {
	h, n, err := codec.ParseProxyHeader(buf, w.cfg().MaxHeaderBytes)
	switch {
	case errors.Is(err, codec.ErrNeedMore):
		return 0
	case err != nil:
		w.reject(rejectProxyHeader)
		return len(buf)
	}
	w.proxyPending = false
	client := w.remote
	if !h.Local { // LOCAL (the balancer's own check): the peer is the client
		client = h.Source
	}
	w.proxied(client)
	return n
}

// proxied takes client, from a PROXY header, as the connection's address:
// counted now, or at the upgrade when it is itself a trusted proxy.
func (w *conn) proxied(client netip.AddrPort) {
	if w.cfg().trustedProxy(client.Addr()) {
		w.remote, w.viaProxy = client, true
	} else {
		w.countIP(client)
	}
}

// forwarded takes the client's address from the X-Forwarded-For of an
// upgrade request from a trusted proxy and counts it. Without the header,
// or with a malformed hop, the client is the proxy itself (see
// codec.ForwardedClient).
func (w *conn) forwarded(r *codec.Request) {
	w.viaProxy = false
	client := w.remote
	if a, ok := codec.ForwardedClient(r.ForwardedFor, w.cfg().trustedProxy); ok {
		client = a
	}
	w.countIP(client)
}

// peerAllowed reports whether a connection of listener p from peer may be
// served: with --proxy-protocol, the WebSocket listener serves the
// --proxy-protocol-from peers only. Safe for concurrent use (the acceptors).
func (c *Config) peerAllowed(p proto, peer netip.AddrPort) bool {
	return p != protoWebSocket || !c.ProxyProtocol || contains(c.ProxyProtocolFrom, peer.Addr())
}
