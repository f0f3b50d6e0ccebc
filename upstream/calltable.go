package upstream

import (
	"strconv"

	"github.com/openengine/edge/backend"
)

// This file is the pending-call table of a link (every link transport:
// exec, tcp, ws and nats): one entry per forwarded call from the request to
// its end, with a typed state. Every change of state goes through
// link.moveLocked, which applies the side effects the transition calls for
// (the transport's cancel or subscription/cancel, the in-flight count, the
// request metric, the call's one Finish, removal from the table), so that no
// path can forget one of them or finish a call twice.
//
// A plain JSON-RPC subscription (backend.Stream.Namespace NS, CONTRACT.md
// section 10) lives in the same table: its request is NS_subscribe with the
// client's params, its establishing answer's result is the upstream's id (a
// scalar), its events are NS_subscription notifications, and where an OECP
// subscription is sent subscription/cancel it is sent NS_unsubscribe [ID],
// a request of its own whose answer ends the entry (plainKey, plain.go).

// callState is the lifecycle of an entry. Legal transitions:
//
//	sent         -> dropped     the gateway cancelled the unary call (Cancel): its
//	                            answer is still awaited, and not wanted; ws: $/cancelRequest
//	establishing -> dropped     the same for a subscription request
//	establishing -> live        the upstream established the subscription (counted ok)
//	sent, establishing, dropped
//	             -> expired     --upstream-timeout passed: the call is finished
//	                            UPSTREAM_TIMEOUT (and the cancel sent, if not yet); the
//	                            entry waits one more timeout for the late answer
//	dropped, expired
//	             -> orphaned    the answer to a subscription request nobody wants
//	                            came: subscription/cancel is sent with the upstream's
//	                            id (plain: NS_unsubscribe, and the entry is filed under
//	                            that request's id); its events are dropped and counted
//	                            until the upstream closes it (plain: answers the
//	                            NS_unsubscribe) or one more timeout passes
//	live         -> unsubscribing  the gateway ended a plain subscription: NS_unsubscribe
//	                            is sent and the entry filed under its id; its events are
//	                            ignored until the upstream answers it or one more
//	                            timeout passes
//	any          -> ended       removed from the table: answered, refused, failed,
//	                            closed by the upstream, cancelled while live
//	                            (subscription/cancel; plain: NS_unsubscribe with no room
//	                            left to wait for its answer), or forgotten
//
// ended is final. The call is finished exactly once, on the transition from
// a state that holds it (sent, establishing, dropped, live) to one that does
// not (expired, orphaned, unsubscribing, ended). The entries in flight, counted in
// link.inflight for the replica choice, are those sent, establishing or
// dropped.
type callState uint8

const (
	callSent callState = iota + 1
	callEstablishing
	callDropped
	callLive
	callExpired
	callOrphaned
	callUnsubscribing
	callEnded
)

func (s callState) String() string {
	switch s {
	case callSent:
		return "sent"
	case callEstablishing:
		return "establishing"
	case callDropped:
		return "dropped"
	case callLive:
		return "live"
	case callExpired:
		return "expired"
	case callOrphaned:
		return "orphaned"
	case callUnsubscribing:
		return "unsubscribing"
	case callEnded:
		return "ended"
	}
	return "callState(" + strconv.Itoa(int(s)) + ")"
}

// canGo reports whether the table of callState allows from -> to.
func (from callState) canGo(to callState) bool {
	switch to {
	case callDropped:
		return from == callSent || from == callEstablishing
	case callLive:
		return from == callEstablishing
	case callExpired:
		return from == callSent || from == callEstablishing || from == callDropped
	case callOrphaned:
		return from == callDropped || from == callExpired
	case callUnsubscribing:
		return from == callLive
	case callEnded:
		return from >= callSent && from < callEnded
	}
	return false
}

// lingers reports whether an entry in state s waits for the upstream
// after its call was finished (counted in callTable.lingering).
func (s callState) lingers() bool {
	return s == callExpired || s == callOrphaned || s == callUnsubscribing
}

