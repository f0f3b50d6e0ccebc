package rpc

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Script tests of subscriptions (CONTRACT.md sections 2.3, 2.5, 3, 5 and 6),
// on the harness of subscription_harness_test.go. Each names the naive
// implementation it catches.

// TestSubscriptionCancelWhileEstablishing: subscription/cancel of "s1"
// arrives while the producer has not established yet. The subscription is
// registered before dispatch, so the cancel finds it: the producer's ctx is
// cancelled at once and Emit is refused. The establishing request still gets
// exactly one answer when the producer establishes anyway, and neither an
// event nor subscription/closed follows; its id is held until then and its
// slot until the producer has returned, then the session is back to zero.
//
// Catches a session that registers the subscription only when Establish is
// applied (the cancel is an unknown-id no-op, the ctx stays live and events
// flow), one that forgets the request once its subscription is cancelled (no
// answer at all), one that owes and later writes subscription/closed for it,
// and one that frees the slot at the cancel while the producer still runs.
func TestSubscriptionCancelWhileEstablishing(t *testing.T) {
	t.Run("subProducer establishes anyway", func(t *testing.T) {
		h := newSubHarness(t, subOpts{})
		h.step("subscribe 1")
		p := h.subscribe("1")
		h.expectNothing()
		h.expectStats(1, 1, 1)

		h.step("subscription/cancel s1 while establishing")
		h.send(subCancelMsg("s1"))
		h.expectNothing()
		p.expectCancelled(true)
		h.expectStats(1, 1, 0) // id until answered, slot until the producer returns

		h.step("duplicate id while the establishment is pending")
		h.send(req("1", "edge/echo", `{}`))
		h.expect(duplicateReply("1"))

		h.step("subProducer establishes after the cancel, then emits")
		p.establish(subResult("s1"))
		if p.tick(1) {
			h.fatalf("Emit accepted after the subscription was cancelled")
		}
		h.apply()
		h.expect(resultReply("1", subResult("s1")))
		h.expectNothing()
		h.expectStats(0, 1, 0)

		h.step("id free for reuse once answered")
		h.send(req("1", "edge/echo", `{"again":1}`))
		h.apply()
		h.expect(resultReply("1", `{"again":1}`))

		h.step("subProducer returns")
		p.exit(nil)
		h.expectStats(0, 1, 0)
		h.apply()
		h.expectNothing()
		h.expectStats(0, 0, 0)
		h.poll("pool running == 0", func() bool { return h.pool.Running() == 0 })
	})

	// The producer honours its cancelled ctx before establishing. The
	// session treats the request as a cancelled one (CONTRACT.md section 4:
	// nothing with cancel-reply none, one -32800 with cancel-reply error).
	// Section 5 says an establishing request gets exactly one response, and
	// section 7 allows -32800 only with cancel-reply error, so with none the
	// contract has no answer to give; this pins the implementation's reading.
	for _, cr := range []CancelReply{CancelReplyNone, CancelReplyError} {
		t.Run("subProducer returns without establishing, cancel-reply "+cr.String(), func(t *testing.T) {
			h := newSubHarness(t, subOpts{cancelReply: cr})
			h.step("subscribe 1, cancel s1")
			p := h.subscribe("1")
			h.send(subCancelMsg("s1"))
			h.expectNothing()
			p.expectCancelled(true)

			h.step("subProducer returns ctx.Err()")
			p.exitOnCancel()
			h.expectStats(1, 1, 0)
			h.apply()
			if cr == CancelReplyError {
				h.expect(cancelledReply("1"))
			}
			h.expectNothing()
			h.expectStats(0, 0, 0)

			h.step("the next subscription is s2 and works")
			p2 := h.subscribe("1")
			p2.establish(subResult("s2"))
			p2.tick(1)
			h.apply()
			h.expect(resultReply("1", subResult("s2")), subEventMsg("s2", 1))
		})
	}
}

