package loop

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFanoutTurnOneOutputBuffer: a fan-out's events are framed at each
// connection's write, into the loop's spare buffer written last, so the
// connections take turns with one output buffer. When each connection
// framed its events as they were delivered, a turn that delivered to N
// connections held N output buffers until its end (main: 200 subscribers
// leave 200 more spare buffers after one publish).
func TestFanoutTurnOneOutputBuffer(t *testing.T) {
	const subs = 200
	s := startLoopServer(t, Config{})
	d := newRawDialer(t, s)
	clients := make([]*wsClient, subs)
	for i := range clients {
		c := dialWS(t, d)
		if _, err := unix.Write(c.fd, maskedText([]byte(`{"jsonrpc":"2.0","id":1,"method":"edge/topic","params":{"name":"b"}}`))); err != nil {
			t.Fatal(err)
		}
		c.await(t, 1) // the subscription's response
		clients[i] = c
	}
	pub := dialWS(t, d)
	l := s.numbered[0]
	spares := func() (n int) {
		onLoop(t, l, func() { n = len(l.bufs) })
		return n
	}
	for round := 1; round <= 3; round++ {
		before := spares()
		if _, err := unix.Write(pub.fd, maskedText(fmt.Appendf(nil,
			`{"jsonrpc":"2.0","id":%d,"method":"edge/publish","params":{"name":"b","data":{"p":"0123456789abcdef"}}}`, round))); err != nil {
			t.Fatal(err)
		}
		pub.await(t, round)
		for _, c := range clients {
			c.await(t, 1+round)
		}
		// The publisher's answer may hold one buffer while the events take
		// another.
		if after := spares(); after > before+2 {
			t.Fatalf("publish %d to %d subscribers: the loop's spare output buffers went from %d to %d, want at most 2 more (one buffer at a time for the events)",
				round, subs, before, after)
		}
	}
}

// TestSendEventCaps: a connection takes events (rpc.DeferringSink) under
// the caps of Send (CONTRACT.md section 6): none once its output reached the
// soft cap, and one that would take it over the hard cap is refused and
// closes the connection (1008) once the session has returned.
func TestSendEventCaps(t *testing.T) {
	const soft, hard = 4 << 10, 16 << 10
	cfg := Config{OutboundSoftBytes: soft, OutboundHardBytes: hard}.withDefaults()
	id, members := []byte(`"s1"`), make([]byte, 1000)
	for i := range members {
		members[i] = 'x'
	}

	l := &eventLoop{srv: &Server{cfg: cfg}, spareMax: cfg.SpareOutputBytes}
	w := &conn{c: &pendingConn{}, l: l, proto: protoWebSocket, state: stateOpen}
	w.sess = echo{w}
	taken := 0
	for w.SendEvent("h", id, members) {
		taken++
	}
	if len(w.out) < soft || len(w.out) >= soft+1100 || len(l.capped) != 0 {
		t.Fatalf("took %d events, %d bytes, %d capped; want events up to the soft cap (%d), none capped", taken, len(w.out), len(l.capped), soft)
	}
	if !w.dirty || len(l.dirty) != 1 {
		t.Fatal("a connection that took events is not marked for the flush")
	}

	l = &eventLoop{srv: &Server{cfg: cfg}, spareMax: cfg.SpareOutputBytes}
	w = &conn{c: &pendingConn{pending: hard - 500}, l: l, proto: protoWebSocket, state: stateOpen}
	w.sess = echo{w}
	cfg.OutboundSoftBytes = hard // below the soft cap, but no room for the event under the hard one
	l.srv.cfg = cfg
	if w.SendEvent("h", id, members) {
		t.Fatal("took an event over the hard cap")
	}
	if len(w.out) != 0 || len(l.capped) != 1 || w.state != stateOpen {
		t.Fatalf("refused at the hard cap: %d bytes buffered, %d capped, state %v; want nothing buffered, capped, still open until the session returns", len(w.out), len(l.capped), w.state)
	}
	l.closeCapped()
	if w.state != stateClosing || !w.hangup || w.code != 1008 {
		t.Fatalf("after closeCapped: state %v, hangup %v, code %d; want closing with 1008", w.state, w.hangup, w.code)
	}
	if w.SendEvent("h", id, nil) {
		t.Fatal("a closing connection took an event")
	}
}
