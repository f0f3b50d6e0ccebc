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
// loops (Loops; its home): the loop reads its socket and hands the
// bytes to Traffic, which applies them (handle.go), and writes its Output at
// the end of every turn. Forward and Cancel of calls from sessions on that
// loop append to the output buffer on the loop; calls from other loops get
// there through the loop's task queue (forwardFrom). Every method of a
// byte-stream link therefore runs on its loop, which owns the state "guarded
// by mu" below: such a link takes no lock (lock, unlock). mu serves the NATS
// links, whose reader is nats.go's delivery goroutine, whose writer is the
// supervisor's, and whose calls come from every loop. No goroutine waits
// per call: a call in flight is one entry in calls (calltable.go).
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
	loops Loops
	// nextID is the last upstream request id of a NATS link, taken by
	// the loop of each call; lastID is a byte-stream link's, taken on its
	// loop only (newID): a call from another loop gets its id there, and
	// its ticket names it by its number in remoteID (remoteCallsLocked).
	nextID   atomic.Uint64
	lastID   uint64 // loop-owned (byte-stream)
	remoteID atomic.Uint64

	// upNow mirrors up_ for what reads it without mu: the replica choice,
	// for every call, where taking mu cost 5% of the proxy's CPU.
	upNow atomic.Bool

	// mu guards what follows on a NATS link; a byte-stream link's loop
	// owns it instead (lock).
	mu      sync.Mutex
	up_     bool          // guarded by mu: connected, accepting calls
	calls   callTable     // guarded by mu: calls in flight, live subscriptions, and timed-out calls awaiting their late answer
	out     []byte        // guarded by mu: framed output not yet written (byte-stream: by the loop)
	pubs    []natsPub     // guarded by mu: NATS messages not yet taken by the writer
	pubSize int           // guarded by mu: bytes in pubs
	enc     []byte        // guarded by mu: scratch for a message being framed
	method  string        // guarded by mu: the last method forwarded (quote)
	quoted  []byte        // guarded by mu: method as a JSON string
	wake    chan struct{} // cap 1: output or a state change for the NATS writer

	// inflight counts the calls sent, establishing or dropped
	// (callState.inFlight), for the replica choice of every loop. A
	// byte-stream link's own loop counts into pend instead and adds it
	// to inflight once per read and per turn (publish): two atomic
	// operations per call cost 5% of the proxy's CPU
	// (BenchmarkProxyPipelined); what its loop reads is exact
	// (inFlightHere), what other loops read lags by at most one turn.
	inflight atomic.Int64
	pend     int64 // loop-owned (byte-stream): not yet added to inflight
	// peak is the most output a byte-stream link has held for its
	// upstream (backlogLocked), as seen at a flush, at the owed output
	// and at the sweep: Stats.PendingPeak.
	peak atomic.Int64
	// opens counts Open calls, so that the supervisor tells a connection
	// its loop took from one it did not.
	opens atomic.Uint64

	// Reader-owned (the loop, or nats.go's delivery goroutine; see handle).
	garbage burst  // what the upstream sent that was dropped
	body    []byte // scratch: an event's members
	name    []byte // scratch: an unquoted subscription id
	// rawErr is the error of an answer finished on the loop as it is
	// read (answerErrorOf): FinishOnLoop keeps nothing of it.
	rawErr backend.RawError
	key    []byte // scratch: a plain subscription's key (plainKey)

	// The byte-stream side, loop-owned (conn.go): the loop's side of the
	// connection while connected, the reading state, and where Closed
	// tells the supervisor.
	wc  WireConn
	rd  reading
	now int64 // unix nanoseconds of the current Traffic, 0 outside it
	// tally counts the calls that end during the current Traffic, for
	// the upstream's counters at its end.
	tally tally
	gone  chan struct{} // cap 1: the loop closed the connection
	// over is set when output the upstream is owed (owedLocked) took the
	// backlog over Config.MaxPendingBytes: signal closes the connection.
	over bool
	// dirty is set once signal has told wc of output, until the loop takes
	// it (Output): the calls after the first of a turn skip the call.
	dirty bool
	// stallSince is when the backlog was last seen to shrink (or to
	// start), lastPending the backlog then; 0 while there is none
	// (stalled).
	stallSince  int64
	lastPending int

	probeState // when a tcp:// connection counts as up (probe.go)
}

