package upstream

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

var allCallStates = []callState{callSent, callEstablishing, callDropped, callLive, callExpired, callOrphaned, callUnsubscribing, callEnded}

// entryIn puts an entry in state from on l, as the paths to it leave it:
// a subscription for the states only subscriptions reach, the call
// unfinished in the states that hold it, counted in flight where it is.
func entryIn(l *link, from callState) (*entry, *recCall) { return entryOf(l, from, "") }

// entryOf is entryIn for a subscription of namespace ns ("": OECP; else a
// plain one, whose upstream id is "u1").
func entryOf(l *link, from callState, ns string) (*entry, *recCall) {
	c := &recCall{method: "m"}
	var st backend.Stream
	if from != callSent {
		c.st = &recStream{id: "s1", ns: ns}
		st = c.st
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.calls.add(l.newID(), c, st, time.Now().UnixNano(), time.Now().Add(time.Minute).UnixNano())
	e.upSub = "u1"
	if ns != "" {
		e.upSub, _ = plainKey([]byte(`"u1"`), ns)
	}
	if from.inFlight() {
		l.inflight.Add(1)
	}
	switch from {
	case callLive:
		l.calls.unlink(e)
		l.calls.subs[e.upSub] = e
	case callExpired, callOrphaned, callUnsubscribing, callEnded:
		e.c = nil
		l.calls.lingering++
	}
	e.state = from
	return e, c
}

// TestCallTransitions: moveLocked allows exactly the transitions that
// callState's doc lists and panics on every other one, naming both states
// and leaving the entry as it was, so that a path that would, say, finish
// a timed-out call again or revive an ended entry stops there.
func TestCallTransitions(t *testing.T) {
	legal := map[[2]callState]bool{
		{callSent, callDropped}:         true,
		{callEstablishing, callDropped}: true,
		{callEstablishing, callLive}:    true,
		{callSent, callExpired}:         true,
		{callEstablishing, callExpired}: true,
		{callDropped, callExpired}:      true,
		{callDropped, callOrphaned}:     true,
		{callExpired, callOrphaned}:     true,
		{callSent, callEnded}:           true,
		{callEstablishing, callEnded}:   true,
		{callDropped, callEnded}:        true,
		{callLive, callEnded}:           true,
		{callExpired, callEnded}:        true,
		{callOrphaned, callEnded}:       true,
		{callLive, callUnsubscribing}:   true,
		{callUnsubscribing, callEnded}:  true,
	}
	for _, from := range allCallStates {
		for _, to := range allCallStates {
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				l := newLink(testUpstream(nil, Config{}), "t", nil, false)
				l.open()
				e, c := entryOf(l, from, "eth")
				ok := legal[[2]callState{from, to}]
				var got any
				l.mu.Lock()
				func() {
					defer func() { got = recover() }()
					l.moveLocked(e, to, byAnswer, nil, nil).do()
				}()
				l.mu.Unlock()
				switch {
				case ok && got != nil:
					t.Fatalf("legal transition panicked: %v", got)
				case ok && to == callEnded && (l.calls.len() != 0 || e.state != callEnded):
					t.Fatalf("ended entry still in the table (state %s)", e.state)
				case ok && to != callEnded && e.state != to:
					t.Fatalf("state %s after the transition, want %s", e.state, to)
				case ok && from.holdsCall() != to.holdsCall() && len(c.errs) != 1:
					t.Fatalf("the call finished %d times, want once", len(c.errs))
				case ok && from.holdsCall() == to.holdsCall() && len(c.errs) != 0:
					t.Fatalf("the call finished %d times, want not at all", len(c.errs))
				case ok && l.inFlightHere() != map[bool]int64{true: 1}[to.inFlight()]:
					t.Fatalf("%d in flight after the transition", l.inFlightHere())
				case !ok && got == nil:
					t.Fatalf("illegal transition accepted (state now %s)", e.state)
				case !ok:
					if msg, _ := got.(string); !strings.Contains(msg, from.String()+" -> "+to.String()) {
						t.Fatalf("panic %q does not name both states", got)
					}
					if e.state != from || len(c.errs) != 0 {
						t.Fatalf("state %s and %d finishes after a refused transition, want %s unchanged", e.state, len(c.errs), from)
					}
				}
			})
		}
	}
}

