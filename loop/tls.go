package loop

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// wss:// (CONTRACT.md section 11.6) with Go's crypto/tls, unmodified.
//
// A TLS handshake blocks on the network and costs a signature, so it does
// not run on an event loop. The acceptor enrolls an accepted socket on an
// event loop at once, without waiting for the loop (accept.go), (the
// context value a *tlsState without a tls.Conn),
// where it waits for its first bytes holding nothing but its descriptor: a
// socket that sends nothing is closed at Config.HandshakeSilentTimeout after
// the accept, so idle sockets cannot hold the handshake workers (issue 24).
// With --proxy-protocol the loop reads the PROXY header first, as on a plain
// connection. The first bytes after it hand the handshake to the bounded
// pool of workers (Config.HandshakePool, handshakers.hello): the loop takes
// the socket's read interest off its epoll set (pause.go), and the worker
// gets a duplicate of the socket and the bytes the loop read. A handshake
// that finds every worker busy waits in a FIFO queue of at most
// Config.HandshakeQueue; beyond it the socket is closed at once
// (handshake_pool_full). The duplicate's deadline is the accept time plus
// Config.HandshakeTimeout, queue time included, so a client that stalls (a
// partial ClientHello) gives the worker back at that deadline. The worker
// runs tls.Server(...).Handshake over a tlsSock that reads and writes the
// duplicate, closes the duplicate, switches the tlsSock to loop mode and
// posts the result to the loop (conn.handshaken), which reads the socket
// again, or closes it when the handshake failed.
//
// From then on the loop owns the tls.Conn: OnTraffic
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

// DefaultHandshakePool is the default of Config.HandshakePool: 4 workers
// per processor, at least 16. A handshake mostly waits for the network (two
// round trips), so more workers than processors keep the processors busy;
// the signature work itself cannot use more than GOMAXPROCS. A client holds
// a worker only once it has sent bytes, at most HandshakeTimeout.
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
	tc       *tls.Conn // nil until the handshake is done
	sock     *tlsSock  // nil until the handshake is handed to a worker
	accepted time.Time // when the socket was accepted: the upgrade deadline counts from it
	// away is set while a handshake worker has the handshake (queued or
	// running): the loop does not read the socket meanwhile.
	away bool
	// in is the plaintext decrypted and not yet used by the WebSocket
	// code (a partial frame or upgrade request); nil when empty.
	in []byte
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
	t := w.x.tls
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
	t := w.x.tls
	if t.tc == nil {
		return // before the handshake there is nothing to say
	}
	if len(p) > 0 {
		// Fails only after close_notify was sent: the connection is
		// closing and p is dropped, as after a close frame.
		_, _ = t.tc.Write(p)
	}
	if len(t.sock.out) > 0 {
		_, _ = w.c.Write(t.sock.out) // gnet copies what the socket does not take
		t.sock.out = t.sock.out[:0]
		if cap(t.sock.out) > maxKeptCipher {
			// A large answer's buffer is not kept for the connection's
			// life: a wss connection that once answered 1 MB held
			// 1.1 MiB.
			t.sock.out = nil
		}
	}
}

// maxKeptCipher is the largest ciphertext buffer a wss connection keeps
// between turns: two full TLS records.
const maxKeptCipher = 2 * (plainChunk + 512)

// closeNotify sends a TLS close_notify alert before the server closes or
// half-closes the TCP connection. Runs on the loop.
func (w *conn) closeNotify() {
	if t := w.tlsLayer(); t != nil && t.tc != nil {
		_ = t.tc.CloseWrite()
		w.writeTLS(nil)
	}
}

// release drops the tlsSock's buffers when the connection closes.
func (t *tlsState) release(l *eventLoop) {
	if t.in != nil {
		l.putBuf(t.in)
		t.in = nil
	}
	if t.sock != nil {
		t.sock.out = nil
	}
}