// TestSubscriptionResponseBeforeEvents: the producer establishes and emits
// three events before the loop has applied anything. When the loop runs, the
// response comes first, then the events in order. Until then the request
// still holds its id (a duplicate is rejected); afterwards the id is free.
//
// Catches a session that writes events as they are posted (or drains events
// before the establishment result of the same stream), and one that releases
// the id at Establish time on the worker instead of on the loop.
func TestSubscriptionResponseBeforeEvents(t *testing.T) {
	h := newSubHarness(t, subOpts{})
	h.step("subscribe 7")
	p := h.subscribe("7")

	h.step("establish and emit before the loop applies")
	p.establish(subResult("s1"))
	for n := 1; n <= 3; n++ {
		if !p.tick(n) {
			h.fatalf("Emit %d refused on a live subscription", n)
		}
	}
	h.expectNothing()
	h.send(req("7", "edge/echo", `{}`))
	h.expect(duplicateReply("7"))
	h.expectStats(1, 1, 1)

	h.step("loop applies")
	h.apply()
	h.expect(resultReply("7", subResult("s1")), subEventMsg("s1", 1), subEventMsg("s1", 2), subEventMsg("s1", 3))
	h.expectNothing()
	h.expectStats(0, 1, 1)

	h.step("id 7 reusable while the subscription lives")
	h.send(req("7", "edge/echo", `{"u":1}`))
	h.apply()
	h.expect(resultReply("7", `{"u":1}`))

	h.step("subProducer done: closed done after the last event")
	p.tick(4)
	p.exit(nil)
	h.apply()
	h.expect(subEventMsg("s1", 4), subClosedMsg("s1", "done", tickCursor(4)))
	h.expectStats(0, 0, 0)
}

// TestSubscriptionEventsAfterCancelDropped: once subscription/cancel is
// processed, Emit returns false and nothing more reaches the socket; the
// producer is cancelled, and when it returns no subscription/closed is sent
// and its slot is freed. An event emitted before the cancel but not yet
// written may still arrive (at most one, CONTRACT.md section 5).
//
// Catches a cancel that only cancels the producer's ctx and lets the stream
// keep accepting and delivering events until the producer notices, and one
// that sends subscription/closed for a client cancel.
func TestSubscriptionEventsAfterCancelDropped(t *testing.T) {
	h := newSubHarness(t, subOpts{})
	h.step("live subscription with one event delivered")
	p := h.subscribe("1")
	p.establish(subResult("s1"))
	p.tick(1)
	h.apply()
	h.expect(resultReply("1", subResult("s1")), subEventMsg("s1", 1))

	h.step("event 2 emitted, not yet written; then subscription/cancel")
	if !p.tick(2) {
		h.fatalf("Emit 2 refused on a live subscription")
	}
	h.send(subCancelMsg("s1"))
	h.expectNothing()
	p.expectCancelled(true)
	h.expectStats(0, 1, 0)

	h.step("subProducer keeps emitting after the cancel")
	for n := 3; n <= 5; n++ {
		if p.tick(n) {
			h.fatalf("Emit %d accepted after subscription/cancel", n)
		}
	}
	h.apply()
	if u := h.sink.unread(); len(u) > 1 || len(u) == 1 && u[0] != subEventMsg("s1", 2) {
		h.fatalf("after the cancel: %q, want at most the in-flight event 2", u)
	}
	h.sink.read = len(h.sink.msgs)

	h.step("subProducer returns")
	p.exitOnCancel()
	h.apply()
	h.expectNothing()
	h.expectStats(0, 0, 0)

	h.step("cancel again and unknown ids: no-ops")
	h.send(subCancelMsg("s1"))
	h.send(subCancelMsg("s9"))
	h.expectNothing()
}

