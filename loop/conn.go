package loop

import (
	"github.com/openengine/edge/auth"
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/rpc"
)

// connState is the lifecycle of a connection. Legal transitions:
//
//	handshake -> open     valid upgrade answered with 101 (WebSocket only)
//	handshake -> closing  bad request answered with an HTTP error, timeout, or shutdown
//	open      -> closing  the server closes (close frame sent: protocol error, slow consumer,
//	                      idle, shutdown), or it answered the peer's close frame
//	closing   -> closed   the TCP connection is gone (flushed and closed, peer left, or
//	                      CloseTimeout passed)
//	any       -> closed   OnClose: the peer or the kernel ended the TCP connection
//
// closed is final. Every change goes through conn.setState, which checks it.
type connState uint8

const (
	stateHandshake connState = iota
	stateOpen
	stateClosing
	stateClosed
)

func (s connState) String() string {
	switch s {
	case stateHandshake:
		return "handshake"
	case stateOpen:
		return "open"
	case stateClosing:
		return "closing"
	case stateClosed:
		return "closed"
	}
	return "connState(" + strconv.Itoa(int(s)) + ")"
}

// canGo reports whether the table above allows from -> to.
func (from connState) canGo(to connState) bool {
	switch to {
	case stateOpen:
		return from == stateHandshake
	case stateClosing:
		return from == stateHandshake || from == stateOpen
	case stateClosed:
		return from != stateClosed
	}
	return false
}

// trimAfter is how long a connection must have been quiet before the sweep
// asks its session to release the memory it keeps for the next burst
// (rpc.Session.Trim). Sweeps run about once a second, so this is approximate.
const trimAfter = 2 * time.Second

// proto is the binding a connection speaks.
type proto uint8

const (
	protoWebSocket proto = iota + 1 // RFC 6455 frames after an HTTP upgrade
	protoNDJSON                     // newline-delimited JSON (CONTRACT.md section 1.2)
)

// conn is one client connection of either binding. loop-owned: only its event
// loop touches it, so it has no lock.
//
// Every idle connection holds one, so its size counts (issue 21): it is 224
// bytes (TestConnSize). The fields are ordered by size, times are instants
// (8 bytes, not a time.Time's 24), what only some connections use is in
// connExtra, made when first needed, and the rpc.Session is made with the
// first message (unstarted). A new field that not every idle connection
// needs belongs in connExtra.
type conn struct {
	c    gnet.Conn  // immutable
	l    *eventLoop // immutable
	sess session    // nil until the connection is open; unstarted until its first message
	x    *connExtra // nil until a field of it is needed (more)
	out  []byte     // output produced this turn, written by flush

	// remote is the client's address (CONTRACT.md section 11.5): the
	// peer's, or what a PROXY protocol header or a trusted proxy's
	// X-Forwarded-For says. edge/whoami reports it. Once ipCounted, it
	// is the address counted against --max-conns-per-ip and does not
	// change (countIP).
	remote netip.AddrPort

	rd codec.Reader // WebSocket frame decoder

	lastRead instant // last time bytes arrived
	// deadline is the handshake or closing deadline; while open with a
	// ping outstanding (pinged), when its pong is due.
	deadline instant

	index int32 // position in l.conns, -1 when not registered
	// code is the close code the connection ends with: the server's, or
	// the peer's that it answered; 0 while none was sent (stats.go).
	code  ws.StatusCode
	proto proto     // immutable
	state connState // changed only by setState
	// parked is what the connection counts in Server.parked: its
	// reassembly buffer's bytes at the end of its last turn (parked.go).
	parked int32

	ipCounted bool
	// proxyPending: --proxy-protocol, and the PROXY header has not arrived
	// yet; the first part of stateHandshake (proxy.go).
	proxyPending bool
	// viaProxy: the peer is a --trusted-proxy, so the client's address
	// comes from X-Forwarded-For at the upgrade.
	viaProxy bool
	// gated: the connection has per-message checks (pass): an expiring
	// identity or a rate limit. Set when it opens.
	gated bool
	over  bool // over a connection limit: set when it opens or its client address is counted
	// dirty is set while the connection is in l.dirty.
	dirty bool
	// hangup asks flush to close the TCP connection once the output is written.
	hangup bool
	// shutWrite asks flush to half-close the TCP connection (FIN after our
	// close frame) once gnet has written everything.
	shutWrite bool
	pinged    bool // a server ping is outstanding since lastRead; its pong is due at deadline
	// paused is set while the connection is over its soft outbound cap: its
	// input is not consumed and its socket not read (CONTRACT.md section 6).
	paused    bool
	subsEnded bool // after eof: the session's subscriptions were ended
}

