package upstream

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

var benchParams = []byte(`{"a":1}`)

// benchCall is a backend.Call that records nothing: the cost measured is
// the link's own.
type benchCall struct{ finished int }

func (c *benchCall) Method() string         { return "edge/echo" }
func (c *benchCall) Params() []byte         { return benchParams }
func (c *benchCall) Stream() backend.Stream { return nil }
func (c *benchCall) Finish([]byte, error)   { c.finished++ }

func newBenchLink(frame func(dst, msg []byte) []byte) *link {
	u := New("b", nil, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	l := newLink(u, "bench", frame, frame != nil)
	l.open()
	return l
}

// BenchmarkLinkRoundTrip is one forwarded unary call through a link, with
// no I/O: Forward encodes it into the output buffer and records it, the
// loop takes the buffer, and the link applies the upstream's answer and
// finishes the call, as the link's event loop drives it (Traffic, one
// clock reading per read; the call's timeout from its admission). It is
// the per-call cost of the upstream package on top of the gateway's own
// dispatch.
func BenchmarkLinkRoundTrip(b *testing.B) {
	l := newBenchLink(nil)
	c := &benchCall{}
	var answer []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.forward(c, 1) // admitted at 1: the timeout from the loop's clock of the turn, as the gateway's calls
		l.Output()
		answer = append(codec.AppendUint(append(answer[:0], `{"jsonrpc":"2.0","id":`...), uint64(i+1)), `,"result":{"a":1}}`+"\n"...)
		if n, err := l.Traffic(answer, nowNanos()); n != len(answer) || err != nil {
			b.Fatalf("Traffic took %d of %d bytes: %v", n, len(answer), err)
		}
	}
	if c.finished != b.N {
		b.Fatalf("finished %d of %d", c.finished, b.N)
	}
	if l.up.Dropped() != 0 {
		b.Fatalf("dropped %d", l.up.Dropped())
	}
}

// BenchmarkPick is the replica choice of one forwarded call between two
// connected links.
func BenchmarkPick(b *testing.B) {
	l1, l2 := newBenchLink(nil), newBenchLink(nil)
	u := l1.up
	u.links = []*link{l1, l2}
	b.ReportAllocs()
	for b.Loop() {
		if u.pick(-1) == nil {
			b.Fatal("no link picked")
		}
	}
}

// BenchmarkLinkEvent is one upstream event passed on to its subscription.
func BenchmarkLinkEvent(b *testing.B) {
	l := newBenchLink(nil)
	st := &benchStream{}
	l.mu.Lock()
	e := l.calls.add(1, &benchCall{}, st, 1, 2)
	l.inflight.Add(1)
	e.upSub = "s9"
	l.moveLocked(e, callLive, byAnswer, nil, nil)
	l.mu.Unlock()
	ev := []byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s9","cursor":"12","seq":12,"data":"xxxxxxxxxxxxxxxx"}}`)
	b.ReportAllocs()
	for b.Loop() {
		l.handle(ev)
	}
	if st.emitted != b.N {
		b.Fatalf("emitted %d of %d", st.emitted, b.N)
	}
}

type benchStream struct{ emitted int }

func (s *benchStream) ID() string                                    { return "s1" }
func (*benchStream) Namespace() string                               { return "" }
func (s *benchStream) Establish([]byte)                              {}
func (s *benchStream) Emit(cursor, body []byte) bool                 { s.emitted++; return true }
func (s *benchStream) EmitWait(context.Context, []byte, []byte) bool { return true }

// BenchmarkNATSRequest is what a loop spends queueing one forwarded call on
// a nats:// link (subject, reply subject, body) and the writer taking it,
// without the publish itself (nats.go's).
func BenchmarkNATSRequest(b *testing.B) {
	l := newBenchLink(nil)
	l.nats = &natsLink{prefix: "bench", inbox: "_INBOX.abcdefghijklmnopqrstuv"}
	var spare []natsPub
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.mu.Lock()
		l.nats.requestLocked(l, uint64(i+1), "edge/echo", benchParams, false)
		l.mu.Unlock()
		pubs := l.takePubs(spare)
		if len(pubs) != 1 || pubs[0].subject != "bench.edge/echo" {
			b.Fatalf("queued %+v", pubs)
		}
		spare = pubs[:0]
	}
}

// BenchmarkLinkSweep is one timeout sweep of a link holding 65,536 calls
// in flight, none of them due: what every sweep period costs under the
// link's lock (on a NATS link, the lock every loop takes to forward).
func BenchmarkLinkSweep(b *testing.B) {
	l := newBenchLink(nil)
	for range 1 << 16 {
		l.forward(&benchCall{}, 1)
	}
	l.Output()
	b.ReportAllocs()
	for b.Loop() {
		l.sweep(2) // the calls were admitted at 1, due at 1 + the timeout
	}
	if l.inflight.Load() != 1<<16 {
		b.Fatalf("%d in flight after the sweeps, want all", l.inflight.Load())
	}
}