// TestCancelRequestOfSubscriptionIsNoop: $/cancelRequest naming the id of a
// request that is establishing a subscription is a silent no-op (CONTRACT.md
// section 4): nothing is sent (also with cancel-reply error), the producer's
// ctx stays live, the id stays reserved, and the subscription then
// establishes and delivers normally. Once established the id is released, so
// a later $/cancelRequest of it is an unknown id, also a no-op.
//
// Catches a cancel path that does not tell unary from subscription requests
// (it cancels the producer, frees the id and suppresses the response, or
// answers -32800).
func TestCancelRequestOfSubscriptionIsNoop(t *testing.T) {
	for _, cr := range []CancelReply{CancelReplyNone, CancelReplyError} {
		t.Run("cancel-reply "+cr.String(), func(t *testing.T) {
			h := newSubHarness(t, subOpts{cancelReply: cr})
			h.step("subscribe 5, $/cancelRequest 5 while establishing")
			p := h.subscribe("5")
			h.send(cancelMsg("5"))
			h.expectNothing()
			p.expectCancelled(false)
			h.expectStats(1, 1, 1)
			h.send(req("5", "edge/echo", `{}`))
			h.expect(duplicateReply("5"))

			h.step("establishes and delivers")
			p.establish(subResult("s1"))
			p.tick(1)
			h.apply()
			h.expect(resultReply("5", subResult("s1")), subEventMsg("s1", 1))

			h.step("$/cancelRequest 5 once established")
			h.send(cancelMsg("5"))
			h.expectNothing()
			p.expectCancelled(false)
			if !p.tick(2) {
				h.fatalf("Emit refused after a $/cancelRequest")
			}
			p.exit(nil)
			h.apply()
			h.expect(subEventMsg("s1", 2), subClosedMsg("s1", "done", tickCursor(2)))
			h.expectStats(0, 0, 0)
		})
	}
}

// TestUntrackedSubscriptionMethodNotFound: an envelope naming a subscription
// method that is not a tracked request (a member twice, or params missing)
// takes the unary path and gets -32601 Method not found (CONTRACT.md section
// 2.5); no producer runs, no subscription id is used up, no slot is held.
//
// Catches a session that routes by the method's kind before checking that
// the request is tracked: it would establish a subscription whose request id
// takes no part in duplicate admission.
func TestUntrackedSubscriptionMethodNotFound(t *testing.T) {
	tests := []struct {
		name, msg, want string
	}{
		{"id twice", `{"jsonrpc":"2.0","id":5,"id":5,"method":"` + subMethod + `","params":{}}`,
			errorReply("5", -32601, "Method not found", "")},
		{"method twice", `{"jsonrpc":"2.0","id":"m","method":"` + subMethod + `","method":"` + subMethod + `","params":{}}`,
			errorReply(`"m"`, -32601, "Method not found", "")},
		{"params missing", `{"jsonrpc":"2.0","id":6,"method":"` + subMethod + `"}`,
			errorReply("6", -32601, "Method not found", "")},
		{"params twice, not an object", `{"jsonrpc":"2.0","id":7,"method":"` + parkMethod + `","params":1,"params":[]}`,
			errorReply("7", -32601, "Method not found", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newSubHarness(t, subOpts{})
			h.step("send untracked")
			h.send(tt.msg)
			h.expect(tt.want)
			h.expectNothing()
			h.expectStats(0, 0, 0)
			select {
			case <-h.be.arrived:
				h.fatalf("Subscribe was called")
			default:
			}
			if n := h.be.parked.Load(); n != 0 {
				h.fatalf("Subscribe of %s was called %d times", parkMethod, n)
			}
			h.step("the next tracked subscription is s1")
			p := h.subscribe("1")
			p.establish(subResult(p.s.ID()))
			h.apply()
			h.expect(resultReply("1", subResult("s1")))
		})
	}
}