// lock takes mu on a NATS link, and nothing on a byte-stream one: every
// method of a byte-stream link runs on its loop (see link), which owns its
// table and output, and an uncontended mutex still cost two atomic
// operations on every call, answer and read (BenchmarkProxyPipelined).
// The functions named ...Locked are called between lock and unlock.
func (l *link) lock() {
	if l.nats != nil {
		l.mu.Lock()
	}
}

// unlock releases what lock took. Inlined, as lock is: the Unlock is a
// call of its own.
func (l *link) unlock() {
	if l.nats != nil {
		l.unlockNATS()
	}
}

//go:noinline
func (l *link) unlockNATS() { l.mu.Unlock() }

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
		case l.over:
			l.overflow(closeOverPending)
		case len(l.out) >= writeAt:
			l.wc.Write(l.Output())
		case !l.dirty:
			l.dirty = true
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
	return l.forwardOn(c, admitted, false)
}

// forwardHere is forward for a call whose session runs on the link's own
// loop (a byte-stream link): its answer, read on that loop, finishes it
// there (backend.LoopCall), without the hand-off through the loop's queue.
func (l *link) forwardHere(c backend.Call, admitted int64) backend.Ticket {
	return l.forwardOn(c, admitted, l.nats == nil)
}

func (l *link) forwardOn(c backend.Call, admitted int64, here bool) backend.Ticket {
	id := l.newID()
	if !l.forwardID(c, id, false, admitted, here) {
		return backend.Ticket{}
	}
	return backend.NewTicket(l, id)
}

// newID takes the next upstream request id: on a byte-stream link's loop
// from a plain counter (an atomic one cost 3% of the proxy's CPU,
// BenchmarkProxyPipelined), on a NATS link from the atomic one.
func (l *link) newID() uint64 {
	if l.nats != nil {
		return l.nextID.Add(1)
	}
	l.lastID++
	return l.lastID
}

// forwardFrom forwards c, a call from a session on another loop (or on
// none), through the link's loop: the request is written there, with an
// id taken there, and a cancel follows it the same way (remote), naming
// the call by a number of its own (remoteID). Nothing of the link is
// touched here but the atomic counters.
func (l *link) forwardFrom(c backend.Call, admitted int64) backend.Ticket {
	if lc, ok := c.(backend.LentCall); ok {
		lc.Keep() // the link's loop reads the params later
	}
	rid := l.remoteID.Add(1)
	// Counted in flight from now, so that the calls picked before the loop
	// runs this one spread over the links as the others do.
	l.inflight.Add(1)
	if !l.loops.Run(l.home, func() { l.forwardRemote(c, rid, admitted) }) {
		l.up.refuse(c, l, outcomeUnavailable, backend.ErrUpstreamUnavailable)
		return backend.Ticket{}
	}
	return backend.NewTicket(remote{l}, rid)
}

// forwardRemote is forwardFrom's work on the link's loop: the call gets
// its id, and its entry is filed under its remote number for the cancel.
func (l *link) forwardRemote(c backend.Call, rid uint64, admitted int64) {
	id := l.newID()
	if !l.forwardID(c, id, true, admitted, false) {
		return
	}
	l.lock()
	if e := l.calls.get(id); e != nil {
		l.calls.fileRemote(e, rid)
	}
	l.unlock()
}

// remote is the Canceller of a call forwarded from another loop: its
// ticket's id is the call's remote number.
type remote struct{ l *link }

// Cancel implements backend.Canceller: the cancel runs on the link's loop,
// after the forward it follows (a loop runs its tasks in order).
func (r remote) Cancel(rid uint64) {
	r.l.loops.Run(r.l.home, func() { r.l.cancelRemote(rid) })
}