// tlsHello handles the input of a wss:// connection before its TLS
// handshake: the PROXY header with --proxy-protocol, then the first bytes of
// the ClientHello, which hand the handshake to the pool (handshakers.hello).
// Runs on the loop.
func (w *conn) tlsHello(buf []byte) {
	if w.x.tls.away || w.state != stateHandshake {
		// The loop does not read the socket while a worker has it; bytes
		// that came all the same would be missing from the handshake.
		if w.state == stateHandshake {
			w.reject(rejectTLSHandshake)
		}
		if len(buf) > 0 {
			_, _ = w.c.Discard(len(buf))
		}
		return
	}
	off := 0
	if w.proxyPending {
		off = w.proxyHeader(buf)
		if w.proxyPending || w.state != stateHandshake {
			if off > 0 { // gnet's Discard(0) discards everything
				_, _ = w.c.Discard(off)
			}
			return
		}
	}
	if off < len(buf) {
		w.deadline = at(w.x.tls.accepted.Add(w.cfg().HandshakeTimeout))
		w.l.srv.hs.hello(w, buf[off:])
	}
	if len(buf) > 0 {
		_, _ = w.c.Discard(len(buf))
	}
}

// handshakers is the pool of TLS handshake workers of a Server: at most
// workers handshakes at once, each worker a goroutine that takes the queued
// handshakes in turn and ends when the queue is empty; at most maxQueue
// handshakes wait for a worker.
type handshakers struct {
	srv      *Server     // immutable
	cfg      *tls.Config // immutable
	workers  int         // immutable
	maxQueue int         // immutable

	mu      sync.Mutex
	busy    int                       // guarded by mu: workers running
	queue   []*hsJob                  // guarded by mu: handshakes waiting for a worker, oldest first
	live    map[*net.TCPConn]struct{} // guarded by mu: handshakes in progress
	aborted bool                      // guarded by mu: accepting has stopped
}

// hsJob is one handshake handed to the pool: the connection it belongs to
// (touched only on its loop, through eventLoop.el.Execute) and a duplicate
// of its socket, which the worker reads and writes and then closes.
type hsJob struct {
	w  *conn        // loop-owned
	nc *net.TCPConn // the worker's duplicate of the socket; its deadline is the handshake's
	st *tlsState    // the worker's until it posts the result, then the loop's
}

func newHandshakers(s *Server, cfg *tls.Config, workers, queue int) *handshakers {
	return &handshakers{srv: s, cfg: cfg, workers: workers, maxQueue: queue, live: make(map[*net.TCPConn]struct{})}
}

// hello hands w's TLS handshake to the pool once the first bytes after any
// PROXY header (buf) have arrived: until then the connection waits on the
// loop and holds no worker. It reads w's socket no more (its read interest
// is off) and gives a worker a duplicate of the socket and buf; the worker
// posts the result back (handshaken). Over the queue's bound the socket is
// closed at once (handshake_pool_full). Runs on the loop.
func (h *handshakers) hello(w *conn, buf []byte) {
	l := w.l
	if l.epfd < 0 {
		// Without the loop's epoll set the loop would keep reading the
		// socket beside the worker (pause.go).
		w.reject(rejectTLSHandshake)
		w.cfg().Logger.Warn("cannot hand a TLS handshake to a worker on this gnet build")
		return
	}
	if len(buf) > maxHelloBytes {
		w.reject(rejectTLSHandshake)
		return
	}
	nc, err := dupTCP(w.c.Fd())
	if err != nil {
		w.reject(rejectTLSHandshake)
		w.cfg().Logger.Warn("cannot hand a TLS handshake to a worker", "err", err)
		return
	}
	t := w.x.tls
	_ = nc.SetDeadline(t.accepted.Add(w.cfg().HandshakeTimeout))
	_ = setInterest(l.epfd, w.c.Fd(), false, false)
	t.away = true
	t.sock = &tlsSock{nc: nc, laddr: nc.LocalAddr(), raddr: nc.RemoteAddr(), pre: append([]byte(nil), buf...)}
	if !h.submit(&hsJob{w: w, nc: nc, st: t}) {
		_ = nc.Close()
		t.away, t.sock = false, nil
		_ = w.c.SetLinger(0)
		w.reject(rejectHandshakePoolFull)
	}
}

// maxHelloBytes bounds the bytes a client may send before its handshake
// starts: a ClientHello is at most 64 KiB (a handshake message's bound in
// crypto/tls) in records of 16 KiB plus their headers.
const maxHelloBytes = 80 << 10