// holdsCall reports whether the call is not finished yet in state s.
func (s callState) holdsCall() bool { return s >= callSent && s <= callLive }

// inFlight reports whether an entry in state s counts in link.inflight.
func (s callState) inFlight() bool { return s >= callSent && s <= callDropped }

// cause is why an entry changes state: it decides the outcome counted and
// whether the upstream is told.
type cause uint8

const (
	byAnswer   cause = iota // the upstream answered (a result, or err)
	byGateway               // the gateway cancelled it (Cancel)
	byTimeout               // --upstream-timeout passed
	byUpstream              // the upstream ended it: subscription/closed, no responders, its worker gone
	byDown                  // the link failed or closed
	byForget                // a lingering entry's second timeout passed
)

// entry is one call of a link's table. Guarded by link.mu.
type entry struct {
	id    uint64
	state callState
	// here: the call's session runs on the link's loop, so that its
	// answer finishes it at once (finish.here).
	here   bool
	c      backend.Call   // nil once finished
	stream backend.Stream // non-nil for a subscription
	sent   int64          // unix nanoseconds: when the gateway admitted it (the metric's start)
	// deadline is when the entry times out (unix nanoseconds); 0 for a
	// live subscription, which has none. The entries with a deadline are
	// linked in deadline order (prev, next).
	deadline   int64
	prev, next *entry
	// upSub is the upstream's subscription id once it sent one: a
	// string's unquoted value, or for a plain subscription its key
	// (plainKey: the raw JSON id, a NUL and the namespace).
	upSub  string
	worker string // NATS: the worker that took the call, once it said so
	// rid is the remote number of a call from another loop (0: none),
	// under which callTable.remote files it.
	rid uint64
}

// callTable holds a link's entries: by upstream id, by upstream
// subscription id (byte-stream links; NATS finds a subscription by its
// stream subject), and in deadline order, so that a sweep looks at the
// entries due and no others. Guarded by link.mu.
//
// By id, the entries are in a ring indexed by the id's low bits: a link
// numbers its calls one after the other (nextID), so the calls in flight
// together fill consecutive slots, and finding one is an index and a
// compare where a map cost a hash and a probe (BenchmarkCallTable). An
// entry that outlives the ring's window (a live subscription, a call
// lingering after its timeout) is moved to the overflow map when a newer
// id needs its slot; the ring doubles instead while it is at least half
// full, up to maxRing, and the sweep halves it while it is mostly empty.
type callTable struct {
	ring []*entry          // by id & (len(ring)-1); len a power of two, or 0
	over map[uint64]*entry // the entries a newer id displaced from the ring; lazily made
	n    int               // entries, ring and overflow
	subs map[string]*entry // live and orphaned subscriptions by the upstream's id (byte-stream)
	// head and tail are the entries with a deadline, earliest first.
	head, tail *entry
	// workers counts the entries each NATS worker holds (sweep probes
	// them).
	workers map[string]int
	// lingering is the entries expired, orphaned or unsubscribing
	// (callState.lingers): at most maxExpired.
	lingering int
	// remote holds the entries of calls from other loops by their remote
	// number (link.forwardFrom), which their tickets carry; lazily made.
	remote map[uint64]*entry
	free   []*entry // ended entries kept for reuse (at most maxFree)
}

// maxFree bounds the entries a table keeps for reuse after a burst.
const maxFree = 4096

// The ring's bounds: a table starts at minRing slots (512 bytes) and grows
// to at most maxRing (1 MiB of pointers), beyond which calls in flight
// together share slots through the overflow map.
const (
	minRing = 64
	maxRing = 1 << 17
)

func newCallTable() callTable {
	return callTable{ring: make([]*entry, minRing), subs: make(map[string]*entry)}
}

// len is the number of entries.
func (t *callTable) len() int { return t.n }