// TestSubscriptionOverflowSlowConsumer: with SubscriptionBuffer 4 and a
// connection over its soft cap (sink not Writable), four events wait and the
// fifth Emit overflows: it returns false, the producer is cancelled, and the
// subscription is closed SLOW_CONSUMER with lastDeliveredCursor of the last
// event actually written (omitted when none was). The buffered events are
// dropped. A second subscription and unary calls on the same session are
// unaffected: the unary answer is written at once, the other subscription's
// held event flows when the connection is writable again (Resume).
//
// Catches an unbounded buffer (the fifth Emit is accepted), an overflow that
// reports the cursor of the last event emitted or buffered instead of the
// last one delivered, one that writes "null" or an empty cursor when none was
// delivered, and one that closes the connection or every subscription.
func TestSubscriptionOverflowSlowConsumer(t *testing.T) {
	tests := []struct {
		name      string
		delivered int    // events written before the connection stops being writable
		cursor    string // expected lastDeliveredCursor
	}{
		{"none delivered", 0, ""},
		{"two delivered", 2, tickCursor(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newSubHarness(t, subOpts{buffer: 4})
			h.step("two live subscriptions")
			a := h.subscribe(`"a"`)
			a.establish(subResult("s1"))
			b := h.subscribe(`"b"`)
			b.establish(subResult("s2"))
			h.apply()
			h.expect(resultReply(`"a"`, subResult("s1")), resultReply(`"b"`, subResult("s2")))
			for n := 1; n <= tt.delivered; n++ {
				a.tick(n)
			}
			h.apply()
			for n := 1; n <= tt.delivered; n++ {
				h.expect(subEventMsg("s1", n))
			}

			h.step("connection over its soft cap: events wait")
			h.sink.writable = false
			for n := tt.delivered + 1; n <= tt.delivered+4; n++ {
				if !a.tick(n) {
					h.fatalf("Emit %d refused with %d of 4 buffered", n, n-tt.delivered-1)
				}
			}
			b.tick(1)
			h.apply()
			h.expectNothing()

			h.step("unary call answered while events wait")
			h.send(req("9", "edge/echo", `{"x":1}`))
			h.apply()
			h.expect(resultReply("9", `{"x":1}`))

			h.step("fifth buffered event overflows")
			if a.tick(tt.delivered + 5) {
				h.fatalf("Emit accepted past SubscriptionBuffer")
			}
			if a.tick(tt.delivered + 6) {
				h.fatalf("Emit accepted after overflow")
			}
			h.apply()
			h.expect(subClosedMsg("s1", "SLOW_CONSUMER", tt.cursor))
			h.expectNothing()
			a.expectCancelled(true) // by the loop, when it applied the overflow
			b.expectCancelled(false)
			h.expectStats(0, 2, 1)

			h.step("subProducer of s1 returns: its slot is freed")
			a.exit(nil)
			h.apply()
			h.expectNothing()
			h.expectStats(0, 1, 1)

			h.step("writable again: s2 flows")
			h.sink.writable = true
			h.sess.Resume()
			h.expect(subEventMsg("s2", 1))
			b.tick(2)
			h.apply()
			h.expect(subEventMsg("s2", 2))
			b.exit(nil)
			h.apply()
			h.expect(subClosedMsg("s2", "done", tickCursor(2)))
			h.expectStats(0, 0, 0)
		})
	}
}

// TestSubscriptionOverflowBytes: SubscriptionBufferBytes bounds the buffered
// bytes as well as the count: with room for 100 body bytes, two 40-byte
// events wait and the third overflows, although the count limit (1024) is
// far away. Catches a buffer bounded by event count only.
func TestSubscriptionOverflowBytes(t *testing.T) {
	h := newSubHarness(t, subOpts{bufferBytes: 100})
	p := h.subscribe("1")
	p.establish(subResult("s1"))
	h.apply()
	h.expect(resultReply("1", subResult("s1")))
	h.sink.writable = false
	body := func(n int) string { // 40 bytes
		b := `"cursor":"` + strconv.Itoa(n) + `","pad":"`
		for len(b) < 39 {
			b += "x"
		}
		return b + `"`
	}
	for n := 1; n <= 2; n++ {
		if !p.emit(tickCursor(n), body(n)) {
			h.fatalf("Emit %d refused with %d bytes buffered", n, 40*(n-1))
		}
	}
	if p.emit(tickCursor(3), body(3)) {
		h.fatalf("Emit accepted past SubscriptionBufferBytes")
	}
	h.apply()
	h.expect(subClosedMsg("s1", "SLOW_CONSUMER", ""))
	p.exit(nil)
	h.apply()
	h.expectNothing()
	h.expectStats(0, 0, 0)
}