// connExtra is the part of a conn that only some connections use: a
// token's identity, TLS, NDJSON, a rate limit, a half-close, a write that
// stalls. It is made by conn.more when one of them first needs it and
// kept until the connection is gone; an idle plain WebSocket connection
// has none. loop-owned, like its conn.
type connExtra struct {
	// who is the identity its token gave, when the listener authenticates;
	// expires is its end in unix nanoseconds, 0 for none. Set by the
	// upgrade.
	who     *auth.Identity
	expires int64
	// tls is the connection's TLS layer on a wss:// listener, nil on a
	// plain one (tls.go). Set when it opens.
	tls *tlsState
	// eof is set once the peer of an NDJSON connection half-closed: gnet's
	// connection is gone and the output goes here (halfclose.go).
	eof *tailWriter
	// stallSince is when pending output was last seen to make progress,
	// lastPending the pending output at the last sweep; 0 when nothing
	// was pending (stalled).
	stallSince  instant
	lastPending int
	lr          codec.LineReader // NDJSON line splitter (Max set by open)
	rate        rateBucket       // --rate-limit's bucket, used when it is on
}

// more returns the connection's connExtra, making it on first use.
func (w *conn) more() *connExtra {
	if w.x == nil {
		w.x = new(connExtra)
	}
	return w.x
}

// tlsLayer is the connection's TLS layer, nil on a plain listener.
func (w *conn) tlsLayer() *tlsState {
	if w.x == nil {
		return nil
	}
	return w.x.tls
}

// tail is the writer of a half-closed NDJSON connection, nil before its
// peer half-closed (halfclose.go).
func (w *conn) tail() *tailWriter {
	if w.x == nil {
		return nil
	}
	return w.x.eof
}

// instant is a point in time as nanoseconds since epoch, on the monotonic
// clock where the time.Time it was made from has a reading: 8 bytes where
// a time.Time takes 24. Only differences and comparisons of instants
// mean something.
type instant int64

// epoch is the origin of instants. Immutable.
var epoch = time.Now()

// at is t as an instant.
func at(t time.Time) instant { return instant(t.Sub(epoch)) }

// setState moves w to state s. A transition the table of connState does not
// allow is a bug in the loop (output sent after the close frame, a session
// used after it closed): it panics rather than go on. Runs on the loop.
func (w *conn) setState(s connState) {
	if !w.state.canGo(s) {
		panic("loop: connection: illegal transition " + w.state.String() + " -> " + s.String())
	}
	w.state = s
}

func (w *conn) cfg() *Config { return &w.l.srv.cfg }

// open starts the session once the connection speaks JSON-RPC.
func (w *conn) open() {
	w.gated = w.x != nil && w.x.expires != 0 || w.cfg().RateLimit > 0
	if w.proto == protoNDJSON {
		w.more().lr.Max = w.cfg().MaxMessageBytes
	} else {
		w.rd.MaxMessage = int64(w.cfg().MaxMessageBytes)
		w.rd.DeferUTF8 = true // both sessions check it (see session.HandleUnchecked)
	}
	if w.cfg().Echo {
		w.sess = echo{w}
	} else {
		w.sess = unstarted{w}
	}
	w.setState(stateOpen)
}

