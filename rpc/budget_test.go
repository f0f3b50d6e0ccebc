package rpc

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// checkBudget requires the events the session's subscriptions buffer to stay
// within the connection's budget.
func (h *subHarness) checkBudget() {
	h.t.Helper()
	if b := h.sess.budget; b != nil && b.held.Load()+int64(h.sink.pending) > b.limit {
		h.fatalf("buffered %d + pending %d bytes, budget %d", b.held.Load(), h.sink.pending, b.limit)
	}
}

// TestConnectionBudgetBoundsEveryBuffer is the regression test of a client
// that subscribes and never reads (hardening issue, item 2): every
// subscription used to buffer up to its own 16 MiB, 256 of them per
// connection. Now the events of all of a connection's subscriptions and its
// pending output share one budget, the hard cap (CONTRACT.md section 6):
// with a budget of 100 bytes and per-subscription caps far above it, five
// 20-byte events of s1 fill it, the first event of s2 is refused and ends s2
// SLOW_CONSUMER while s1 is untouched, and an answer written while the
// budget is full first ends s1, which holds the buffered events, so that the
// answer fits. Before the fix s2's event was buffered and nothing ended.
func TestConnectionBudgetBoundsEveryBuffer(t *testing.T) {
	h := newSubHarness(t, subOpts{limit: 100})
	h.step("two live subscriptions")
	a, b := h.twoLive()

	h.step("a reader that stopped reading: s1 fills the budget")
	h.sink.writable = false
	for n := 1; n <= 5; n++ {
		if !a.tick(n) {
			h.fatalf("Emit %d of s1 refused with %d bytes buffered", n, 20*(n-1))
		}
		h.checkBudget()
	}
	h.step("s2's first event does not fit: s2 ends SLOW_CONSUMER, s1 keeps its events")
	if b.tick(1) {
		h.fatalf("Emit of s2 accepted over the connection budget")
	}
	h.checkBudget()
	h.apply()
	h.expect(subClosedMsg("s2", "SLOW_CONSUMER", ""))
	b.expectCancelled(true)
	a.expectCancelled(false)
	h.expectStats(0, 2, 1)

	h.step("an answer while the budget is full: s1 is ended to make room")
	h.send(req(`"g"`, "get", `{}`))
	h.apply()
	h.expect(subClosedMsg("s1", "SLOW_CONSUMER", ""), resultReply(`"g"`, "null"))
	a.expectCancelled(true)
	if held := h.sess.budget.held.Load(); held != 0 {
		h.fatalf("%d bytes still held after every subscription ended", held)
	}
	a.exitOnCancel()
	b.exitOnCancel()
	h.apply()
	h.expectStats(0, 0, 0)
}

// TestPacedProducerWaitsForConnectionBudget: a producer paced by its
// consumer (EmitWait) is not run while the connection's budget has no room,
// even though its own buffer does, and runs again as soon as the loop hands
// buffered events to the socket (hardening issue, item 2: producers stop
// being scheduled when their subscription cannot buffer more). Before the
// fix its EmitWait returned at once and the events piled up.
func TestPacedProducerWaitsForConnectionBudget(t *testing.T) {
	h := newSubHarness(t, subOpts{limit: 60})
	a, b := h.twoLive()

	h.step("the connection stops taking events: 60 bytes buffered")
	h.sink.writable = false
	a.tick(1)
	a.tick(2)
	if !subRecv(h, b.emitWaitAsync(1), "EmitWait with room") {
		h.fatalf("EmitWait with room returned false")
	}
	h.checkBudget()

	h.step("the next EmitWait parks")
	done := b.emitWaitAsync(2)
	h.poll("the producer to wait for the budget", func() bool { return h.sess.budget.nwait.Load() == 1 })
	select {
	case ok := <-done:
		h.fatalf("EmitWait returned %v over the connection budget", ok)
	default:
	}
	h.apply()
	h.expectNothing()
	h.checkBudget()

	h.step("the socket takes the events: the producer runs again")
	h.sink.writable = true
	h.sess.Resume()
	h.expect(subEventMsg("s1", 1), subEventMsg("s1", 2), subEventMsg("s2", 1))
	if !subRecv(h, done, "EmitWait after room was freed") {
		h.fatalf("EmitWait returned false after room was freed")
	}
	h.apply()
	h.expect(subEventMsg("s2", 2))
	h.checkBudget()
}