// TestEndSubscriptionsWhileEstablishing: graceful shutdown ends the
// subscriptions (EndSubscriptions) while one is still establishing. The
// request was not cancelled by its client, so CONTRACT.md section 9 ("every
// tracked request gets its response, an error, or (if cancelled) nothing")
// owes it exactly one answer: the result followed by subscription/closed
// "done" when the producer establishes anyway, and an error when the
// producer, seeing its ctx cancelled, returns without establishing.
//
// Catches a session that handles a subscription ended by the server like one
// cancelled by the client (subscription/cancel, which sends nothing): the
// request is silently lost.
func TestEndSubscriptionsWhileEstablishing(t *testing.T) {
	t.Run("subProducer establishes anyway", func(t *testing.T) {
		h := newSubHarness(t, subOpts{})
		p := h.subscribe("1")
		h.step("EndSubscriptions")
		h.sess.EndSubscriptions()
		h.expectNothing()
		p.expectCancelled(true)
		h.step("subProducer establishes")
		p.establish(subResult("s1"))
		h.apply()
		h.expect(resultReply("1", subResult("s1")), subClosedMsg("s1", "done", ""))
		p.exit(nil)
		h.apply()
		h.expectNothing()
		h.expectStats(0, 0, 0)
	})
	t.Run("subProducer returns ctx.Err()", func(t *testing.T) {
		h := newSubHarness(t, subOpts{})
		p := h.subscribe("1")
		h.step("EndSubscriptions")
		h.sess.EndSubscriptions()
		h.expectNothing()
		h.step("subProducer returns without establishing")
		p.exitOnCancel()
		h.apply()
		u := h.sink.unread()
		if len(u) != 1 || !strings.HasPrefix(u[0], `{"jsonrpc":"2.0","id":1,"error":`) {
			h.fatalf("answers %q, want exactly one error for request 1 (e.g. -32000 SERVER_SHUTTING_DOWN)", u)
		}
		h.sink.read++
		h.expectStats(0, 0, 0)
	})
}

// TestDoneWaitsForHeldEvents: the producer returns while its events wait
// for the connection (not Writable). "done" is owed only once every buffered
// event is out, and the slot is held until then; when the transport calls
// Resume the events go out in order, then subscription/closed "done" with
// the last cursor, and the slot is freed.
//
// Catches a session that ends the subscription when the producer returns
// (dropping the buffered events or sending "done" before them), and one that
// frees the slot before the subscription ended.
func TestDoneWaitsForHeldEvents(t *testing.T) {
	h := newSubHarness(t, subOpts{})
	p := h.subscribe("1")
	p.establish(subResult("s1"))
	h.apply()
	h.expect(resultReply("1", subResult("s1")))
	h.step("events held, subProducer returns")
	h.sink.writable = false
	for n := 1; n <= 3; n++ {
		p.tick(n)
	}
	p.exit(nil)
	h.apply()
	h.expectNothing()
	h.expectStats(0, 1, 1)
	h.step("Resume while still not writable")
	h.sess.Resume()
	h.expectNothing()
	h.step("writable: Resume")
	h.sink.writable = true
	h.sess.Resume()
	h.expect(subEventMsg("s1", 1), subEventMsg("s1", 2), subEventMsg("s1", 3), subClosedMsg("s1", "done", tickCursor(3)))
	h.expectStats(0, 0, 0)
	h.sess.Resume()
	h.expectNothing()
}