// TestCallEffects: what each kind of end of an entry tells the upstream (a
// ws link: $/cancelRequest for a unary call, subscription/cancel with the
// upstream's id), the outcome it counts and how it finishes the call.
func TestCallEffects(t *testing.T) {
	const (
		cancelReq = `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}`
		subCancel = `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"u1"}}`
		unsub     = `{"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe","params":["u1"]}`
	)
	for _, tt := range []struct {
		name    string
		ns      string // a plain subscription's namespace
		from    callState
		to      callState
		why     cause
		err     error
		wire    string // what the upstream is sent ("" nothing)
		outcome string // counted ("" none)
		finish  error  // the call's Finish error; nil: none or nil (see finished)
		fin     bool   // the call is finished
	}{
		{"cancelled unary", "", callSent, callDropped, byGateway, nil, cancelReq, "", nil, false},
		{"cancelled while establishing (ws has no request cancel)", "", callEstablishing, callDropped, byGateway, nil, "", "", nil, false},
		{"timed out", "", callSent, callExpired, byTimeout, backend.ErrUpstreamTimeout, cancelReq, "timeout", backend.ErrUpstreamTimeout, true},
		{"dropped times out", "", callDropped, callExpired, byTimeout, backend.ErrUpstreamTimeout, "", "cancelled", backend.ErrUpstreamTimeout, true},
		{"dropped answered", "", callDropped, callEnded, byAnswer, nil, "", "cancelled", backend.ErrUpstreamUnavailable, true},
		{"late establishment", "", callExpired, callOrphaned, byAnswer, nil, subCancel, "", nil, false},
		{"establishment after a cancel", "", callDropped, callOrphaned, byAnswer, nil, subCancel, "cancelled", backend.ErrUpstreamUnavailable, true},
		{"live cancelled by the client", "", callLive, callEnded, byGateway, nil, subCancel, "", nil, true},
		{"live closed by the upstream", "", callLive, callEnded, byUpstream, backend.ErrUpstreamLost, "", "", backend.ErrUpstreamLost, true},
		{"no responders", "", callSent, callEnded, byUpstream, backend.ErrUpstreamUnavailable, "", "unavailable", backend.ErrUpstreamUnavailable, true},
		{"link down", "", callEstablishing, callEnded, byDown, backend.ErrUpstreamUnavailable, "", "unavailable", backend.ErrUpstreamUnavailable, true},
		{"orphan forgotten", "", callOrphaned, callEnded, byForget, nil, "", "", nil, false},
		{"plain: late establishment", "eth", callExpired, callOrphaned, byAnswer, nil, unsub, "", nil, false},
		{"plain: establishment after a cancel", "eth", callDropped, callOrphaned, byAnswer, nil, unsub, "cancelled", backend.ErrUpstreamUnavailable, true},
		{"plain: live cancelled by the client", "eth", callLive, callUnsubscribing, byGateway, nil, unsub, "", nil, true},
		{"plain: live cancelled, no room to wait", "eth", callLive, callEnded, byGateway, nil, unsub, "", nil, true},
		{"plain: live lost", "eth", callLive, callEnded, byDown, backend.ErrUpstreamLost, "", "", backend.ErrUpstreamLost, true},
		{"plain: unsubscribe answered", "eth", callUnsubscribing, callEnded, byAnswer, nil, "", "", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := testUpstream(nil, Config{})
			l := newLink(u, "t", func(dst, msg []byte) []byte { return append(append(dst, msg...), '|') }, true)
			l.open()
			e, c := entryOf(l, tt.from, tt.ns)
			l.mu.Lock()
			f := l.moveLocked(e, tt.to, tt.why, nil, tt.err)
			l.mu.Unlock()
			f.do()
			if got := strings.TrimSuffix(string(l.Output()), "|"); got != tt.wire {
				t.Errorf("the upstream is sent %q, want %q", got, tt.wire)
			}
			st := u.Stats()
			counted := ""
			for i, n := range st.Outcomes {
				if n > 1 || n == 1 && counted != "" {
					t.Fatalf("outcomes %v: more than one count", st.Outcomes)
				}
				if n == 1 {
					counted = OutcomeLabel(i)
				}
			}
			if counted != tt.outcome {
				t.Errorf("counted %q, want %q", counted, tt.outcome)
			}
			if fin := len(c.errs) == 1; fin != tt.fin || fin && !errors.Is(c.errs[0], tt.finish) {
				t.Errorf("finished %v (%v), want %v (%v)", fin, c.errs, tt.fin, tt.finish)
			}
		})
	}
}

