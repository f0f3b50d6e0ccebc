package loop

import (
	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/rpc"
)

// Subscription events are framed when the connection writes, not when its
// session takes them from their streams (rpc.DeferringSink): the session
// only says it has some (DeferEvents), and the flush at the end of the turn
// has it hand them over (rpc.Session.SendEvents) just before the
// connection's write. A fan-out's events reach thousands of connections in
// one turn; framed as they were delivered, each connection held an output
// buffer of its own until the end of the turn, grown event by event. Framed
// at the write, the connections take turns with the loop's one spare buffer
// (getBuf and putBuf keep a stack: the buffer written last is handed out
// next), which stays large and in cache, and each event is copied once,
// from its stream straight into that buffer. None of this adds to the conn
// struct: the lists are the loop's.

var _ rpc.DeferringSink = (*conn)(nil)

// DeferEvents implements rpc.DeferringSink: the connection's events are
// framed by this turn's flush (flushEvents).
func (w *conn) DeferEvents() { w.l.deferred = append(w.l.deferred, w) }

// SendEvent implements rpc.DeferringSink: it frames one event into the
// connection's output, under the same caps as Send: none is taken once the
// output reached the soft cap (Writable), and one that would pass the hard
// cap closes the connection SLOW_CONSUMER, after the session returned
// (closeCapped: the session holds a stream's lock during the call).
func (w *conn) SendEvent(head string, id, members []byte) bool {
	if w.state != stateOpen {
		return false
	}
	cfg := w.cfg()
	queued := w.OutboundBytes()
	if queued >= cfg.OutboundSoftBytes {
		return false
	}
	if queued+codec.EventLen(head, id, members)+codec.MaxHeaderSize > cfg.OutboundHardBytes {
		w.l.capped = append(w.l.capped, w)
		return false
	}
	if w.proto == protoWebSocket {
		w.out = codec.AppendEventFrame(w.output(), head, id, members)
	} else {
		w.out = append(codec.AppendEventWith(w.output(), head, id, members), '\n')
	}
	w.l.markDirty(w)
	return true
}

// flushEvents frames the deferred events of each connection that has some,
// after the output it already has, and writes it at once: one write per
// connection, and the next connection reuses the buffer. Runs on the loop.
func (l *eventLoop) flushEvents() {
	for i := 0; i < len(l.deferred); i++ {
		w := l.deferred[i]
		l.deferred[i] = nil
		if s, ok := w.sess.(*rpc.Session); ok {
			s.SendEvents()
		}
		l.closeCapped()
		if w.dirty {
			w.flush()
		}
	}
	l.deferred = l.deferred[:0]
	l.closeCapped()
}

// closeCapped closes the connections that refused an event over their hard
// cap (SendEvent). Runs on the loop.
func (l *eventLoop) closeCapped() {
	for i, w := range l.capped {
		l.capped[i] = nil
		w.slowConsumer()
	}
	l.capped = l.capped[:0]
}