// get returns entry id, or nil.
func (t *callTable) get(id uint64) *entry {
	if len(t.ring) > 0 {
		if e := t.ring[id&uint64(len(t.ring)-1)]; e != nil && e.id == id {
			return e
		}
	}
	if len(t.over) == 0 {
		return nil
	}
	return t.over[id]
}

// put files e under e.id, which no entry has.
func (t *callTable) put(e *entry) {
	t.n++
	if len(t.ring) == 0 {
		t.ring = make([]*entry, minRing)
	}
	for {
		slot := &t.ring[e.id&uint64(len(t.ring)-1)]
		if *slot == nil {
			*slot = e
			return
		}
		if 2*t.n <= len(t.ring) || len(t.ring) >= maxRing {
			// A sparse ring: the occupant outlived the window.
			t.overflow(*slot)
			*slot = e
			return
		}
		t.resize(2 * len(t.ring))
	}
}

// overflow moves e, displaced from the ring, to the overflow map.
func (t *callTable) overflow(e *entry) {
	if t.over == nil {
		t.over = make(map[uint64]*entry)
	}
	t.over[e.id] = e
}

// resize moves the ring's entries to a ring of size slots (a power of
// two): growing keeps every one in the ring, shrinking moves those that
// meet in a slot to the overflow map, the older first.
func (t *callTable) resize(size int) {
	ring := make([]*entry, size)
	mask := uint64(size - 1)
	for _, e := range t.ring {
		if e == nil {
			continue
		}
		slot := &ring[e.id&mask]
		switch {
		case *slot == nil:
			*slot = e
		case (*slot).id < e.id:
			t.overflow(*slot)
			*slot = e
		default:
			t.overflow(e)
		}
	}
	t.ring = ring
}

// shrink halves the ring while at most an eighth of it would be used,
// down to minRing: the sweep's, so that a link's ring follows its load
// after a burst.
func (t *callTable) shrink() {
	size := len(t.ring)
	for size > minRing && 8*t.n <= size/2 {
		size /= 2
	}
	if size < len(t.ring) {
		t.resize(size)
	}
}

// del takes e out of the id index.
func (t *callTable) del(e *entry) {
	t.n--
	if len(t.ring) > 0 {
		if slot := &t.ring[e.id&uint64(len(t.ring)-1)]; *slot == e {
			*slot = nil
			return
		}
	}
	delete(t.over, e.id)
}

// each calls fn for every entry; fn may remove the entry it is given.
func (t *callTable) each(fn func(e *entry)) {
	for _, e := range t.ring {
		if e != nil {
			fn(e)
		}
	}
	for _, e := range t.over {
		fn(e)
	}
}

// add records call c with upstream id id, sent (admitted) at sent and due at
// deadline: a subscription request when st is non-nil.
func (t *callTable) add(id uint64, c backend.Call, st backend.Stream, sent, deadline int64) *entry {
	var e *entry
	if n := len(t.free); n > 0 {
		e = t.free[n-1]
		t.free[n-1] = nil
		t.free = t.free[:n-1]
	} else {
		e = new(entry)
	}
	// e is zero but for its state (remove, new): only what differs is
	// written.
	e.id, e.state, e.c, e.stream, e.sent = id, callSent, c, st, sent
	if st != nil {
		e.state = callEstablishing
	}
	t.put(e)
	t.link(e, deadline)
	return e
}

// link puts e in deadline order, due at d. Deadlines arrive almost in
// order (each is a loop's clock of the admitting turn plus the timeout),
// so the walk back from the tail is short.
func (t *callTable) link(e *entry, d int64) {
	e.deadline = d
	p := t.tail
	for p != nil && p.deadline > d {
		p = p.prev
	}
	e.prev = p
	if p == nil {
		e.next = t.head
		t.head = e
	} else {
		e.next = p.next
		p.next = e
	}
	if e.next == nil {
		t.tail = e
	} else {
		e.next.prev = e
	}
}

