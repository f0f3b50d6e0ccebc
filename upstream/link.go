package upstream

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// link is one connection to an upstream (a TCP or WebSocket connection, or
// an exec child's stdio) and the calls in flight on it. Forward and Cancel
// run on the gateway's event loops and never wait for I/O: they append to the
// output buffer under mu and wake the writer. The link's reader goroutine
// applies what the upstream sends; its writer goroutine writes the output
// buffer and sweeps timed-out calls. No goroutine waits per call: a call in
// flight is one entry in pending.
type link struct {
	up   *Upstream // immutable
	desc string    // immutable: for logs, e.g. "tcp://127.0.0.1:9000#1"
	// frame appends one outbound message, framed for the transport; nil
	// for NDJSON (the message and a newline). Immutable.
	frame func(dst, msg []byte) []byte
	// cancels reports whether the transport forwards $/cancelRequest (ws).
	// Immutable.
	cancels bool

	mu      sync.Mutex
	up_     bool              // guarded by mu: connected, accepting calls
	nextID  uint64            // guarded by mu: last upstream request id
	pending map[uint64]call   // guarded by mu: calls in flight and live subscriptions, by upstream id
	subs    map[string]uint64 // guarded by mu: upstream subscription id -> upstream request id
	out     []byte            // guarded by mu: framed output not yet taken by the writer
	enc     []byte            // guarded by mu: scratch for a message being framed
	wake    chan struct{}     // cap 1: output or a state change for the writer

	inflight atomic.Int64 // calls in pending that are not live subscriptions, for replica choice

	garbage burst  // reader-owned: what the upstream sent that was dropped
	body    []byte // reader-owned scratch: an event's members
	name    []byte // reader-owned scratch: an unquoted subscription id
}

// call is one entry of link.pending.
type call struct {
	c        backend.Call
	stream   backend.Stream // non-nil for a subscription
	deadline int64          // unix nanoseconds; 0 once a subscription is live
	live     bool           // a subscription the upstream established
	upSub    string         // the upstream's subscription id, once live
	dropped  bool           // the gateway cancelled it: its answer is not wanted
}

func newLink(up *Upstream, desc string, frame func(dst, msg []byte) []byte, cancels bool) *link {
	return &link{up: up, desc: desc, frame: frame, cancels: cancels, wake: make(chan struct{}, 1)}
}

// signal wakes the writer.
func (l *link) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Forward implements backend.Forwarder for this one link. Runs on a loop.
func (l *link) forward(c backend.Call) backend.Ticket {
	st := c.Stream()
	l.mu.Lock()
	if !l.up_ || len(l.out) > l.up.cfg.MaxPendingBytes {
		// Nothing queues (CONTRACT.md section 10): down, or not reading.
		l.mu.Unlock()
		l.up.counters.ended(outcomeUnavailable, 0, 0) // a failure path
		c.Finish(nil, backend.ErrUpstreamUnavailable)
		return backend.Ticket{}
	}
	l.nextID++
	id := l.nextID
	if l.frame == nil {
		l.out = append(codec.AppendRequest(l.out, id, c.Method(), c.Params()), '\n')
	} else {
		l.enc = codec.AppendRequest(l.enc[:0], id, c.Method(), c.Params())
		l.out = l.frame(l.out, l.enc)
	}
	l.pending[id] = call{c: c, stream: st, deadline: time.Now().Add(l.up.cfg.Timeout).UnixNano()}
	l.mu.Unlock()
	l.inflight.Add(1)
	l.signal()
	return backend.NewTicket(l, id)
}

// Cancel implements backend.Canceller. Runs on a loop.
func (l *link) Cancel(id uint64) {
	l.mu.Lock()
	e, ok := l.pending[id]
	if !ok || e.dropped {
		l.mu.Unlock()
		return
	}
	if e.live {
		// A live subscription ends now: the upstream is told, and sends no
		// subscription/closed after subscription/cancel (CONTRACT.md 2.3).
		delete(l.pending, id)
		delete(l.subs, e.upSub)
		if l.up_ {
			l.appendLocked(appendSubCancel(nil, e.upSub))
		}
		l.mu.Unlock()
		l.signal()
		e.c.Finish(nil, nil)
		return
	}
	// In flight: the answer is still awaited (the slot is held until the
	// upstream answers or the call times out), then dropped.
	e.dropped = true
	l.pending[id] = e
	if l.cancels && e.stream == nil && l.up_ {
		l.appendLocked(appendCancelRequest(nil, id))
	}
	l.mu.Unlock()
	l.signal()
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

// open marks the link connected with fresh tables. Called by the
// supervisor once the transport is up.
func (l *link) open() {
	l.mu.Lock()
	l.up_ = true
	l.pending = make(map[uint64]call)
	l.subs = make(map[string]uint64)
	l.out = l.out[:0]
	l.mu.Unlock()
}

// isUp reports whether the link takes calls.
func (l *link) isUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up_
}

// fail marks the link down and settles everything on it (CONTRACT.md
// section 10): calls in flight get UPSTREAM_UNAVAILABLE, live subscriptions
// end UPSTREAM_LOST. Safe to call more than once.
func (l *link) fail() {
	l.mu.Lock()
	if !l.up_ {
		l.mu.Unlock()
		return
	}
	l.up_ = false
	pending := l.pending
	l.pending, l.subs = nil, nil
	l.out = l.out[:0]
	l.mu.Unlock()
	l.inflight.Store(0)
	now := nowNanos()
	for _, e := range pending {
		if e.live {
			e.c.Finish(nil, backend.ErrUpstreamLost)
		} else {
			l.ended(e, outcomeUnavailable, now)
			e.c.Finish(nil, backend.ErrUpstreamUnavailable)
		}
	}
}

// take hands the writer the output buffer and gives it spare for the next.
func (l *link) take(spare []byte) []byte {
	l.mu.Lock()
	out := l.out
	l.out = spare[:0]
	l.mu.Unlock()
	return out
}

// sweep answers UPSTREAM_TIMEOUT to every call whose deadline has passed
// and forwards the cancel as Cancel does.
func (l *link) sweep(now int64) {
	var expired []call
	l.mu.Lock()
	for id, e := range l.pending {
		if e.live || e.deadline == 0 || e.deadline > now {
			continue
		}
		delete(l.pending, id)
		if l.cancels && e.stream == nil && !e.dropped {
			l.appendLocked(appendCancelRequest(nil, id))
		}
		expired = append(expired, e)
	}
	l.mu.Unlock()
	if len(expired) == 0 {
		return
	}
	l.inflight.Add(-int64(len(expired)))
	l.signal()
	for _, e := range expired {
		l.ended(e, outcomeTimeout, now)
		e.c.Finish(nil, backend.ErrUpstreamTimeout)
	}
}

// notify writes a notification. Runs on a loop.
func (l *link) notify(method string, params []byte) {
	l.mu.Lock()
	if !l.up_ || len(l.out) > l.up.cfg.MaxPendingBytes {
		l.mu.Unlock()
		return
	}
	l.enc = codec.AppendNotification(l.enc[:0], method, params)
	l.appendLocked(l.enc)
	l.mu.Unlock()
	l.signal()
}
