package upstream

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/backend"
)

// stuckConn is a backend.WireConn whose socket takes nothing: what the
// link hands it stays buffered (unless drain is set), and Close is
// recorded.
type stuckConn struct {
	buffered int
	drain    bool
	closes   int
}

func (s *stuckConn) Dirty() {}
func (s *stuckConn) Buffered() int {
	return s.buffered
}
func (s *stuckConn) Write(p []byte) {
	if !s.drain {
		s.buffered += len(p)
	}
}
func (s *stuckConn) CloseWrite() {}
func (s *stuckConn) Close()      { s.closes++ }

// flush is the loop's end of turn: the link's output goes to the socket.
func (s *stuckConn) flush(l *link) { s.Write(l.Output()) }

// TestUpstreamOwedOutputOverCap is the regression test of issue 24 item 1
// on each framing: an upstream that sends requests (NDJSON) or pings (ws)
// and never reads had every answer and pong queued for it, without bound.
// Once what the link owes it takes its backlog over MaxPendingBytes, the
// connection is closed (once, counted), the call in flight on it ends
// UPSTREAM_UNAVAILABLE, and nothing more is queued.
func TestUpstreamOwedOutputOverCap(t *testing.T) {
	const max = 4 << 10
	request := []byte(`{"jsonrpc":"2.0","id":7,"method":"hello","params":[]}` + "\n")
	ping := appendFrame(nil, ws.OpPing, []byte("0123456789"))
	for _, tt := range []struct {
		name  string
		frame func(dst, msg []byte) []byte
		msg   []byte
	}{
		{"requests over NDJSON", nil, request},
		{"pings over WebSocket", appendClientFrame, ping},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := testUpstream(nil, Config{MaxPendingBytes: max})
			l := newLink(u, "t", tt.frame, tt.frame != nil)
			sc := &stuckConn{}
			l.Open(sc)
			c := &recCall{method: "edge/echo"}
			l.forward(c, 0)
			sc.flush(l)
			in := bytes.Repeat(tt.msg, 1000) // about ten times the cap in answers
			n, err := l.Traffic(in, nowNanos())
			if err != nil || n != len(in) {
				t.Fatalf("Traffic consumed %d of %d bytes, %v", n, len(in), err)
			}
			sc.flush(l)
			if sc.closes != 1 {
				t.Fatalf("the connection was closed %d times, want once; %d bytes pending with a cap of %d", sc.closes, sc.buffered+len(l.out), max)
			}
			if pending := sc.buffered + len(l.out); pending > max+200 {
				t.Fatalf("%d bytes pending, want at most the cap %d and one answer", pending, max)
			}
			if got := u.Stats().SlowClosed; got != 1 {
				t.Fatalf("Stats.SlowClosed %d, want 1", got)
			}
			if len(c.errs) != 1 || !errors.Is(c.errs[0], backend.ErrUpstreamUnavailable) {
				t.Fatalf("the call in flight ended %v, want UPSTREAM_UNAVAILABLE", c.errs)
			}
			if l.isUp() {
				t.Fatal("the link still takes calls")
			}
		})
	}
}

// TestUpstreamWriteStall: a connection whose pending output makes no
// progress for WriteStallTimeout is closed at the sweep (CONTRACT.md
// section 6, as for clients), its call in flight ended UPSTREAM_UNAVAILABLE;
// output that shrinks between sweeps, or none, keeps it open.
func TestUpstreamWriteStall(t *testing.T) {
	const stall = time.Second
	steps := []time.Duration{0, stall / 2, stall - 1, stall, 2 * stall}
	for _, tt := range []struct {
		name    string
		pending func(i int) int // the socket's buffered bytes at step i
		closeAt int             // the step that closes it, -1: none
	}{
		{"stuck", func(int) int { return 1000 }, 3},
		{"growing", func(i int) int { return 1000 + i }, 3},
		{"draining", func(i int) int { return 1000 - i }, -1},
		{"empty", func(int) int { return 0 }, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := testUpstream(nil, Config{WriteStallTimeout: stall})
			l := newLink(u, "t", nil, false)
			sc := &stuckConn{drain: true}
			l.Open(sc)
			c := &recCall{method: "edge/echo"}
			l.forward(c, 0)
			l.Output()
			t0 := time.Now().UnixNano()
			closedAt := -1
			for i, d := range steps {
				sc.buffered = tt.pending(i)
				l.sweep(t0 + int64(d))
				if sc.closes > 0 && closedAt < 0 {
					closedAt = i
				}
			}
			if closedAt != tt.closeAt {
				t.Fatalf("closed at step %d, want %d", closedAt, tt.closeAt)
			}
			if tt.closeAt < 0 {
				return
			}
			if sc.closes != 1 || u.Stats().SlowClosed != 1 {
				t.Fatalf("closed %d times, SlowClosed %d: want once", sc.closes, u.Stats().SlowClosed)
			}
			if len(c.errs) != 1 || !errors.Is(c.errs[0], backend.ErrUpstreamUnavailable) {
				t.Fatalf("the call in flight ended %v, want UPSTREAM_UNAVAILABLE", c.errs)
			}
		})
	}
}
