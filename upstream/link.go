package upstream

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// link is one connection to an upstream (a TCP or WebSocket connection, an
// exec child's socket, or a NATS connection) and the calls in flight on it.
//
// A byte-stream link (exec, tcp, ws) lives on one of the gateway's event
// loops (backend.Loops; its home): the loop reads its socket and hands the
// bytes to Traffic, which applies them (handle.go), and writes its Output at
// the end of every turn. Forward and Cancel of calls from sessions on that
// loop append to the output buffer on the loop; calls from other loops get
// there through the loop's task queue (forwardFrom). Every method of a
// byte-stream link therefore runs on its loop; mu is never contended there
// (it serves the NATS links, whose reader is nats.go's delivery goroutine
// and whose writer is the supervisor's). No goroutine waits per call: a
// call in flight is one entry in calls (calltable.go).
type link struct {
	up   *Upstream // immutable
	desc string    // immutable: for logs, e.g. "tcp://127.0.0.1:9000#1"
	// frame appends one outbound message, framed for the transport; nil
	// for NDJSON (the message and a newline). Immutable.
	frame func(dst, msg []byte) []byte
	// cancels reports whether the transport forwards $/cancelRequest (ws).
	// Immutable.
	cancels bool
	// nats is the NATS side of a nats:// link, nil for the byte-stream
	// transports: its messages are queued in pubs instead of out.
	// Immutable.
	nats *natsLink

	// home is the event loop a byte-stream link lives on, loops its
	// Loops. Set by Upstream.StartOn before the link connects; immutable
	// after.
	home  int
	loops backend.Loops
	// nextID is the last upstream request id: taken on the loop, or by a
	// call from another loop before it is posted to this one.
	nextID atomic.Uint64

	// upNow mirrors up_ for what reads it without mu: the replica choice,
	// for every call, where taking mu cost 5% of the proxy's CPU.
	upNow atomic.Bool

	mu      sync.Mutex
	up_     bool          // guarded by mu: connected, accepting calls
	calls   callTable     // guarded by mu: calls in flight, live subscriptions, and timed-out calls awaiting their late answer
	out     []byte        // guarded by mu: framed output not yet written (byte-stream: by the loop)
	pubs    []natsPub     // guarded by mu: NATS messages not yet taken by the writer
	pubSize int           // guarded by mu: bytes in pubs
	enc     []byte        // guarded by mu: scratch for a message being framed
	wake    chan struct{} // cap 1: output or a state change for the NATS writer

	inflight atomic.Int64 // calls sent, establishing or dropped (callState.inFlight), for replica choice
	// opens counts Open calls, so that the supervisor tells a connection
	// its loop took from one it did not.
	opens atomic.Uint64

	// Reader-owned (the loop, or nats.go's delivery goroutine; see handle).
	garbage burst  // what the upstream sent that was dropped
	body    []byte // scratch: an event's members
	name    []byte // scratch: an unquoted subscription id

	// The byte-stream side, loop-owned (conn.go): the loop's side of the
	// connection while connected, the reading state, and where Closed
	// tells the supervisor.
	wc   backend.WireConn
	rd   reading
	now  int64         // unix nanoseconds of the current Traffic, 0 outside it
	gone chan struct{} // cap 1: the loop closed the connection

	probeState // when a tcp:// connection counts as up (probe.go)
}

func newLink(up *Upstream, desc string, frame func(dst, msg []byte) []byte, cancels bool) *link {
	return &link{up: up, desc: desc, frame: frame, cancels: cancels, home: -1,
		wake: make(chan struct{}, 1), gone: make(chan struct{}, 1), probeState: probeState{answered: make(chan struct{}, 1)}}
}

// writeAt is the output at which a byte-stream link writes at once rather
// than when its loop flushes (after every socket of the poller's round):
// it bounds the buffer a burst builds, which is then kept and reused
// (about 800 calls per write). Unbounded, 65,536 calls arriving together
// cost 130 more bytes of RSS each in the bench's P1 hold: a round's
// buffer past 1 MiB is not kept (Output) and is left to the GC.
const writeAt = 64 << 10