// start makes the connection's rpc.Session, for its first message.
func (w *conn) start() *rpc.Session {
	t := rpc.WebSocket
	if w.proto == protoNDJSON {
		t = rpc.NDJSON
	}
	s := w.l.srv.rpc.NewSession(t, w, w.l)
	w.sess = s
	return s
}

// session is what a connection drives: an rpc.Session, or the raw echo of
// Config.Echo. Its methods are called on the connection's loop.
type session interface {
	HandleMessage(msg []byte)
	HandleUnchecked(msg []byte) bool
	HandleParseError()
	HandleRateLimited(msg []byte)
	Resume()
	GoAway()
	EndSubscriptions()
	Busy() bool
	Stats() rpc.Stats
	Trim()
	Close()
}

var _ session = (*rpc.Session)(nil)

// unstarted is the session of an open connection before its first message:
// the rpc.Session (and its id table) is made then (conn.start), so an idle
// connection holds none. Until then there is nothing to resume, settle or
// count.
type unstarted struct{ w *conn }

func (u unstarted) HandleMessage(msg []byte)        { u.w.start().HandleMessage(msg) }
func (u unstarted) HandleUnchecked(msg []byte) bool { return u.w.start().HandleUnchecked(msg) }
func (u unstarted) HandleParseError()               { u.w.start().HandleParseError() }
func (u unstarted) HandleRateLimited(msg []byte)    { u.w.start().HandleRateLimited(msg) }
func (unstarted) Resume()                           {}
func (unstarted) GoAway()                           {}
func (unstarted) EndSubscriptions()                 {}
func (unstarted) Busy() bool                        { return false }
func (unstarted) Stats() rpc.Stats                  { return rpc.Stats{} }
func (unstarted) Trim()                             {}
func (unstarted) Close()                            {}

// echo sends every message back unchanged: the framing stack without
// JSON-RPC, as the ceiling of our own throughput and for conformance tests.
type echo struct{ w *conn }

func (e echo) HandleMessage(msg []byte) { e.w.Send(msg) }

// HandleUnchecked validates UTF-8 itself: echo parses nothing.
func (e echo) HandleUnchecked(msg []byte) bool {
	if !utf8.Valid(msg) {
		return false
	}
	e.w.Send(msg)
	return true
}
func (e echo) HandleParseError()        {}
func (e echo) HandleRateLimited([]byte) {}
func (e echo) Resume()                  {}
func (e echo) GoAway()                  {}
func (e echo) EndSubscriptions()        {}
func (e echo) Busy() bool               { return false }
func (e echo) Stats() rpc.Stats         { return rpc.Stats{} }
func (e echo) Trim()                    {}
func (e echo) Close()                   {}

// Send implements rpc.Sink: it frames msg for this turn's write (one text
// frame, or one line). Output is dropped once the server has decided to close.
func (w *conn) Send(msg []byte) {
	if !w.takes(len(msg)) {
		return
	}
	if w.proto == protoWebSocket {
		w.appendFrame(ws.OpText, msg)
		return
	}
	w.out = append(append(w.output(), msg...), '\n')
	w.l.markDirty(w)
}

// takes reports whether the connection takes a message of n bytes now: it
// is open and the message, framed, keeps it within its hard cap. The cap is
// checked before buffering (CONTRACT.md section 6): a turn that answers
// many large requests must not grow the buffer past it first. Over it, the
// connection closes SLOW_CONSUMER. Runs on the loop.
func (w *conn) takes(n int) bool {
	if w.state != stateOpen {
		return false
	}
	if w.OutboundBytes()+n+codec.MaxHeaderSize > w.cfg().OutboundHardBytes {
		w.slowConsumer()
		return false
	}
	return true
}

