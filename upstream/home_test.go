package upstream

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// countLoops is a Loops whose Run runs f at once and counts it.
type countLoops struct{ runs int }

func (c *countLoops) NumLoops() int                    { return 2 }
func (c *countLoops) Attach(int, net.Conn, Wire) error { return net.ErrClosed }
func (c *countLoops) Run(_ int, f func()) bool         { c.runs++; f(); return true }

// at is the origin of a call made on loop i of c.
func (c *countLoops) at(i int) backend.Origin { return backend.Origin{Loops: c, Loop: i} }

// placeLinks puts link k on loop k, as StartOn does, and opens them.
func placeLinks(u *Upstream, loops Loops, links ...*link) {
	p := newPlacement(loops)
	for k, l := range links {
		l.home, l.loops = k%len(p.byHome), loops
		p.byHome[l.home] = append(p.byHome[l.home], l)
		l.open()
	}
	u.links = links
	u.place.Store(p)
}

// TestForwardStaysOnItsLoop: a call from a session on loop i goes to a
// connection loop i owns, written there at once (no task posted to any
// loop), even when another loop's connection has fewer calls in flight; a
// call from no loop of these Loops (another gateway, edge --stdio) is
// posted to the owning loop, and so is its cancel; with loop i's
// connection down the call goes to another loop's through its queue.
func TestForwardStaysOnItsLoop(t *testing.T) {
	u := testUpstream(nil, Config{})
	loops := &countLoops{}
	l0, l1 := newLink(u, "l0", nil, false), newLink(u, "l1", nil, false)
	placeLinks(u, loops, l0, l1)

	for range 3 {
		u.Forward(&recCall{method: "m"}, loops.at(1))
	}
	if loops.runs != 0 || l1.calls.len() != 3 || l0.calls.len() != 0 {
		t.Fatalf("calls from loop 1: %d posted, %d on loop 1's link, %d on loop 0's; want 0, 3, 0",
			loops.runs, l1.calls.len(), l0.calls.len())
	}
	l1.Output() // loop 1's turn ends: its link's count is published
	if n := l1.inflight.Load(); n != 3 {
		t.Fatalf("other loops see %d calls in flight on loop 1's link after its turn, want 3", n)
	}
	tk := u.Forward(&recCall{method: "m"}, (&countLoops{}).at(1)) // another gateway's loop 1
	if loops.runs != 1 || l0.calls.len() != 1 {
		t.Fatalf("call from elsewhere: %d posted, %d on loop 0's link; want 1, 1", loops.runs, l0.calls.len())
	}
	tk.Cancel()
	if loops.runs != 2 || l0.calls.get(l0.lastID).state != callDropped {
		t.Fatalf("its cancel: %d posted (want 2), the call not marked dropped", loops.runs)
	}
	l1.fail()
	u.Forward(&recCall{method: "m"}, loops.at(1))
	if loops.runs != 3 || l0.calls.len() != 2 {
		t.Fatalf("loop 1's link down: %d posted, %d on loop 0's link; want 3, 2", loops.runs, l0.calls.len())
	}
	if n := l0.inflight.Load(); n != 2 {
		t.Fatalf("loop 0's link counts %d calls in flight, want 2", n)
	}
}

// admittedCall is a recCall the gateway admitted at a given time.
type admittedCall struct {
	recCall
	at int64
}

// TestTimeoutFromAdmission: a forwarded call's timeout counts from when the
// gateway admitted it (the loop's clock of that turn), not from when the
// link wrote it; a call whose session has no clock counts from the forward.
func TestTimeoutFromAdmission(t *testing.T) {
	const timeout = time.Minute
	u := testUpstream(nil, Config{Timeout: timeout})
	l := newLink(u, "l", nil, false)
	placeLinks(u, &countLoops{}, l)
	admitted := time.Now().Add(-timeout).UnixNano() // its whole timeout ago
	old := &admittedCall{recCall{method: "m"}, admitted}
	fresh := &admittedCall{recCall{method: "m"}, 0} // no clock
	u.Forward(old, backend.Origin{Admitted: old.at})
	u.Forward(fresh, backend.Origin{Admitted: fresh.at})
	l.sweep(admitted + int64(timeout))
	if len(old.errs) != 1 || !errors.Is(old.errs[0], backend.ErrUpstreamTimeout) {
		t.Fatalf("the call admitted a timeout ago: finished with %v, want UPSTREAM_TIMEOUT once", old.errs)
	}
	if len(fresh.errs) != 0 || l.inflight.Load() != 1 {
		t.Fatalf("the call without a clock finished (%v) at its admission + timeout; %d in flight", fresh.errs, l.inflight.Load())
	}
}

// TestRemoteCancelNamesItsCall: a call from another loop gets its
// upstream id on the link's loop, and its ticket names it by a number of
// its own: a cancel queued behind the forward drops that call, and a
// cancel that arrives after the call ended reaches no other call (the
// link's next calls reuse nothing of it).
func TestRemoteCancelNamesItsCall(t *testing.T) {
	u := testUpstream(nil, Config{})
	loops := &queueLoops{}
	l := newLink(u, "l0", nil, false)
	placeLinks(u, loops, l)

	a := &recCall{method: "m"}
	tk := u.Forward(a, loops.at(1)) // queued for loop 0
	tk.Cancel()                     // queued behind it
	loops.run()
	if e := l.calls.get(l.lastID); e == nil || e.state != callDropped || len(l.calls.remote) != 1 {
		t.Fatalf("the forward and its cancel ran: entry %+v, %d filed by remote number; want it dropped", e, len(l.calls.remote))
	}

	b := &recCall{method: "m"}
	tk = u.Forward(b, loops.at(1))
	loops.run()
	answer := []byte(`{"jsonrpc":"2.0","id":` + itoa(int(l.lastID)) + `,"result":1}` + "\n")
	if _, err := l.Traffic(answer, nowNanos()); err != nil || len(b.result) != 1 {
		t.Fatalf("the answer: %v, call finished %q", err, b.result)
	}
	c := &recCall{method: "m"}
	u.Forward(c, loops.at(0)) // a call of the link's own loop
	tk.Cancel()               // b's, late
	loops.run()
	if e := l.calls.get(l.lastID); e == nil || e.state != callSent || e.c != c {
		t.Fatalf("after b's late cancel the newer call's entry is %+v, want it sent", e)
	}
	if len(l.calls.remote) != 1 {
		t.Fatalf("%d entries filed by remote number, want a's alone (dropped, awaiting its answer)", len(l.calls.remote))
	}
}

// at is the origin of a call made on loop i of q.
func (q *queueLoops) at(i int) backend.Origin { return backend.Origin{Loops: q, Loop: i} }