// signal has the output written: by the loop at the end of its turn
// (byte-stream links; at once past writeAt), or by the writer it wakes
// (NATS). A byte-stream link's signal runs on its loop, which owns out.
func (l *link) signal() {
	if l.nats == nil {
		switch {
		case l.wc == nil:
		case len(l.out) >= writeAt:
			l.wc.Write(l.Output())
		default:
			l.wc.Dirty()
		}
		return
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// forward implements backend.Forwarder for this one link. Runs on the
// link's loop (a NATS link: on any loop).
func (l *link) forward(c backend.Call, admitted int64) backend.Ticket {
	id := l.nextID.Add(1)
	if !l.forwardID(c, id, false, admitted) {
		return backend.Ticket{}
	}
	return backend.NewTicket(l, id)
}

// forwardFrom forwards c, a call from a session on another loop (or on
// none), through the link's loop: the request is written there, and a
// cancel follows it the same way (remote). Nothing of the link is touched
// here but its id counter.
func (l *link) forwardFrom(c backend.Call, admitted int64) backend.Ticket {
	id := l.nextID.Add(1)
	// Counted in flight from now, so that the calls picked before the loop
	// runs this one spread over the links as the others do.
	l.inflight.Add(1)
	if !l.loops.Run(l.home, func() { l.forwardID(c, id, true, admitted) }) {
		l.inflight.Add(-1)
		l.up.counters.ended(outcomeUnavailable, 0, 0) // a failure path
		c.Finish(nil, backend.ErrUpstreamUnavailable)
		return backend.Ticket{}
	}
	return backend.NewTicket(remote{l}, id)
}

// remote is the Canceller of a call forwarded from another loop.
type remote struct{ l *link }

// Cancel implements backend.Canceller: the cancel runs on the link's loop,
// after the forward it follows (a loop runs its tasks in order).
func (r remote) Cancel(id uint64) {
	r.l.loops.Run(r.l.home, func() { r.l.Cancel(id) })
}

// forwardID writes call id, admitted at admitted, and reports whether the
// link took it; if not, c is finished UPSTREAM_UNAVAILABLE. The call's
// timeout and duration count from its admission, the clock the loop read
// for that turn (backend.Origin), or from now when it has none: reading the
// clock for every forwarded call cost 8% of the proxy's CPU in the bench's
// pipelined P1. counted: forwardFrom has counted the
// call in flight already (taken back if the link does not take it), so that
// the count never passes through a value that would skew a concurrent
// replica choice.
func (l *link) forwardID(c backend.Call, id uint64, counted bool, admitted int64) bool {
	st := c.Stream()
	if l.nats != nil && !validToken(c.Method()) {
		// No NATS subject can carry it, so no worker serves it.
		if counted {
			l.inflight.Add(-1)
		}
		c.Finish(nil, backend.ErrUnknownMethod)
		return false
	}
	l.mu.Lock()
	if !l.up_ || l.backlogLocked() > l.up.cfg.MaxPendingBytes {
		// Nothing queues (CONTRACT.md section 10): down, or not reading.
		l.mu.Unlock()
		if counted {
			l.inflight.Add(-1)
		}
		l.up.counters.ended(outcomeUnavailable, 0, 0) // a failure path
		c.Finish(nil, backend.ErrUpstreamUnavailable)
		return false
	}
	switch {
	case l.nats != nil:
		l.nats.requestLocked(l, id, c.Method(), c.Params(), st != nil)
	case l.frame == nil:
		l.out = append(codec.AppendRequest(l.out, id, c.Method(), c.Params()), '\n')
	default:
		l.enc = codec.AppendRequest(l.enc[:0], id, c.Method(), c.Params())
		l.out = l.frame(l.out, l.enc)
	}
	if admitted == 0 {
		admitted = time.Now().UnixNano()
	}
	l.calls.add(id, c, st, admitted, admitted+int64(l.up.cfg.Timeout))
	if !counted {
		l.inflight.Add(1)
	}
	l.mu.Unlock()
	l.signal()
	return true
}

// Cancel implements backend.Canceller. Runs on a loop. A call in flight is
// dropped: its answer is still awaited (the slot is held until the upstream
// answers or the call times out; CONTRACT.md section 10), and the cancel
// forwarded where the transport can. A live subscription ends now, and the
// upstream is told (it sends no subscription/closed after
// subscription/cancel, CONTRACT.md 2.3).
func (l *link) Cancel(id uint64) {
	var f finish
	l.mu.Lock()
	switch e := l.calls.get(id); {
	case e == nil:
	case e.state == callSent || e.state == callEstablishing:
		f = l.moveLocked(e, callDropped, byGateway, nil, nil)
	case e.state == callLive:
		f = l.moveLocked(e, callEnded, byGateway, nil, nil)
	}
	l.mu.Unlock()
	l.signal()
	f.do()
}

// cancelLocked forwards the cancel of call e, in flight, where the
// transport can: $/cancelRequest to a ws upstream for a unary call; to a
// NATS worker once it has said it took the call, unary or subscription.
// Called with mu held.
func (l *link) cancelLocked(e *entry) {
	switch {
	case !l.up_:
	case l.nats != nil:
		if e.worker != "" {
			l.nats.cancelLocked(l, e.id, e.worker)
		}
	case l.cancels && e.stream == nil:
		l.appendLocked(appendCancelRequest(nil, e.id))
	}
}

// subCancelLocked forwards subscription/cancel of the upstream's
// subscription upSub, established by call e. Called with mu held.
func (l *link) subCancelLocked(e *entry, upSub string) {
	switch {
	case !l.up_:
	case l.nats != nil:
		if e.worker != "" {
			l.nats.subCancelLocked(l, e.worker, upSub)
		}
	default:
		l.appendLocked(appendSubCancel(nil, upSub))
	}
}

// backlogLocked is the output not yet written, in bytes: the link's, and
// for a byte-stream link what its loop holds that the socket did not take.
// Called with mu held.
func (l *link) backlogLocked() int {
	n := len(l.out) + l.pubSize
	if l.wc != nil {
		n += l.wc.Buffered()
	}
	return n
}

// appendLocked frames msg onto the output. Called with mu held.
func (l *link) appendLocked(msg []byte) {
	if l.frame != nil {
		l.out = l.frame(l.out, msg)
		return
	}
	l.out = append(append(l.out, msg...), '\n')
}

func appendCancelRequest(dst []byte, id uint64) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":`...)
	dst = codec.AppendUint(dst, id)
	return append(dst, "}}"...)
}

func appendSubCancel(dst []byte, upSub string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":`...)
	dst = codec.AppendQuote(dst, upSub)
	return append(dst, "}}"...)
}

// open marks the link connected with a fresh table and reports whether it
// was down: an up link keeps its table (NATS: the connect callback and the
// supervisor may both see the connection up). Called by the supervisor once
// the transport is up.
func (l *link) open() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up_ {
		return false
	}
	l.up_ = true
	l.upNow.Store(true)
	l.calls = newCallTable()
	l.out = l.out[:0]
	l.pubs, l.pubSize = nil, 0
	return true
}