// dupTCP is dupConn for a handshake worker: a *net.TCPConn on a duplicate
// of the socket fd; closing it leaves fd open.
func dupTCP(fd int) (*net.TCPConn, error) {
	c, err := dupConn(fd)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_ = c.Close()
		return nil, errors.New("not a TCP socket")
	}
	return tc, nil
}

// submit starts j on an idle worker, or queues it, and reports false when
// the queue is full or accepting has stopped. Safe for concurrent use: the
// loops call it. A worker's Add to s.accepting happens under mu before
// abort, which runs before stopAccepting waits.
func (h *handshakers) submit(j *hsJob) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.aborted:
		return false
	case h.busy < h.workers:
		h.busy++
		h.srv.accepting.Add(1)
		go h.run(j)
	case len(h.queue) < h.maxQueue:
		h.queue = append(h.queue, j)
	default:
		return false
	}
	return true
}

// next returns the oldest queued handshake, or nil, having released the
// worker, when there is none.
func (h *handshakers) next() *hsJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		h.busy--
		return nil
	}
	j := h.queue[0]
	h.queue[0] = nil
	h.queue = h.queue[1:]
	if len(h.queue) == 0 {
		h.queue = nil // let the backing array go after a storm
	}
	return j
}

// queued reports the handshakes running and waiting for a worker. Safe for
// concurrent use.
func (h *handshakers) queued() (running, waiting int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.busy, len(h.queue)
}

// abort ends the handshakes in progress, whose sockets' deadlines pass now,
// fails the queued ones, and keeps new ones from starting. Called when
// accepting stops.
func (h *handshakers) abort() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.aborted = true
	for c := range h.live {
		_ = c.SetDeadline(time.Unix(1, 0))
	}
	for _, j := range h.queue {
		_ = j.nc.Close()
		j.post(nil, net.ErrClosed)
	}
	h.queue = nil
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

// run is a worker: it runs j's handshake and then the queued ones.
func (h *handshakers) run(j *hsJob) {
	defer h.srv.accepting.Done()
	for ; j != nil; j = h.next() {
		h.handshake(j)
	}
}

// handshake runs j's TLS handshake on the duplicate socket, closes the
// duplicate and posts the result to j's loop.
func (h *handshakers) handshake(j *hsJob) {
	if !h.track(j.nc) {
		_ = j.nc.Close()
		j.post(nil, net.ErrClosed)
		return
	}
	tc := tls.Server(j.st.sock, h.cfg)
	err := tc.Handshake()
	h.untrack(j.nc)
	_ = j.nc.Close()
	j.st.sock.nc = nil // loop mode: the tls.Conn no longer touches the socket
	j.post(tc, err)
}

// post hands the handshake's result to j's loop. When the loops have
// stopped the connection is gone and so is the result.
func (j *hsJob) post(tc *tls.Conn, err error) {
	w := j.w
	_ = w.l.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		w.handshaken(tc, err)
		return nil
	}))
}

// handshaken takes the result of the connection's TLS handshake from its
// worker: on success the loop reads the socket again and the connection
// goes on to its upgrade; otherwise it is closed and counted. Runs on the
// loop.
func (w *conn) handshaken(tc *tls.Conn, err error) {
	t := w.x.tls
	t.away = false
	if w.state != stateHandshake {
		return // closed meanwhile: the peer left, or shutdown
	}
	s := w.l.srv
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			w.reject(rejectHandshakeTimeout)
		} else {
			w.reject(rejectTLSHandshake)
			s.cfg.Logger.Debug("TLS handshake failed", "remote", w.remote.String(), "err", err)
		}
		w.l.flush()
		return
	}
	t.tc = tc
	s.accepted[protoWebSocket-1].Add(1)
	_ = setInterest(w.l.epfd, w.c.Fd(), true, w.c.OutboundBuffered() > 0)
	now := time.Now()
	w.l.clock(now)
	// The client's upgrade request may have come with its Finished
	// flight: the tls.Conn holds it already and no more traffic may come
	// until it is answered.
	s.input(w, nil, now)
}