// cancelRemote cancels the call with remote number rid, if it still has
// an entry. Runs on the link's loop.
func (l *link) cancelRemote(rid uint64) {
	l.lock()
	e := l.calls.remote[rid]
	l.unlock()
	if e != nil {
		l.Cancel(e.id)
	}
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
// here: the call's session runs on the link's loop (forwardHere).
func (l *link) forwardID(c backend.Call, id uint64, counted bool, admitted int64, here bool) bool {
	st := c.Stream()
	if l.nats != nil && !validToken(c.Method()) {
		// No NATS subject can carry it, so no worker serves it.
		l.up.refuse(c, reserved(l, counted), notCounted, backend.ErrUnknownMethod)
		return false
	}
	l.lock()
	if !l.up_ || l.backlogLocked() > l.up.cfg.MaxPendingBytes {
		// Nothing queues (CONTRACT.md section 10): down, or not reading.
		l.unlock()
		l.up.refuse(c, reserved(l, counted), outcomeUnavailable, backend.ErrUpstreamUnavailable)
		return false
	}
	switch {
	case l.nats != nil:
		l.nats.requestLocked(l, id, c.Method(), c.Params(), st != nil)
	case l.frame == nil:
		l.out = append(codec.AppendRequestQuoted(l.out, id, l.quote(c.Method()), c.Params()), '\n')
	default:
		l.enc = codec.AppendRequestQuoted(l.enc[:0], id, l.quote(c.Method()), c.Params())
		l.out = l.frame(l.out, l.enc)
	}
	if admitted == 0 {
		admitted = time.Now().UnixNano()
	}
	e := l.calls.add(id, c, st, admitted, admitted+int64(l.up.cfg.Timeout))
	if here {
		_, e.here = c.(backend.LoopCall)
	}
	if !counted {
		l.count(1)
	}
	l.unlock()
	l.signal()
	return true
}

// count changes the calls in flight by d: on a byte-stream link, where
// its loop counts (pend, published by publish), else at once. Called on
// the link's loop (NATS: with mu held).
func (l *link) count(d int64) {
	if l.nats == nil {
		l.pend += d
		return
	}
	l.inflight.Add(d)
}

// publish adds what the loop counted in flight to inflight: at the end of
// every read (Traffic) and of every turn that wrote (Output), after a
// failure and a sweep. Runs on the link's loop.
func (l *link) publish() {
	if l.pend != 0 {
		l.inflight.Add(l.pend)
		l.pend = 0
	}
}

// inFlightHere is the calls in flight as the link's own loop sees them,
// exact. Runs on the link's loop.
func (l *link) inFlightHere() int64 { return l.inflight.Load() + l.pend }

// quote returns method as a JSON string: kept from the last call, as a
// client's calls tend to repeat the method. Called with mu held.
func (l *link) quote(method string) []byte {
	if method != l.method {
		l.quoted = codec.AppendQuote(l.quoted[:0], method)
		l.method = method
	}
	return l.quoted
}

// Cancel implements backend.Canceller. Runs on a loop. A call in flight is
// dropped: its answer is still awaited (the slot is held until the upstream
// answers or the call times out; CONTRACT.md section 10), and the cancel
// forwarded where the transport can. A live subscription ends now, and the
// upstream is told (it sends no subscription/closed after
// subscription/cancel, CONTRACT.md 2.3).
func (l *link) Cancel(id uint64) {
	var f finish
	l.lock()
	switch e := l.calls.get(id); {
	case e == nil:
	case e.state == callSent || e.state == callEstablishing:
		f = l.moveLocked(e, callDropped, byGateway, nil, nil)
	case e.state == callLive:
		to := callEnded
		if e.plain() != "" && l.calls.lingering < maxExpired {
			to = callUnsubscribing // until the upstream answers NS_unsubscribe
		}
		f = l.moveLocked(e, to, byGateway, nil, nil)
	}
	l.unlock()
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
		l.owedLocked()
	}
}