// output returns the connection's output buffer for this turn, taking one
// from the loop's spares on first use.
func (w *conn) output() []byte {
	if w.out == nil {
		w.out = w.l.getBuf()
	}
	return w.out
}

// Writable implements rpc.Sink: below the soft outbound cap.
func (w *conn) Writable() bool {
	return w.state == stateOpen && w.OutboundBytes() < w.cfg().OutboundSoftBytes
}

// OutboundLimit implements rpc.Sink: the hard cap.
func (w *conn) OutboundLimit() int { return w.cfg().OutboundHardBytes }

// OutboundBytes implements rpc.Sink.
func (w *conn) OutboundBytes() int {
	if w.state == stateClosed {
		return len(w.out)
	}
	return len(w.out) + w.pendingOut()
}

// pendingOut is the output written and not yet taken by the kernel.
func (w *conn) pendingOut() int {
	if t := w.tail(); t != nil {
		return int(t.pending.Load())
	}
	return w.c.OutboundBuffered()
}

// appendFrame queues a control or data frame (WebSocket only).
func (w *conn) appendFrame(op ws.OpCode, payload []byte) {
	w.out = codec.AppendFrame(w.output(), op, payload)
	w.l.markDirty(w)
}

// flush writes this turn's output with one write. Runs on the loop.
func (w *conn) flush() {
	w.dirty = false
	if w.state == stateClosed {
		w.releaseOut()
		return
	}
	if w.tail() != nil {
		w.flushTail()
		return
	}
	if w.tlsLayer() != nil {
		w.writeTLS(w.out)
	} else if len(w.out) > 0 {
		_, _ = w.c.Write(w.out)
	}
	w.releaseOut()
	if w.hangup {
		w.hangup = false
		w.closeNotify()
		_ = w.c.Close()
		return
	}
	if w.shutWrite && w.c.OutboundBuffered() == 0 {
		w.shutWrite = false
		w.closeNotify()
		_ = unix.Shutdown(w.c.Fd(), unix.SHUT_WR)
	}
	if w.state == stateOpen {
		w.checkOutbound()
		// Events held back because this turn's output reached the soft cap
		// may go as soon as the kernel took it: without this, a subscription
		// whose producer has finished would wait for a pause that never came.
		if !w.paused && w.Writable() {
			w.sess.Resume()
		}
	}
}

func (w *conn) releaseOut() {
	if w.out != nil {
		w.l.putBuf(w.out)
		w.out = nil
	}
}

// checkOutbound enforces the outbound caps after a write (CONTRACT.md section
// 6): over the hard cap the connection is closed with 1008, over the soft cap
// it is paused.
func (w *conn) checkOutbound() {
	cfg := w.cfg()
	pending := w.pendingOut()
	switch {
	case pending > cfg.OutboundHardBytes:
		w.slowConsumer()
	case pending >= cfg.OutboundSoftBytes:
		w.pause()
	}
}

// traffic handles every complete unit in the buffered input and returns how
// many bytes it used. Runs on the loop.
func (w *conn) traffic(buf []byte, now time.Time) int {
	w.lastRead = at(now)
	w.l.readAt = now.UnixNano()
	w.pinged = false
	if w.proto == protoNDJSON {
		return w.lines(buf)
	}
	return w.frames(buf)
}

// input handles buf, the input gnet holds: plaintext, or on a TLS
// connection ciphertext, which is all used (a partial record stays in the
// tls.Conn). Runs on the loop.
func (w *conn) input(buf []byte, now time.Time) {
	t := w.tlsLayer()
	if t == nil {
		if n := w.traffic(buf, now); n > 0 {
			_, _ = w.c.Discard(n)
		}
		return
	}
	if t.tc == nil {
		w.tlsHello(buf)
		return
	}
	ok := w.tlsInput(buf, now)
	_, _ = w.c.Discard(len(buf))
	if !ok && w.state != stateClosed {
		// The TLS session ended (close_notify, a bad record): there is no
		// way to send a close frame; the alert, if any, goes out first.
		w.hangup = true
		w.l.markDirty(w)
	}
}