// isUp reports whether the link takes calls (forwardID checks again under
// mu).
func (l *link) isUp() bool { return l.upNow.Load() }

// fail marks the link down and settles everything on it (CONTRACT.md
// section 10): calls in flight get UPSTREAM_UNAVAILABLE, live subscriptions
// end UPSTREAM_LOST, lingering entries are forgotten (ids go on after a
// reconnect: none of their answers can come back). Safe to call more than
// once.
func (l *link) fail() {
	l.mu.Lock()
	if !l.up_ {
		l.mu.Unlock()
		return
	}
	l.up_ = false
	l.upNow.Store(false)
	fs := make([]finish, 0, l.calls.len())
	for _, e := range l.calls.ids {
		var err error = backend.ErrUpstreamUnavailable
		if e.state == callLive {
			err = backend.ErrUpstreamLost
		}
		fs = append(fs, l.moveLocked(e, callEnded, byDown, nil, err))
	}
	l.calls = callTable{}
	l.out = l.out[:0]
	l.pubs, l.pubSize = nil, 0
	l.mu.Unlock()
	for _, f := range fs {
		f.do()
	}
}

// maxExpired bounds the entries of a link that timed out and wait for
// their late answer (expired, orphaned): an upstream that lets more calls
// than that time out in one timeout period has the late answers of the
// rest counted as dropped messages (and a subscription among them is not
// cancelled when it is established late).
const maxExpired = 1 << 16

// sweep times out the calls whose deadline has passed (expireLocked) and
// forgets the lingering entries whose second timeout passed: it looks at
// those entries only, in deadline order. On a NATS link it also probes
// every worker that holds calls, so that a worker that died is noticed
// within a sweep (workerGone).
func (l *link) sweep(now int64) {
	var fs []finish
	l.mu.Lock()
	for e := l.calls.due(now); e != nil; e = l.calls.due(now) {
		if f := l.expireLocked(e, now); f.c != nil {
			fs = append(fs, f)
		}
	}
	probed := l.up_ && l.nats != nil && len(l.calls.workers) > 0
	if probed {
		for w := range l.calls.workers {
			l.nats.probeLocked(l, w)
		}
	}
	l.mu.Unlock()
	if probed || len(fs) > 0 {
		l.signal()
	}
	for _, f := range fs {
		f.do()
	}
}

// notifyFrom writes a notification through the link's loop, for a session
// on another loop: params is copied, as it is valid only during the call.
func (l *link) notifyFrom(method string, params []byte) {
	params = append([]byte(nil), params...)
	l.loops.Run(l.home, func() { l.notify(method, params) })
}

// notify writes a notification. Runs on the link's loop (NATS: any loop).
func (l *link) notify(method string, params []byte) {
	if l.nats != nil && !validToken(method) {
		return
	}
	l.mu.Lock()
	if !l.up_ || l.backlogLocked() > l.up.cfg.MaxPendingBytes {
		l.mu.Unlock()
		return
	}
	if l.nats != nil {
		l.nats.notifyLocked(l, method, params)
	} else {
		l.enc = codec.AppendNotification(l.enc[:0], method, params)
		l.appendLocked(l.enc)
	}
	l.mu.Unlock()
	l.signal()
}
