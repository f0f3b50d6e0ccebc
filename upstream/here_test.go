package upstream

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/rpc"
)

// frames returns the payloads of the WebSocket frames in out (unmasked,
// at most 125 bytes each: the tests' answers).
func frames(t *testing.T, out []byte) []string {
	t.Helper()
	var msgs []string
	for len(out) > 0 {
		n := int(out[1] & 0x7f)
		if out[1]&0x80 != 0 || n > 125 || len(out) < 2+n {
			t.Fatalf("not a short unmasked frame: %q", out)
		}
		msgs = append(msgs, string(out[2:2+n]))
		out = out[2+n:]
	}
	return msgs
}

// TestAnswerAppliedOnItsLoop: the answer to a call from a session on the
// link's own loop completes it during the read that brought it: the
// client's response is framed before Traffic returns, and nothing waits
// in the loop's queue (it used to be posted there, to be applied after
// the read).
func TestAnswerAppliedOnItsLoop(t *testing.T) {
	p := newLoopProxy(t, nil, Config{})
	p.post.ctr.Now = nowNanos()
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":"a","method":"edge/echo","params":{"x":1}}`))
	if out := string(p.l.Output()); !strings.Contains(out, `"id":1,`) {
		t.Fatalf("forwarded %q", out)
	}
	answer := []byte(`{"jsonrpc":"2.0","id":1,"result":{"x":1}}` + "\n")
	if n, err := p.l.Traffic(answer, nowNanos()); n != len(answer) || err != nil {
		t.Fatalf("Traffic %d, %v", n, err)
	}
	if len(p.post.queue) != 0 {
		t.Fatalf("%d completions queued for the loop, want the answer applied at once", len(p.post.queue))
	}
	got := frames(t, p.sink.out)
	if len(got) != 1 || got[0] != `{"jsonrpc":"2.0","id":"a","result":{"x":1}}` {
		t.Fatalf("client got %q", got)
	}
	if st := p.s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		t.Fatalf("session %+v after the answer", st)
	}
}

// TestStaleAnswerDroppedOnItsLoop: the generation rule holds for an
// answer applied on its loop. The client cancels request 7 and reuses id
// 7 for a new request; the first one's late answer is dropped on the
// loop (not queued, nothing sent), and only the second's answers id 7.
func TestStaleAnswerDroppedOnItsLoop(t *testing.T) {
	p := newLoopProxy(t, nil, Config{})
	p.post.ctr.Now = nowNanos()
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":7,"method":"edge/echo","params":{"v":"old"}}`))
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}`))
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":7,"method":"edge/echo","params":{"v":"new"}}`))
	p.l.Output()
	old := []byte(`{"jsonrpc":"2.0","id":1,"result":{"v":"old"}}` + "\n")
	if n, err := p.l.Traffic(old, nowNanos()); n != len(old) || err != nil {
		t.Fatalf("Traffic %d, %v", n, err)
	}
	if len(p.post.queue) != 0 || len(p.sink.out) != 0 {
		t.Fatalf("the cancelled request's answer: %d queued, client got %q; want it dropped on the loop",
			len(p.post.queue), p.sink.out)
	}
	if st := p.s.Stats(); st.InFlightIDs != 1 || st.Tasks != 1 {
		t.Fatalf("session %+v after the stale answer, want the new request alone", st)
	}
	answer := []byte(`{"jsonrpc":"2.0","id":2,"result":{"v":"new"}}` + "\n")
	p.l.Traffic(answer, nowNanos())
	if got := frames(t, p.sink.out); len(got) != 1 || got[0] != `{"jsonrpc":"2.0","id":7,"result":{"v":"new"}}` {
		t.Fatalf("client got %q", got)
	}
	if st := p.s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		t.Fatalf("session %+v after the answers", st)
	}
	if p.u.Dropped() != 0 {
		t.Fatalf("%d upstream messages dropped", p.u.Dropped())
	}
}

