package rpc

import (
	"sync"
	"sync/atomic"
)

// budget is the output budget of one connection (CONTRACT.md section 6):
// what the transport holds for the socket (Sink.OutboundBytes) plus the
// events every subscription of the session has buffered stay under one cap,
// the transport's hard cap (Sink.OutboundLimit).
//
// Producers (workers) take bytes for an event before buffering it and fail,
// or wait, when the connection has no room; the loop gives them back as it
// hands events to the socket or drops a subscription's buffer, and publishes
// the transport's pending bytes, which only it can read. An answer the loop
// writes while the budget is short first ends the subscriptions holding the
// most buffered events (SLOW_CONSUMER, Session.makeRoom): answers are worth
// more than events a consumer has not read. A session gets its budget with
// its first subscription; a connection without one pays nothing.
type budget struct {
	limit int64 // immutable: Sink.OutboundLimit

	held atomic.Int64 // bytes of events buffered by the session's subscriptions
	// pending is the transport's pending output as of the loop's last look
	// (after each answer it writes, each drain of events, each Resume).
	pending atomic.Int64

	mu      sync.Mutex
	waiting []*stream    // guarded by mu: paced producers waiting for room
	nwait   atomic.Int32 // len(waiting), so that the loop checks it without mu
}

// take reserves n bytes for an event and reports whether they fit.
// Safe for concurrent use.
func (b *budget) take(n int) bool {
	for {
		h := b.held.Load()
		if h+int64(n)+b.pending.Load() > b.limit {
			return false
		}
		if b.held.CompareAndSwap(h, h+int64(n)) {
			return true
		}
	}
}

// give returns n bytes taken for events. Safe for concurrent use.
func (b *budget) give(n int) {
	if n != 0 {
		b.held.Add(-int64(n))
	}
}

// fits reports whether an event of n bytes could ever be buffered.
func (b *budget) fits(n int) bool { return int64(n) <= b.limit }

// wait registers st to be signalled (stream.room) when the loop frees room.
// The caller checks for room again after registering, so a wake-up between
// its failed take and the registration is not lost. Safe for concurrent use.
func (b *budget) wait(st *stream) {
	b.mu.Lock()
	b.waiting = append(b.waiting, st)
	b.nwait.Store(int32(len(b.waiting)))
	b.mu.Unlock()
}

// wake signals every waiting producer. The loop calls it whenever it frees
// room. Safe for concurrent use.
func (b *budget) wake() {
	if b.nwait.Load() == 0 {
		return
	}
	b.mu.Lock()
	waiting := b.waiting
	b.waiting = nil
	b.nwait.Store(0)
	b.mu.Unlock()
	for _, st := range waiting {
		st.signalRoom()
	}
}

// observe publishes the transport's pending output and wakes waiting
// producers if it went down. Must be called on the loop.
func (b *budget) observe(pending int) {
	if old := b.pending.Swap(int64(pending)); int64(pending) < old {
		b.wake()
	}
}

// pacedWindow is the most event bytes EmitWait lets one subscription
// buffer (or its SubscriptionBufferBytes, if smaller). The loop writes events
// only while the connection is under its soft cap, so a producer that its
// consumer paces gains nothing from more, and a paced subscription of a
// healthy client then never holds the connection's budget.
const pacedWindow = 1 << 20
