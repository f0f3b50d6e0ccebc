package rpc

import "github.com/openengine/edge/codec"

// DeferringSink is a Sink that takes subscription events when it writes
// rather than when they are delivered: the session tells it that events are
// ready (DeferEvents), and the transport calls Session.SendEvents just
// before its write, which hands them over one by one (SendEvent) for the
// transport to frame straight into the output it is about to write. All the
// events that reached a connection in a loop turn then go out in its one
// write, each copied once, and a fan-out to thousands of connections needs
// one output buffer at a time instead of one per connection until the end
// of the turn (issue 21 item 4).
type DeferringSink interface {
	Sink
	// DeferEvents tells the transport that the session has events ready:
	// before its next write it must call Session.SendEvents. The session
	// calls it once, then not again until that SendEvents.
	DeferEvents()
	// SendEvent queues one subscription event for the peer: the
	// notification codec.AppendEventWith(dst, head, id, members) writes,
	// framed as Send frames a message. It returns false, taking nothing,
	// when the connection takes no event now: it is at or over its soft
	// outbound cap (not Writable), closing, or the event would take it over
	// its hard cap; in the last case the transport closes the connection
	// (SLOW_CONSUMER) once the session has returned. The session keeps the
	// event for Resume. Called with the subscription's stream locked: it
	// must not call back into the session.
	SendEvent(head string, id, members []byte) bool
}

// deferEvents records that sub has events for the transport's next write
// (DeferringSink). Must be called on the loop.
func (s *Session) deferEvents(ds DeferringSink, sub *subscription) {
	if sub.ready {
		return
	}
	sub.ready = true
	s.ready = append(s.ready, sub)
	if len(s.ready) == 1 {
		ds.DeferEvents()
	}
}

// SendEvents hands a DeferringSink the events of every subscription that
// has some ready, as many as the connection takes now, and settles what
// follows as drainEvents does: a subscription that still holds events
// waits for Resume, one whose producer is done and whose events are all
// out ends with subscription/closed "done" (written after them). The
// transport calls it just before its write. Must be called on the loop.
func (s *Session) SendEvents() {
	if len(s.ready) == 0 {
		return
	}
	ds := s.sink.(DeferringSink)
	ready := s.ready
	s.ready = nil // what the subscriptions ending below send defers nothing
	for i, sub := range ready {
		ready[i] = nil
		sub.ready = false
		if s.closed || sub.state != subLive {
			continue
		}
		remaining := s.writeEvents(ds, sub)
		if s.closed {
			continue
		}
		s.settle(sub, remaining)
	}
	if s.ready == nil && !s.closed {
		s.ready = ready[:0]
	}
}

// sendReady hands the transport the ready events before the session sends
// anything else, so that no answer or notification overtakes an event
// delivered before it: the events go first in the output. The
// subscriptions stay ready: SendEvents settles them at the write. It writes
// nothing else (callers' messages may alias s.buf). Must be called on the
// loop.
func (s *Session) sendReady() {
	ds := s.sink.(DeferringSink)
	for _, sub := range s.ready {
		if sub.state == subLive {
			s.writeEvents(ds, sub)
		}
	}
}

// writeEvents hands ds the events buffered in sub's stream, in order, while
// it takes them, under one lock of the stream, and returns how many are
// left. Must be called on the loop.
func (s *Session) writeEvents(ds DeferringSink, sub *subscription) (remaining int) {
	head := codec.EventHead
	if sub.ns != "" {
		head = sub.head
	}
	st := &sub.st
	st.mu.Lock()
	delivered, freed := 0, 0
	var last []byte // the cursor of the last event taken
	for st.n > 0 {
		e := &st.ring[st.head]
		if !ds.SendEvent(head, sub.idTok, e.body) {
			break
		}
		delivered++
		freed += len(e.body)
		last = e.cursor
		switch {
		case e.shared:
			// Let the event go once every member wrote it.
			e.cursor, e.body, e.shared = nil, nil, false
		case cap(e.body) > maxSlotKeep:
			e.body = nil // the budget counts buffered events, not spare capacity
		}
		st.head++
		if st.head == len(st.ring) {
			st.head = 0
		}
		st.n--
	}
	if delivered > 0 {
		// Under the lock: an unshared slot's cursor is reused by the next push.
		sub.lastCursor = append(sub.lastCursor[:0], last...)
		st.bytes -= freed
	}
	remaining = st.n
	st.mu.Unlock()
	if delivered == 0 {
		return remaining
	}
	s.ctr.EventsDelivered += uint64(delivered)
	// The events' bytes moved from the buffer to the transport.
	st.budget.give(freed)
	st.budget.observe(s.sink.OutboundBytes())
	st.signalRoom()
	st.budget.wake()
	return remaining
}