// TestFinishTwicePanics: the test calls panic on a second Finish, so
// every test of the package checks that a call ends exactly once.
func TestFinishTwicePanics(t *testing.T) {
	c := &recCall{method: "m"}
	c.Finish(nil, nil)
	defer func() {
		if recover() == nil {
			t.Fatal("a second Finish did not panic")
		}
	}()
	c.Finish(nil, nil)
}

// TestOrphanedSubscription: a subscription request that timed out and that
// the upstream establishes later is cancelled at the upstream with its id;
// its events are dropped and counted until the upstream closes it, and
// reach no stream; the entry is forgotten one timeout after the cancel.
func TestOrphanedSubscription(t *testing.T) {
	u := testUpstream(nil, Config{Timeout: time.Second})
	l := newLink(u, "t", nil, false)
	l.open()
	c := &recCall{method: "edge/ticks", st: &recStream{id: "s1"}}
	l.forward(c, 0)
	l.Output()
	now := time.Now().Add(2 * time.Second).UnixNano()
	l.sweep(now)
	if len(c.errs) != 1 || !errors.Is(c.errs[0], backend.ErrUpstreamTimeout) {
		t.Fatalf("finished %v, want UPSTREAM_TIMEOUT", c.errs)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"up-1"}}`))
	if got, want := string(l.Output()), `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"up-1"}}`+"\n"; got != want {
		t.Fatalf("sent %q, want %q", got, want)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"up-1","cursor":"1"}}`))
	l.handle([]byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"up-1","cursor":"2"}}`))
	if late, dropped := u.Late(), u.Dropped(); late != 1 || dropped != 2 {
		t.Fatalf("late %d, dropped %d; want 1, 2", late, dropped)
	}
	if len(c.st.events) != 0 || len(c.st.established) != 0 || len(c.errs) != 1 {
		t.Fatalf("the stream got %v %v, the call %v", c.st.established, c.st.events, c.errs)
	}
	l.sweep(now + int64(2*time.Second))
	if n := l.calls.len(); n != 0 || l.calls.lingering != 0 {
		t.Fatalf("%d entries (%d lingering) after the second timeout, want none", n, l.calls.lingering)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"up-1","cursor":"3"}}`))
	if d := u.Dropped(); d != 2 {
		t.Fatalf("dropped %d after the entry was forgotten, want 2 (an unknown subscription's event is ignored)", d)
	}
}

// TestSweepIsIndexed: the entries are kept in deadline order, also when
// calls arrive out of it (admitted by several loops), so that the sweep
// walks the due ones only (BenchmarkLinkSweep has its cost) and times out
// exactly those.
func TestSweepIsIndexed(t *testing.T) {
	u := testUpstream(nil, Config{Timeout: time.Minute})
	l := newLink(u, "t", nil, false)
	l.open()
	base := time.Now().UnixNano()
	calls := make([]*admittedCall, 10000)
	for i := range calls {
		// Admitted out of order by up to 5 ms, as calls from several loops.
		calls[i] = &admittedCall{recCall{method: "m"}, base + int64(i)*int64(time.Millisecond) - int64(i%5)*int64(time.Millisecond)}
		l.forward(calls[i], calls[i].at)
	}
	var prev int64
	n := 0
	for e := l.calls.head; e != nil; e = e.next {
		if e.deadline < prev {
			t.Fatalf("deadline order broken at entry %d", n)
		}
		prev = e.deadline
		n++
	}
	if n != len(calls) {
		t.Fatalf("%d entries in deadline order, want %d", n, len(calls))
	}
	l.sweep(base + int64(time.Minute))
	for i, c := range calls {
		due := c.at+int64(time.Minute) <= base+int64(time.Minute)
		if got := len(c.errs) == 1; got != due {
			t.Fatalf("call %d (admitted %d ns after the first) timed out: %v, want %v", i, c.at-base, got, due)
		}
	}
}
