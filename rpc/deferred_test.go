package rpc

import (
	"testing"

	"github.com/openengine/edge/codec"
)

// deferSink is the subSink of a transport that frames events at its write
// (DeferringSink), as the loop's connections do: DeferEvents is counted for
// the harness's flush, SendEvent records the event as Send records a
// message, and refuses it while the sink is not writable, or when it would
// take the written events past hard bytes (hard > 0), as the loop's
// connection refuses one over its hard cap.
type deferSink struct {
	*subSink
	deferred int // DeferEvents calls since the last SendEvents
	hard     int // when > 0: the bytes of events SendEvent takes in all
	taken    int // bytes of events taken
	capped   int // events refused over hard
}

func (s *deferSink) DeferEvents() { s.deferred++ }

func (s *deferSink) SendEvent(head string, id, members []byte) bool {
	if !s.writable {
		return false
	}
	ev := codec.AppendEventWith(nil, head, id, members)
	if s.hard > 0 && s.taken+len(ev) > s.hard {
		s.capped++
		return false
	}
	s.taken += len(ev)
	s.msgs = append(s.msgs, string(ev))
	return true
}

// TestDeferredEvents runs the subscription tests with a DeferringSink, then
// checks what is particular to it: events delivered in a turn are written
// at its end (SendEvents), in order, and ahead of any answer or
// notification the session sends after them; the soft cap holds them back
// until Resume and a refusal at the hard cap keeps them; none is lost or
// written twice.
func TestDeferredEvents(t *testing.T) {
	deferAll = true
	for _, tt := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"ResponseBeforeEvents", TestSubscriptionResponseBeforeEvents},
		{"EventsAfterCancelDropped", TestSubscriptionEventsAfterCancelDropped},
		{"CancelWhileEstablishing", TestSubscriptionCancelWhileEstablishing},
		{"OverflowSlowConsumer", TestSubscriptionOverflowSlowConsumer},
		{"OverflowBytes", TestSubscriptionOverflowBytes},
		{"EndSubscriptionsWhileEstablishing", TestEndSubscriptionsWhileEstablishing},
		{"DoneWaitsForHeldEvents", TestDoneWaitsForHeldEvents},
		{"LiveSubscriptionHoldsSlot", TestLiveSubscriptionHoldsSlot},
		{"CloseWithThousandSubscriptions", TestCloseWithThousandSubscriptions},
		{"ConnectionBudgetBoundsEveryBuffer", TestConnectionBudgetBoundsEveryBuffer},
		{"PacedProducerWaitsForConnectionBudget", TestPacedProducerWaitsForConnectionBudget},
	} {
		t.Run(tt.name, tt.f)
	}
	deferAll = false

	t.Run("OrderWithAnswers", func(t *testing.T) {
		h := newSubHarness(t, subOpts{deferring: true})
		a, b := h.twoLive()
		h.step("events delivered, then an answer in the same turn")
		a.tick(1)
		a.tick(2)
		b.tick(1)
		h.send(req("9", "edge/echo", `{"x":1}`)) // its completion is queued after the streams
		h.pull()
		q := h.queue
		h.queue = nil
		for _, c := range q {
			c.Apply()
		}
		if h.dsink.deferred != 1 {
			h.fatalf("DeferEvents called %d times in the turn, want 1", h.dsink.deferred)
		}
		// The answer went out through Send, the events ahead of it.
		h.expect(subEventMsg("s1", 1), subEventMsg("s1", 2), subEventMsg("s2", 1), resultReply("9", `{"x":1}`))
		h.expectNothing()

		h.step("done after its events, in the write that ends the turn")
		a.tick(3)
		a.exit(nil)
		h.apply()
		h.expect(subEventMsg("s1", 3), subClosedMsg("s1", "done", tickCursor(3)))
		h.expectNothing()
	})

	t.Run("SoftCapNothingLost", func(t *testing.T) {
		h := newSubHarness(t, subOpts{deferring: true, buffer: 64})
		a, _ := h.twoLive()
		n := 0
		for round := range 6 {
			for range 5 {
				n++
				if !a.tick(n) {
					h.fatalf("Emit %d refused", n)
				}
			}
			// Every other turn ends over the soft cap: the events wait.
			h.sink.writable = round%2 == 1
			h.apply()
			if h.sink.writable {
				h.sess.Resume()
			}
		}
		h.sink.writable = true
		h.sess.Resume()
		for i := 1; i <= n; i++ {
			h.expect(subEventMsg("s1", i))
		}
		h.expectNothing()
		h.expectStats(0, 2, 2)
	})

	t.Run("HardCapKeepsEvents", func(t *testing.T) {
		h := newSubHarness(t, subOpts{deferring: true})
		a, _ := h.twoLive()
		one := len(subEventMsg("s1", 1))
		h.dsink.hard = 2*one + one/2 // room for two events
		for i := 1; i <= 4; i++ {
			a.tick(i)
		}
		h.apply()
		h.expect(subEventMsg("s1", 1), subEventMsg("s1", 2))
		h.expectNothing()
		if h.dsink.capped != 1 {
			h.fatalf("%d events refused at the hard cap, want 1 (then the transport closes)", h.dsink.capped)
		}
		h.step("the transport did not close: the rest goes on Resume")
		h.dsink.hard = 0
		h.sess.Resume()
		h.expect(subEventMsg("s1", 3), subEventMsg("s1", 4))
		h.expectNothing()
		if st := &h.sess.subs["s1"].st; st.n != 0 || st.bytes != 0 || h.sess.budget.held.Load() != 0 {
			h.fatalf("after every event was written: %d events, %d bytes buffered, budget holds %d", st.n, st.bytes, h.sess.budget.held.Load())
		}
	})
}