// unlink takes e out of deadline order.
func (t *callTable) unlink(e *entry) {
	if e.deadline == 0 {
		return
	}
	if e.prev == nil {
		t.head = e.next
	} else {
		e.prev.next = e.next
	}
	if e.next == nil {
		t.tail = e.prev
	} else {
		e.next.prev = e.prev
	}
	e.prev, e.next, e.deadline = nil, nil, 0
}

// due returns the earliest entry whose deadline is at or before now, or
// nil.
func (t *callTable) due(now int64) *entry {
	if t.head != nil && t.head.deadline <= now {
		return t.head
	}
	return nil
}

// rekey files e under id instead of its own: a plain subscription waiting
// for the answer to its NS_unsubscribe request id.
func (t *callTable) rekey(e *entry, id uint64) {
	t.del(e)
	e.id = id
	t.put(e)
}

// fileRemote files e under rid, its call's remote number.
func (t *callTable) fileRemote(e *entry, rid uint64) {
	if t.remote == nil {
		t.remote = make(map[uint64]*entry)
	}
	e.rid = rid
	t.remote[rid] = e
}

// remove deletes e from every index and keeps it for reuse.
func (t *callTable) remove(e *entry) {
	t.unlink(e)
	t.del(e)
	if e.rid != 0 {
		delete(t.remote, e.rid)
	}
	if e.upSub != "" && t.subs[e.upSub] == e {
		delete(t.subs, e.upSub)
	}
	t.unworker(e)
	*e = entry{state: callEnded}
	if len(t.free) < maxFree {
		t.free = append(t.free, e)
	}
}

// setWorker records that worker took e.
func (t *callTable) setWorker(e *entry, worker string) {
	e.worker = worker
	if t.workers == nil {
		t.workers = make(map[string]int)
	}
	t.workers[worker]++
}

func (t *callTable) unworker(e *entry) {
	if e.worker == "" {
		return
	}
	if n := t.workers[e.worker] - 1; n > 0 {
		t.workers[e.worker] = n
	} else {
		delete(t.workers, e.worker)
	}
}

// outcomeOf is the request metric's outcome of a call that leaves the
// states in flight from state from, for cause why, with err: cancelled
// when the gateway had dropped it, ok or error for an answer, timeout,
// else unavailable.
func outcomeOf(from callState, why cause, err error) outcome {
	switch {
	case from == callDropped:
		return outcomeCancelled
	case why == byAnswer && err == nil:
		return outcomeOK
	case why == byAnswer:
		return outcomeError
	case why == byTimeout:
		return outcomeTimeout
	}
	return outcomeUnavailable
}

// notCounted is refuse's outcome for a call that is not counted in the
// request metric (a method no NATS subject can carry).
const notCounted = numOutcomes

// refuse ends call c, which no table took (nothing was sent): its
// outcome o counted (unless notCounted), and the call finished with err.
// reservedOn is the link that counted c in flight before it had an entry
// (forwardFrom), which is taken back, or nil. It is the one end of a call
// that never became an entry, as moveLocked is of those that did.
func (u *Upstream) refuse(c backend.Call, reservedOn *link, o outcome, err error) {
	if reservedOn != nil {
		reservedOn.inflight.Add(-1)
	}
	if o != notCounted {
		u.counters.ended(o, 0, 0)
	}
	c.Finish(nil, err)
}

// reserved is l if counted (forwardFrom counted the call in flight on l),
// else nil.
func reserved(l *link, counted bool) *link {
	if counted {
		return l
	}
	return nil
}

// finish is a call's Finish, applied by whoever moved its entry once the
// link's mu is released (Finish posts to the call's loop).
type finish struct {
	c      backend.Call
	result []byte
	err    error
	// here: the answer was read on the loop of the call's session, which
	// applies it at once (backend.LoopCall). Only answers are: a failure,
	// a sweep or a cancel may run within the session's own work (a cancel
	// that takes the backlog over the bound fails the link), and posts.
	here bool
}

