package loop

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/openengine/edge/codec"
)

// wss:// (CONTRACT.md section 11.6) with Go's crypto/tls, unmodified.
//
// A TLS handshake blocks on the network and costs a signature, so it does
// not run on an event loop: the acceptor hands the accepted socket to a
// bounded pool of handshake workers (Config.HandshakePool). The hand-off is
// a send on an unbuffered channel that succeeds only if a worker is idle;
// otherwise the socket is closed at once (handshake_pool_full): a handshake
// waits in no queue. The worker sets the socket's deadline to the accept
// time plus Config.HandshakeTimeout, so a client that stalls (a partial
// ClientHello) gives the worker back at that deadline, and runs
// tls.Server(...).Handshake over a tlsSock that reads and writes the socket.
//
// Then the worker switches the tlsSock to loop mode and enrolls the socket
// on an event loop like any other, with the *tls.Conn in the context value.
// gnet dups the descriptor and closes the net.Conn; in loop mode the tlsSock
// never touches it again. From then on the loop owns the tls.Conn: OnTraffic
// points the tlsSock at the ciphertext gnet read, calls tls.Conn.Read until
// the tlsSock runs dry, and hands the plaintext to the same WebSocket code
// as a plain connection; a flush passes the turn's output through
// tls.Conn.Write, which the tlsSock turns into ciphertext for gnet's Write.
// No goroutine per connection.
//
// This relies on two properties of crypto/tls (Go 1.26, conn.go):
// readRecordOrCCS keeps a partial record in its rawInput and does not make
// the connection fail when the underlying Read returns a net.Error whose
// Temporary() is true (errWouldBlock), so the next Read resumes where it
// stopped; and Write hands each record to the underlying Write once, which
// in loop mode only appends. Both are the behaviour crypto/tls documents for
// temporary errors and deadlines, not internals we patch.
//
// Memory: a tls.Conn keeps its record buffers (rawInput, outBuf) between
// calls, up to the largest record it saw each way (16 KiB plus overhead);
// connections that only exchange small messages keep small ones.
//
// PROXY protocol (--proxy-protocol, CONTRACT.md section 11.5): the header
// comes before the ClientHello, so the handshake worker reads it
// (handshakers.proxyHeader) and passes the client's address to the loop in
// the tlsState; the loop reads no PROXY header on a TLS connection.

// DefaultHandshakePool is the default of Config.HandshakePool: 4 workers
// per processor, at least 16. A handshake mostly waits for the network (two
// round trips), so more workers than processors keep the processors busy;
// the signature work itself cannot use more than GOMAXPROCS. The pool also
// bounds how many clients can hold a worker by stalling (at most
// HandshakeTimeout each).
func DefaultHandshakePool() int { return max(16, 4*runtime.GOMAXPROCS(0)) }

// errWouldBlock is what a tlsSock in loop mode returns when it has no more
// ciphertext: crypto/tls keeps the partial record and the connection usable.
var errWouldBlock net.Error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "tls: no more input this turn" }
func (wouldBlock) Timeout() bool   { return false }
func (wouldBlock) Temporary() bool { return true }

// tlsSock is the net.Conn under a tls.Conn. During the handshake (nc set) it
// is the socket; in loop mode (nc nil) Read takes from src, the ciphertext
// of the current turn, and Write appends to out, which the loop writes.
// After the hand-off it is loop-owned.
type tlsSock struct {
	nc    *net.TCPConn // the socket during the handshake; nil in loop mode
	laddr net.Addr     // immutable
	raddr net.Addr     // immutable
	pre   []byte       // handshake: bytes read with the PROXY header, read before the socket
	src   []byte       // loop mode: ciphertext not yet read
	out   []byte       // loop mode: ciphertext not yet written
}

func (s *tlsSock) Read(p []byte) (int, error) {
	if s.nc != nil {
		if len(s.pre) > 0 {
			n := copy(p, s.pre)
			s.pre = s.pre[n:]
			return n, nil
		}
		return s.nc.Read(p)
	}
	if len(s.src) == 0 {
		return 0, errWouldBlock
	}
	n := copy(p, s.src)
	s.src = s.src[n:]
	return n, nil
}

func (s *tlsSock) Write(p []byte) (int, error) {
	if s.nc != nil {
		return s.nc.Write(p)
	}
	s.out = append(s.out, p...)
	return len(p), nil
}

// Close closes the socket during the handshake; in loop mode the loop
// closes the connection itself.
func (s *tlsSock) Close() error {
	if s.nc != nil {
		return s.nc.Close()
	}
	return nil
}