// slowConsumer closes with 1008 (causeSlowConsumer).
func (w *conn) slowConsumer() {
	if w.state == stateOpen {
		w.l.counts.slow++
	}
	w.closeFor(causeSlowConsumer)
	if t := w.tail(); t != nil {
		t.abort()
	}
}

// closeCause is why the server decides to close a connection. closeCauses
// gives each one's close code and reason (CONTRACT.md section 1.1) and what
// happens around the close frame. The input the codec rejects closes with the
// codec's own code and reason (codec.CloseError: 1002, 1003, 1007, 1009, see
// fail); a peer's close is answered with its code.
type closeCause uint8

const (
	causeSlowConsumer    closeCause = iota // output over the hard cap, or a write stalled (section 6)
	causeIdle                              // no answer to the server's ping (section 1.1)
	causeGoingAway                         // graceful shutdown (section 9)
	causeIdentityExpired                   // the token's identity expired (section 11.3)
	causeRateLimited                       // persistently over --rate-limit (section 11.4)
	causeParked                            // its message in progress over --max-parked-bytes of all connections'
)

var closeCauses = [...]struct {
	code   ws.StatusCode
	reason string
	// keep sends the output queued this turn before the close frame;
	// otherwise it is discarded.
	keep bool
	// hangup drops the TCP connection after the close frame instead of
	// waiting up to CloseTimeout for the peer's close.
	hangup bool
}{
	// A peer that does not read will not read our close frame either.
	causeSlowConsumer: {code: ws.StatusPolicyViolation, reason: "slow consumer", hangup: true},
	causeIdle:         {code: ws.StatusGoingAway, reason: "idle timeout", hangup: true},
	// Shutdown's answers and subscription/closed notifications go first.
	causeGoingAway: {code: ws.StatusGoingAway, reason: "going away", keep: true},
	// The frame that found it expired reaches no backend; nothing queued
	// for the connection goes out after its identity ended.
	causeIdentityExpired: {code: 4401, reason: "connection identity expired"},
	// The refusals already queued go out first.
	causeRateLimited: {code: ws.StatusPolicyViolation, reason: "rate limit exceeded", keep: true},
	// RFC 6455 section 7.4.1 (IANA registry): 1013, the server is short of
	// a resource; the client may send its message again later.
	causeParked: {code: 1013, reason: "too many large messages in progress", keep: true},
}

func (c closeCause) String() string { return closeCauses[c].reason }

// closeFor starts a server-initiated close for cause.
func (w *conn) closeFor(cause closeCause) {
	c := &closeCauses[cause]
	w.closeAfter(c.code, c.reason, c.keep)
	if c.hangup {
		w.hangup = true
	}
}

// closeAfter starts a server-initiated close: the session ends, and on
// WebSocket the close frame is sent and the connection waits up to
// CloseTimeout for the peer's close. NDJSON has no close message: the
// connection is closed once flushed. Output queued this turn goes out before
// the close frame with keep, and is discarded without it. Its callers are
// closeFor and fail.
func (w *conn) closeAfter(code ws.StatusCode, reason string, keep bool) {
	if w.state != stateOpen {
		return
	}
	w.code = code
	w.out = w.output()
	if !keep {
		w.out = w.out[:0]
	}
	if w.proto == protoWebSocket {
		w.out = codec.AppendClose(w.out, code, reason)
	} else {
		w.hangup = true
	}
	w.l.markDirty(w)
	w.sess.Close()
	w.setState(stateClosing)
	w.deadline = at(time.Now().Add(w.cfg().CloseTimeout))
}

// pause stops consuming input and reading the socket until the outbound
// backlog drops below the soft cap.
func (w *conn) pause() {
	if w.paused || w.state != stateOpen || w.tail() != nil {
		return
	}
	w.paused = true
	w.l.pause(w)
}