// subCancelLocked cancels the upstream's subscription of entry e:
// subscription/cancel with its id, or for a plain subscription
// NS_unsubscribe [ID], a request of its own; when the entry lingers (the
// transition leaves it in the table) it is filed under that request's id,
// so that the answer ends it instead of counting as garbage. Called with mu
// held.
func (l *link) subCancelLocked(e *entry, lingers bool) {
	if ns := e.plain(); ns != "" && l.nats == nil {
		id := l.newID()
		if lingers {
			l.calls.rekey(e, id)
		}
		if l.up_ {
			l.enc = appendUnsubscribe(l.enc[:0], id, ns, e.upSub)
			l.appendLocked(l.enc)
			l.owedLocked()
		}
		return
	}
	switch {
	case !l.up_:
	case l.nats != nil:
		if e.worker != "" {
			l.nats.subCancelLocked(l, e.worker, e.upSub)
		}
	default:
		l.appendLocked(appendSubCancel(nil, e.upSub))
		l.owedLocked()
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

// owedLocked takes note of output the link just queued that it owes the
// upstream and cannot refuse as it refuses a call (CONTRACT.md section 6,
// as for a client's answers): an answer to the upstream's request, a pong, a
// cancel. Over Config.MaxPendingBytes of backlog the upstream is not
// reading: the connection is to be closed (over; signal closes it), so
// that an upstream that sends and never reads cannot grow edge's memory.
// Called with mu held, on the link's loop.
func (l *link) owedLocked() {
	if l.nats != nil {
		return
	}
	n := l.backlogLocked()
	l.notePeak(n)
	if n > l.up.cfg.MaxPendingBytes {
		l.over = true
	}
}

// notePeak records a backlog of n bytes in peak.
func (l *link) notePeak(n int) {
	if int64(n) > l.peak.Load() {
		l.peak.Store(int64(n)) // one writer: the link's loop
	}
}

// Why a byte-stream link closed its connection itself.
const (
	closeOverPending = "pending output over --upstream-max-pending-bytes"
	closeStalled     = "pending output stalled for --upstream-write-stall-timeout"
)

// overflow closes the connection of an upstream that does not read what
// edge writes to it (why): counted (Stats.SlowClosed) and logged once; the
// calls on it end at once as when the connection is lost (fail: those in
// flight UPSTREAM_UNAVAILABLE, subscriptions UPSTREAM_LOST), and the
// supervisor reconnects with back-off once the loop has closed it. Runs on
// the link's loop.
func (l *link) overflow(why string) {
	l.lock()
	pending := l.backlogLocked()
	l.unlock()
	l.over = false
	l.stallSince, l.lastPending = 0, 0
	l.up.slowClosed.Add(1)
	l.up.log.Warn("upstream connection closed: it does not read", "upstream", l.up.name,
		"conn", l.desc, "why", why, "pendingBytes", pending)
	l.fail()
	l.wc.Close()
}

// stalledLocked reports whether the backlog has made no progress for
// Config.WriteStallTimeout at now (unix nanoseconds), as a client's
// pending output is judged (CONTRACT.md section 6). Called by the sweep
// with mu held.
func (l *link) stalledLocked(now int64) bool {
	pending := l.backlogLocked()
	l.notePeak(pending)
	switch {
	case pending == 0:
		l.stallSince, l.lastPending = 0, 0
		return false
	case l.lastPending == 0 || pending < l.lastPending:
		l.stallSince, l.lastPending = now, pending
		return false
	}
	l.lastPending = pending
	return time.Duration(now-l.stallSince) >= l.up.cfg.WriteStallTimeout
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
	l.lock()
	defer l.unlock()
	if l.up_ {
		return false
	}
	l.up_ = true
	l.upNow.Store(true)
	l.calls = newCallTable()
	l.out = l.out[:0]
	l.pubs, l.pubSize = nil, 0
	l.over = false
	l.stallSince, l.lastPending = 0, 0
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
	l.lock()
	if !l.up_ {
		l.unlock()
		return
	}
	l.up_ = false
	l.upNow.Store(false)
	fs := make([]finish, 0, l.calls.len())
	l.calls.each(func(e *entry) {
		var err error = backend.ErrUpstreamUnavailable
		if e.state == callLive {
			err = backend.ErrUpstreamLost
		}
		fs = append(fs, l.moveLocked(e, callEnded, byDown, nil, err))
	})
	l.calls = callTable{}
	l.out = l.out[:0]
	l.pubs, l.pubSize = nil, 0
	if l.nats == nil {
		l.publish()
	}
	l.unlock()
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
// within a sweep (workerGone). On a byte-stream link it first closes a
// connection whose output has stalled (stalledLocked, overflow).
func (l *link) sweep(now int64) {
	var fs []finish
	l.lock()
	if l.nats == nil && l.up_ && l.wc != nil && l.stalledLocked(now) {
		l.unlock()
		l.overflow(closeStalled)
		return
	}
	for e := l.calls.due(now); e != nil; e = l.calls.due(now) {
		if f := l.expireLocked(e, now); f.c != nil {
			fs = append(fs, f)
		}
	}
	l.calls.shrink()
	if l.nats == nil {
		l.publish()
	}
	probed := l.up_ && l.nats != nil && len(l.calls.workers) > 0
	if probed {
		for w := range l.calls.workers {
			l.nats.probeLocked(l, w)
		}
	}
	l.unlock()
	if probed || len(fs) > 0 || l.over {
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
	l.lock()
	if !l.up_ || l.backlogLocked() > l.up.cfg.MaxPendingBytes {
		l.unlock()
		return
	}
	if l.nats != nil {
		l.nats.notifyLocked(l, method, params)
	} else {
		l.enc = codec.AppendNotification(l.enc[:0], method, params)
		l.appendLocked(l.enc)
	}
	l.unlock()
	l.signal()
}