// do applies f; a zero finish does nothing.
func (f finish) do() {
	if f.c == nil {
		return
	}
	if f.here {
		if lc, ok := f.c.(backend.LoopCall); ok {
			lc.FinishOnLoop(f.result, f.err)
			return
		}
	}
	f.c.Finish(f.result, f.err)
}

// moveLocked moves entry e to state to for cause, with the side effects the
// transition calls for (see callState): the transport's cancel or
// subscription/cancel, the in-flight count, the request metric (outcome by
// cause: ok or error for an answer, cancelled for a dropped call,
// timeout, unavailable), removal from the table, and the call's Finish,
// with result or err, which it returns for the caller to apply once mu is
// released (a dropped call is finished UPSTREAM_UNAVAILABLE, not delivered,
// or UPSTREAM_TIMEOUT). An illegal transition panics. Called with mu held;
// the caller signals the link's output afterwards when it may have queued
// a cancel.
func (l *link) moveLocked(e *entry, to callState, why cause, result []byte, err error) finish {
	return l.moveAtLocked(e, to, why, result, err, 0)
}

// moveAtLocked is moveLocked at time now (unix nanoseconds; 0: the link's
// clock), for the sweep, which moves the entries due at now.
func (l *link) moveAtLocked(e *entry, to callState, why cause, result []byte, err error, now int64) finish {
	from := e.state
	if !from.canGo(to) {
		panic("upstream: call " + strconv.FormatUint(e.id, 10) + ": illegal transition " + from.String() + " -> " + to.String())
	}
	t := &l.calls
	// The upstream is told what the gateway gives up while it still
	// holds it.
	switch {
	case to == callDropped, why == byTimeout && (from == callSent || from == callEstablishing):
		l.cancelLocked(e)
	case to == callOrphaned, to == callUnsubscribing, to == callEnded && from == callLive && why == byGateway:
		l.subCancelLocked(e, to != callEnded)
	}
	if from.inFlight() && !to.inFlight() {
		l.count(-1)
		if now == 0 {
			now = l.clock()
		}
		if l.now != 0 {
			l.tally.ended(outcomeOf(from, why, err), e.sent, now) // added up at the end of the read
		} else {
			l.up.counters.ended(outcomeOf(from, why, err), e.sent, now)
		}
	}
	var f finish
	if from.holdsCall() && !to.holdsCall() {
		if from == callDropped {
			result, err = nil, backend.ErrUpstreamUnavailable // not delivered: cancelled
			if why == byTimeout {
				err = backend.ErrUpstreamTimeout
			}
		}
		f = finish{c: e.c, result: result, err: err, here: e.here && why == byAnswer}
		e.c = nil
	}
	switch to {
	case callLive:
		t.unlink(e)
		if l.nats == nil {
			t.subs[e.upSub] = e
		}
	case callExpired, callOrphaned, callUnsubscribing:
		if !from.lingers() {
			t.lingering++
		}
		if to == callOrphaned && l.nats == nil {
			t.subs[e.upSub] = e
		}
		if now == 0 {
			now = l.clock()
		}
		t.unlink(e)
		t.link(e, now+int64(l.up.cfg.Timeout))
	case callEnded:
		if from.lingers() {
			t.lingering--
		}
		t.remove(e)
		return f
	}
	e.state = to
	return f
}

// expireLocked moves e, due at now, on: a call in flight times out
// (expired, or ended at once when maxExpired entries linger already); a
// lingering entry is forgotten. Called with mu held.
func (l *link) expireLocked(e *entry, now int64) finish {
	switch {
	case e.state.lingers():
		return l.moveAtLocked(e, callEnded, byForget, nil, nil, now)
	case l.calls.lingering >= maxExpired:
		return l.moveAtLocked(e, callEnded, byTimeout, nil, backend.ErrUpstreamTimeout, now)
	}
	return l.moveAtLocked(e, callExpired, byTimeout, nil, backend.ErrUpstreamTimeout, now)
}