// TestFreeTasksBoundedByBytes: the tasks a session keeps for reuse are
// bounded by the bytes of their buffers, not only by count (hardening issue,
// item 9): 64 pipelined echoes of 40 KiB used to leave 64 tasks with 80 KiB
// of buffers each on the session, 5 MiB per connection for 2 s after the
// burst. Small requests still reuse their tasks and buffers.
func TestFreeTasksBoundedByBytes(t *testing.T) {
	pool := backend.NewPool(4096, time.Minute)
	defer pool.Close()
	srv, err := NewServer(Config{Handler: benchHandler{}, Pool: pool, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	post := &queuePoster{turn: srv.NewTurn()}
	s := srv.NewSession(WebSocket, &countSink{}, post)
	round := func(size int) {
		t.Helper()
		pad := strings.Repeat("x", size)
		msgs := make([][]byte, 64)
		for i := range msgs {
			msgs[i] = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"edge/echo","params":{"p":%q}}`, i, pad)
		}
		runPipelined(t, s, post, msgs)
	}
	kept := func() (n, bytes int) {
		for _, t := range s.free {
			bytes += t.bufBytes()
		}
		return len(s.free), bytes
	}
	round(40 << 10)
	if n, b := kept(); b > sessionFreeBytes || b != s.freeBytes {
		t.Fatalf("after 64 x 40 KiB: %d free tasks keep %d bytes (counted %d), bound %d", n, b, s.freeBytes, sessionFreeBytes)
	}
	round(16)
	if n, _ := kept(); n != sessionFreeTasks {
		t.Fatalf("after 64 small echoes: %d free tasks, want %d", n, sessionFreeTasks)
	}
}

// twoLive establishes subscriptions s1 (request "a") and s2 (request "b")
// and returns their producers.
func (h *subHarness) twoLive() (a, b *subProducer) {
	h.t.Helper()
	a = h.subscribe(`"a"`)
	a.establish(subResult("s1"))
	b = h.subscribe(`"b"`)
	b.establish(subResult("s2"))
	h.apply()
	h.expect(resultReply(`"a"`, subResult("s1")), resultReply(`"b"`, subResult("s2")))
	return a, b
}

// TestTransportClosingDuringDeliveryDoesNotDeadlock: a transport may end the
// session from inside Send (loop's conn closes at its hard cap, which runs
// Session.Close). Delivering buffered events used to hold the stream's lock
// across Send, and Close takes that lock to drop the stream's events: the
// loop deadlocked on itself (found with --outbound-soft-bytes equal to
// --outbound-hard-bytes). Now the lock is not held across Send: the delivery
// stops at the close and the session is closed.
func TestTransportClosingDuringDeliveryDoesNotDeadlock(t *testing.T) {
	h := newSubHarness(t, subOpts{limit: 1 << 20})
	a, _ := h.twoLive()
	h.sink.writable = false
	for n := 1; n <= 4; n++ {
		a.tick(n)
	}
	h.apply()
	sent := 0
	h.sink.onSend = func() {
		if sent++; sent == 2 {
			h.sink.writable = false
			h.sess.Close()
		}
	}
	h.sink.writable = true
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.sess.Resume()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Resume did not return: the loop deadlocked on the stream's lock")
	}
	if sent != 2 {
		t.Fatalf("%d events handed to the transport, want delivery to stop at its close (2)", sent)
	}
	if !h.sess.closed {
		t.Fatal("session not closed")
	}
	a.exitOnCancel()
}