// TestLiveSubscriptionHoldsSlot: a live subscription keeps its task slot
// until it ends (CONTRACT.md section 3.3). With MaxConnTasks 1, requests
// while it lives get SERVER_BUSY (and their ids are released); after
// subscription/cancel the slot stays taken until the producer has returned,
// then the next request is admitted.
//
// Catches a session that frees the slot when the subscription is answered
// (its work is unbounded) or at the cancel (the producer still runs).
func TestLiveSubscriptionHoldsSlot(t *testing.T) {
	h := newSubHarness(t, subOpts{maxConnTasks: 1})
	p := h.subscribe("1")
	p.establish(subResult("s1"))
	h.apply()
	h.expect(resultReply("1", subResult("s1")))
	h.step("busy while live")
	h.send(req("2", "edge/echo", `{}`))
	h.expect(busyReply("2"))
	h.send(req("3", subMethod, `{}`))
	h.expect(busyReply("3"))
	h.expectStats(0, 1, 1)
	h.step("busy after the cancel, until the subProducer returns")
	h.send(subCancelMsg("s1"))
	h.send(req("2", "edge/echo", `{}`))
	h.expect(busyReply("2"))
	p.exitOnCancel()
	h.apply()
	h.expectNothing()
	h.expectStats(0, 0, 0)
	h.step("admitted once the slot is free")
	h.send(req("2", "edge/echo", `{}`))
	h.apply()
	h.expect(resultReply("2", `{}`))
}

// TestCloseWithThousandSubscriptions: a session with 1,000 live subscriptions
// (producers parked on ctx.Done, like watch) is closed. Every producer is
// cancelled and returns exactly once; the slots stay held until their
// returns are applied, then all are free; nothing is sent after the close;
// the pool's global count is back to 0 and, once the pool is closed, so is
// the goroutine count to its baseline (no producer or worker leaks).
//
// Catches a Close that drops the subscriptions without cancelling their
// producers (they never return: the watchdog fires), one that frees the
// slots at the close while the producers still run, and one that answers or
// notifies on a closed connection.
func TestCloseWithThousandSubscriptions(t *testing.T) {
	const n = 1000
	baseline := runtime.NumGoroutine()
	h := newSubHarness(t, subOpts{maxConnTasks: 1024})

	h.step("establish %d subscriptions", n)
	for i := 1; i <= n; i++ {
		h.sess.HandleMessage([]byte(req(strconv.Itoa(i), parkMethod, `{}`)))
	}
	h.awaitQueued(n) // each producer's Establish posted its stream
	h.apply()
	// Producers establish in any order; each request gets its own id.
	want := make(map[string]bool, n)
	for i := 1; i <= n; i++ {
		want[resultReply(strconv.Itoa(i), subResult("s"+strconv.Itoa(i)))] = true
	}
	for _, m := range h.sink.unread() {
		if !want[m] {
			h.fatalf("unexpected or repeated message %s", m)
		}
		delete(want, m)
	}
	h.sink.read = len(h.sink.msgs)
	if len(want) > 0 {
		h.fatalf("%d subscriptions not answered", len(want))
	}
	h.expectStats(0, n, n)
	if got := h.be.parked.Load(); got != n {
		h.fatalf("%d producers running, want %d", got, n)
	}

	h.step("close the session")
	h.sess.Close()
	h.expectNothing()
	h.expectStats(0, n, 0) // slots are held until the producers have returned

	h.step("every subProducer returns")
	h.awaitQueued(n)
	h.apply()
	h.expectNothing()
	h.expectStats(0, 0, 0)
	if got := h.be.returned.Load(); got != n {
		h.fatalf("%d producers returned, want %d", got, n)
	}
	h.poll("pool running == 0", func() bool { return h.pool.Running() == 0 })

	h.step("pool closed: goroutines back to baseline")
	h.pool.Close()
	deadline := time.Now().Add(h.limit)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			h.hang("goroutines back to " + strconv.Itoa(baseline))
		}
		runtime.Gosched()
	}
	if got := h.be.returned.Load(); got != n {
		h.fatalf("%d producers returned, want exactly %d", got, n)
	}
}
