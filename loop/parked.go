package loop

import "math"

// A WebSocket message that arrives in pieces waits in its connection's
// reassembly buffer (codec.Reader) until its last byte is here: up to
// --max-message-bytes per connection, so that many connections each
// sending most of a large message and then nothing held that much each
// (CONTRACT.md section 6: memory per connection is bounded; this bounds
// their sum). Server.parked counts those buffers' bytes across every
// connection of every loop; a connection whose buffer grew while the total
// is over Config.MaxParkedBytes is closed with 1013 (try again later), and
// the bytes it held are released.

// park brings the connection's count in Server.parked up to date with its
// reassembly buffer, and closes it when its buffer grew while the total is
// over Config.MaxParkedBytes. Called at the end of a turn whose input
// changed the buffer. Runs on the loop.
func (w *conn) park() {
	held := min(w.rd.Buffered(), math.MaxInt32)
	delta := int64(held) - int64(w.parked)
	w.parked = int32(held)
	total := w.l.srv.parked.Add(delta)
	if delta > 0 && total > int64(w.cfg().MaxParkedBytes) && w.state == stateOpen {
		w.l.srv.parkedClosed.Add(1)
		w.closeFor(causeParked)
		w.rd.Reset()
		w.unpark()
	}
}

// unpark releases what the connection counts in Server.parked. Runs on the
// loop.
func (w *conn) unpark() {
	if w.parked != 0 {
		w.l.srv.parked.Add(-int64(w.parked))
		w.parked = 0
	}
}