func (s *tlsSock) LocalAddr() net.Addr  { return s.laddr }
func (s *tlsSock) RemoteAddr() net.Addr { return s.raddr }

func (s *tlsSock) SetDeadline(t time.Time) error {
	if s.nc != nil {
		return s.nc.SetDeadline(t)
	}
	return nil
}

func (s *tlsSock) SetReadDeadline(t time.Time) error {
	if s.nc != nil {
		return s.nc.SetReadDeadline(t)
	}
	return nil
}

func (s *tlsSock) SetWriteDeadline(t time.Time) error {
	if s.nc != nil {
		return s.nc.SetWriteDeadline(t)
	}
	return nil
}

// tlsState is a connection's TLS layer once its handshake is done: the
// enrollment's context value, then conn.tls. Loop-owned after the hand-off.
type tlsState struct {
	tc       *tls.Conn
	sock     *tlsSock
	accepted time.Time // when the socket was accepted: the upgrade deadline counts from it
	// in is the plaintext decrypted and not yet used by the WebSocket
	// code (a partial frame or upgrade request); nil when empty.
	in []byte
	// proxied is set when the handshake worker read a PROXY header
	// (--proxy-protocol); client is its client's address then.
	proxied bool
	client  netip.AddrPort
	// eof is set once tls.Conn.Read failed for good (close_notify, a bad
	// record, an alert): the connection is being closed.
	eof bool
}

// tlsInput reads plaintext into a spare buffer of the loop and grows it
// only when less than minPlainRead bytes are free (tls.Conn.Read returns
// what fits and keeps the rest of a record), by at least plainChunk, a
// full record's worth: small messages then take no allocation per read.
const (
	minPlainRead = 256
	plainChunk   = 16 << 10
)

// tlsInput decrypts the ciphertext in buf (all of it is consumed: a partial
// record stays in the tls.Conn) and hands the plaintext to the WebSocket
// code, keeping what it does not use yet. Reports false when the TLS
// session failed or the peer sent close_notify: the caller closes the
// connection. Runs on the loop.
func (w *conn) tlsInput(buf []byte, now time.Time) bool {
	t := w.tls
	t.sock.src = buf
	in := t.in
	for !t.eof {
		if in == nil {
			in = w.l.getBuf()
		}
		if cap(in)-len(in) < minPlainRead {
			grown := make([]byte, len(in), max(2*cap(in), len(in)+plainChunk))
			copy(grown, in)
			w.l.putBuf(in)
			in = grown
		}
		n, err := t.tc.Read(in[len(in):cap(in)])
		in = in[:len(in)+n]
		if err != nil {
			if !errors.Is(err, errWouldBlock) {
				t.eof = true
			}
			break
		}
	}
	t.sock.src = nil
	if len(t.sock.out) > 0 { // an alert, a KeyUpdate answer
		w.l.markDirty(w)
	}
	if len(in) > 0 {
		used := w.traffic(in, now)
		in = in[:copy(in, in[used:])]
	}
	if len(in) == 0 && in != nil {
		w.l.putBuf(in)
		in = nil
	}
	t.in = in
	return !t.eof
}

// writeTLS encrypts p and writes the ciphertext, with whatever the
// tls.Conn produced meanwhile (an alert, a KeyUpdate answer). Runs on the
// loop.
func (w *conn) writeTLS(p []byte) {
	t := w.tls
	if len(p) > 0 {
		// Fails only after close_notify was sent: the connection is
		// closing and p is dropped, as after a close frame.
		_, _ = t.tc.Write(p)
	}
	if len(t.sock.out) > 0 {
		_, _ = w.c.Write(t.sock.out) // gnet copies what the socket does not take
		t.sock.out = t.sock.out[:0]
	}
}

// closeNotify sends a TLS close_notify alert before the server closes or
// half-closes the TCP connection. Runs on the loop.
func (w *conn) closeNotify() {
	if w.tls != nil {
		_ = w.tls.tc.CloseWrite()
		w.writeTLS(nil)
	}
}

// release drops the tlsSock's buffers when the connection closes.
func (t *tlsState) release(l *eventLoop) {
	if t.in != nil {
		l.putBuf(t.in)
		t.in = nil
	}
	t.sock.out = nil
}

// handshakers is the pool of TLS handshake workers of a Server: at most
// cap(slots) handshakes at once, each on a goroutine that ends with it.
type handshakers struct {
	srv   *Server     // immutable
	cfg   *tls.Config // immutable
	slots chan struct{}

	mu      sync.Mutex
	live    map[*net.TCPConn]struct{} // guarded by mu: handshakes in progress
	aborted bool                      // guarded by mu: accepting has stopped
}