// TestFailureDuringCancelIsQueued: a failure that happens within the
// session's own work is posted, never applied there. The client's cancel
// queues $/cancelRequest for a ws upstream that does not read, which
// takes the backlog over the bound: the link fails inside the session's
// cancel, and the calls on it (the cancelled one and another) are
// finished through the loop's queue, applied after the cancel returns.
func TestFailureDuringCancelIsQueued(t *testing.T) {
	const max = 4 << 10
	p := newLoopProxy(t, appendClientFrame, Config{MaxPendingBytes: max})
	sc := &stuckConn{}
	p.l.wc = sc
	p.post.ctr.Now = nowNanos()
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`))
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":2,"method":"edge/echo","params":{}}`))
	sc.Write(p.l.Output())
	sc.buffered = max - 10 // the upstream reads nothing more
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}`))
	if sc.closes != 1 {
		t.Fatalf("connection closed %d times, want once (over the bound)", sc.closes)
	}
	if len(p.sink.out) != 0 || len(p.post.queue) != 2 {
		t.Fatalf("during the cancel: client got %q, %d queued; want nothing sent, both calls queued",
			p.sink.out, len(p.post.queue))
	}
	p.post.apply()
	got := frames(t, p.sink.out)
	if len(got) != 1 || !strings.Contains(got[0], `"id":2,`) || !strings.Contains(got[0], "UPSTREAM_UNAVAILABLE") {
		t.Fatalf("client got %q, want request 2 answered UPSTREAM_UNAVAILABLE (1 was cancelled)", got)
	}
	if st := p.s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		t.Fatalf("session %+v", st)
	}
}

// TestTrafficTallied: the calls a read ends are counted in the upstream's
// Stats once the read is over, as they were counted one by one: outcomes,
// and durations from each call's admission to the read's clock.
func TestTrafficTallied(t *testing.T) {
	l := newBenchLink(nil)
	c := &benchCall{}
	for _, at := range []int64{1000, 2000, 3000} {
		l.forward(c, at)
	}
	l.Output()
	in := []byte(`{"jsonrpc":"2.0","id":1,"result":1}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"no"}}` + "\n" +
		`{"jsonrpc":"2.0","id":3,"result":3}` + "\n")
	const now = 1_000_000_000
	if n, err := l.Traffic(in, now); n != len(in) || err != nil {
		t.Fatalf("Traffic %d, %v", n, err)
	}
	st := l.up.Stats()
	if st.Outcomes[outcomeOK] != 2 || st.Outcomes[outcomeError] != 1 {
		t.Fatalf("outcomes %v, want 2 ok and 1 error", st.Outcomes)
	}
	if n, sum := st.Duration.Count(), st.Duration.SumNanos; n != 3 || sum != 3*now-6000 {
		t.Fatalf("durations: %d observed, sum %d; want 3, %d", n, sum, 3*now-6000)
	}
	if c.finished != 3 || l.tally.n != 0 {
		t.Fatalf("finished %d, tally %d left", c.finished, l.tally.n)
	}
}

// TestErrorAnswerOnItsLoop: an upstream's error object reaches the client
// byte for byte when its answer is applied on the loop, without the copy
// (and allocation) a posted one needs.
func TestErrorAnswerOnItsLoop(t *testing.T) {
	p := newLoopProxy(t, nil, Config{})
	p.post.ctr.Now = nowNanos()
	var answer []byte
	next := uint64(0)
	req := []byte(`{"jsonrpc":"2.0","id":"e","method":"edge/echo","params":{}}`)
	round := func() {
		p.sink.out = p.sink.out[:0]
		p.s.HandleMessage(req)
		p.l.Output()
		next++
		answer = append(codecUint(append(answer[:0], `{"jsonrpc":"2.0","id":`...), next), `,"error":{"code":-1,"message":"no","data":[1]}}`+"\n"...)
		p.l.Traffic(answer, nowNanos())
	}
	round()
	if got := frames(t, p.sink.out); len(got) != 1 || got[0] != `{"jsonrpc":"2.0","id":"e","error":{"code":-1,"message":"no","data":[1]}}` {
		t.Fatalf("client got %q", got)
	}
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per error answer", n)
	}
}

func codecUint(dst []byte, n uint64) []byte { return codec.AppendUint(dst, n) }

// queueLoops is a set of two loops whose Run queues f for run.
type queueLoops struct{ queued []func() }

func (q *queueLoops) NumLoops() int                    { return 2 }
func (q *queueLoops) Attach(int, net.Conn, Wire) error { return net.ErrClosed }
func (q *queueLoops) Run(_ int, f func()) bool         { q.queued = append(q.queued, f); return true }

// run runs what Run queued.
func (q *queueLoops) run() {
	for _, f := range q.queued {
		f()
	}
	q.queued = nil
}

// TestLentParamsKeptForAnotherLoop: a session lends a call's params (the
// client's message) to its upstream instead of copying them; a link on
// the session's own loop writes them out at once, but a call that goes to
// another loop's link is written there later, after the client's read
// buffer has been reused: the params must have been kept.
func TestLentParamsKeptForAnotherLoop(t *testing.T) {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	u := New("b", nil, Config{Logger: discard})
	loops := &queueLoops{}
	l := newLink(u, "l0", nil, false)
	placeLinks(u, loops, l) // on loop 0
	pool := backend.NewPool(4, time.Minute)
	t.Cleanup(pool.Close)
	srv, err := rpc.NewServer(rpc.Config{Handler: backend.NewMemory(), Pool: pool, Logger: discard,
		Forward: func(string) backend.Forwarder { return u }})
	if err != nil {
		t.Fatal(err)
	}
	sink := &frameSink{}
	for _, home := range []int{0, 1} {
		post := &homePoster{loops: loops, loop: home, ctr: srv.NewCounters()}
		s := srv.NewSession(rpc.WebSocket, sink, post)
		msg := []byte(`{"jsonrpc":"2.0","id":"a","method":"edge/echo","params":{"p":"lent"}}`)
		s.HandleMessage(msg)
		copy(msg, strings.Repeat("X", len(msg))) // the read buffer is reused
		loops.run()
		if out := string(l.Output()); !strings.Contains(out, `"params":{"p":"lent"}`) {
			t.Fatalf("call from loop %d forwarded as %q", home, out)
		}
	}
}

// homePoster is a session's poster on loop loop of loops.
type homePoster struct {
	loops Loops
	loop  int
	ctr   *rpc.Counters
}

func (p *homePoster) Post(rpc.Completion)     {}
func (p *homePoster) Home() (any, int)        { return p.loops, p.loop }
func (p *homePoster) Counters() *rpc.Counters { return p.ctr }