// unpause resumes reading once the connection is writable again, consumes the
// input held back meanwhile, and lets held subscription events flow.
func (w *conn) unpause(now time.Time) {
	if !w.paused {
		return
	}
	w.paused = false
	w.l.unpause(w)
	if w.state != stateOpen {
		return
	}
	if buf, _ := w.c.Peek(-1); len(buf) > 0 || w.tlsLayer() != nil {
		w.input(buf, now)
	}
	if w.state == stateOpen && !w.paused {
		w.sess.Resume()
	}
}

// goAway closes the connection for graceful shutdown (CONTRACT.md section 9):
// requests still running are answered SERVER_SHUTTING_DOWN, subscriptions end
// with "done", then 1001.
func (w *conn) goAway() {
	switch w.state {
	case stateHandshake:
		w.l.counts.rejected[rejectDraining]++
		w.setState(stateClosing)
		w.hangup = true
		w.l.markDirty(w)
	case stateOpen:
		w.sess.GoAway()
		w.closeFor(causeGoingAway)
	}
}

// tick enforces the connection's timeouts (CONTRACT.md sections 1.1 and 6).
// Runs on the loop.
func (w *conn) tick(now time.Time) {
	cfg := w.cfg()
	switch w.state {
	case stateHandshake:
		if t := w.tlsLayer(); t != nil && t.away {
			return // the handshake worker's deadline (tls.go)
		}
		if at(now) > w.deadline {
			w.l.counts.rejected[rejectHandshakeTimeout]++
			w.setState(stateClosing)
			w.hangup = true
			w.l.markDirty(w)
		}
	case stateOpen:
		if w.stalled(now) {
			w.slowConsumer()
			return
		}
		silent := time.Duration(at(now) - w.lastRead)
		if silent >= trimAfter {
			w.sess.Trim()
		}
		if w.proto != protoWebSocket {
			return
		}
		if w.identityExpired(now.UnixNano()) {
			// An idle connection whose identity ended (CONTRACT.md 11.3).
			w.closeFor(causeIdentityExpired)
			return
		}
		// Closed only PongTimeout after a ping: a sweep that comes late
		// (a busy loop) pings first.
		switch {
		case w.pinged && at(now) >= w.deadline:
			w.closeFor(causeIdle)
		case silent >= cfg.PingInterval && !w.pinged:
			w.pinged, w.deadline = true, at(now.Add(cfg.PongTimeout))
			w.appendFrame(ws.OpPing, nil)
		}
	case stateClosing:
		if at(now) > w.deadline {
			w.hangup = true
		}
		if w.hangup || w.shutWrite {
			w.l.markDirty(w)
		}
	}
}

// stalled reports whether pending output has made no progress for
// WriteStallTimeout (CONTRACT.md section 6).
func (w *conn) stalled(now time.Time) bool {
	pending := w.pendingOut()
	x := w.x
	switch {
	case pending == 0:
		if x != nil {
			x.stallSince, x.lastPending = 0, 0
		}
		return false
	case x == nil || x.lastPending == 0 || pending < x.lastPending:
		x = w.more()
		x.stallSince, x.lastPending = at(now), pending
		return false
	}
	x.lastPending = pending
	return time.Duration(at(now)-x.stallSince) >= w.cfg().WriteStallTimeout
}

// closed runs from OnClose: the session ends and every resource is released.
func (w *conn) closed() {
	w.countClose()
	w.releaseLimits()
	if w.sess != nil {
		w.sess.Close()
	}
	w.setState(stateClosed)
	if w.paused {
		w.paused = false
		w.l.unpause(w)
	}
	w.rd.Reset()
	w.unpark()
	w.l.remove(w)
	w.releaseOut()
	if x := w.x; x != nil {
		x.lr.Reset()
		if x.tls != nil {
			x.tls.release(w.l)
		}
		if x.eof != nil {
			w.l.removeTail(w)
		}
	}
}