func newHandshakers(s *Server, cfg *tls.Config, n int) *handshakers {
	return &handshakers{srv: s, cfg: cfg, slots: make(chan struct{}, n), live: make(map[*net.TCPConn]struct{})}
}

// offer starts the handshake of c if a worker slot is free, and closes c
// otherwise: it waits in no queue. Called by the acceptor, whose goroutine
// counts in s.accepting, so the worker's Add is never late for the Wait of
// stopAccepting (no handshake enrolls a connection once the loops stop).
func (h *handshakers) offer(c *net.TCPConn) {
	select {
	case h.slots <- struct{}{}:
		h.srv.accepting.Add(1)
		go h.serve(c)
	default:
		_ = c.SetLinger(0)
		_ = c.Close()
		h.srv.offLoop[rejectHandshakePoolFull].Add(1)
	}
}

// abort ends the handshakes in progress, whose sockets' deadlines pass now,
// and keeps new ones from starting. Called when accepting stops.
func (h *handshakers) abort() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.aborted = true
	for c := range h.live {
		_ = c.SetDeadline(time.Unix(1, 0))
	}
}

// track records c as in progress; false once aborted.
func (h *handshakers) track(c *net.TCPConn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.aborted {
		return false
	}
	h.live[c] = struct{}{}
	return true
}

func (h *handshakers) untrack(c *net.TCPConn) {
	h.mu.Lock()
	delete(h.live, c)
	h.mu.Unlock()
}

// serve runs the handshake of c and enrolls it on an event loop.
func (h *handshakers) serve(c *net.TCPConn) {
	s := h.srv
	defer s.accepting.Done()
	defer func() { <-h.slots }()
	if !h.track(c) {
		_ = c.Close()
		return
	}
	defer h.untrack(c)
	accepted := time.Now()
	_ = c.SetDeadline(accepted.Add(s.cfg.HandshakeTimeout))
	sock := &tlsSock{nc: c, laddr: c.LocalAddr(), raddr: c.RemoteAddr()}
	st := &tlsState{sock: sock, accepted: accepted}
	if s.cfg.ProxyProtocol {
		// The PROXY header (CONTRACT.md section 11.5) precedes the
		// ClientHello: read under the same deadline; what follows it
		// goes to the handshake.
		if !h.proxyHeader(c, st) {
			return
		}
	}
	tc := tls.Server(sock, h.cfg)
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			s.offLoop[rejectHandshakeTimeout].Add(1)
		} else {
			s.offLoop[rejectTLSHandshake].Add(1)
			s.cfg.Logger.Debug("TLS handshake failed", "remote", sock.raddr.String(), "err", err)
		}
		return
	}
	_ = c.SetDeadline(time.Time{})
	sock.nc = nil // loop mode: the tls.Conn no longer touches c
	st.tc = tc
	if _, err := s.cli.EnrollContext(c, st); err != nil {
		// EnrollContext has closed c (out of descriptors for the dup, or
		// the loops are stopping).
		s.offLoop[rejectTLSHandshake].Add(1)
		s.cfg.Logger.Warn("cannot hand a TLS connection to an event loop", "err", err)
		return
	}
	s.accepted[protoWebSocket-1].Add(1)
}

// proxyHeader reads the PROXY header (--proxy-protocol) from c, before the
// ClientHello, and records the client's address in st; the bytes read past
// the header go to the handshake. Reports false, having closed c and
// counted the refusal, when there is no valid header before the deadline.
func (h *handshakers) proxyHeader(c *net.TCPConn, st *tlsState) bool {
	s := h.srv
	max := s.cfg.MaxHeaderBytes
	buf := make([]byte, 0, 256)
	for {
		hd, n, err := codec.ParseProxyHeader(buf, max)
		if err == nil {
			st.sock.pre = buf[n:]
			st.proxied, st.client = true, remoteAddr(c.RemoteAddr())
			if !hd.Local {
				st.client = hd.Source
			}
			return true
		}
		if !errors.Is(err, codec.ErrNeedMore) {
			break
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, rerr := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if rerr != nil && m == 0 {
			_ = c.Close()
			var ne net.Error
			if errors.As(rerr, &ne) && ne.Timeout() {
				s.offLoop[rejectHandshakeTimeout].Add(1)
			} else {
				s.offLoop[rejectHandshakeAborted].Add(1)
			}
			return false
		}
	}
	_ = c.Close()
	s.offLoop[rejectProxyHeader].Add(1)
	return false
}
