package rpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/internal/poll"
)

// TestTrimKeepsLiveSubscriptionRing: a subscriber never speaks, so the
// transport's sweep calls Trim on its session however many events it gets.
// Trim keeps the ring of a stream that took an event since the last trim,
// and a steady stream of events with a sweep between them allocates
// nothing; a stream that took none since the last trim is released.
func TestTrimKeepsLiveSubscriptionRing(t *testing.T) {
	st, post, sink := subscribedStream(t)
	s := st.sub.task.sess
	cursor := []byte(`"1"`)
	body := []byte(`"cursor":"1","seq":1,"data":"0123456789abcdef"`)
	event := func() {
		if !st.Emit(cursor, body) {
			t.Fatal("Emit refused")
		}
		(<-post).Apply()
	}
	event()
	s.Trim()
	if st.ring == nil {
		t.Fatal("the ring of a stream that delivered an event since the last sweep was released")
	}
	if allocs := testing.AllocsPerRun(100, func() { event(); s.Trim() }); allocs != 0 {
		t.Fatalf("an event per sweep: %.1f allocations per event, want 0", allocs)
	}
	s.Trim() // a whole sweep without an event: released
	if st.ring != nil {
		t.Fatal("the ring of a stream idle for a whole sweep is still held")
	}
	if want := 1 + 1 + 100 + 1; sink.msgs != want {
		t.Fatalf("%d messages sent, want %d", sink.msgs, want)
	}
}

// topicBackend is a topic of backend.Fanout: every subscription joins it and
// parks until cancelled.
type topicBackend struct{ f *backend.Fanout }

func (topicBackend) Call(_ context.Context, _ string, _, dst []byte) ([]byte, error) {
	return append(dst, "null"...), nil
}

func (b topicBackend) Subscribe(ctx context.Context, _ string, _ []byte, s backend.Stream) error {
	b.f.Join(s)
	s.Establish([]byte(`{"subscriptionId":"` + s.ID() + `"}`))
	<-ctx.Done()
	b.f.Leave(s)
	return nil
}

// loopQueue is a loop's completion queue; the test plays the loop and
// applies what was posted.
type loopQueue struct {
	mu       sync.Mutex
	q, spare []Completion
	posts    int // completions posted
	// deferred are the sessions whose deferEventSink has events for the
	// flush that ends apply, as the loop's connections do. Loop-owned.
	deferred []*Session
	out      []byte // the loop's one output buffer, for deferEventSink
}

// deferEventSink is a subEventSink that takes events at the loop's flush
// (DeferringSink): framed into the loop's one output buffer, then counted.
type deferEventSink struct {
	*subEventSink
	sess *Session
	loop *loopQueue
}

func (s *deferEventSink) DeferEvents() { s.loop.deferred = append(s.loop.deferred, s.sess) }

func (s *deferEventSink) SendEvent(head string, id, members []byte) bool {
	start := len(s.loop.out)
	s.loop.out = codec.AppendEventFrame(s.loop.out, head, id, members)
	s.msgs++
	s.bytes += len(s.loop.out) - start
	if s.keepLast {
		s.last = string(codec.AppendEventWith(nil, head, id, members))
	}
	return true
}

func (p *loopQueue) Post(c Completion) {
	p.mu.Lock()
	p.q = append(p.q, c)
	p.posts++
	p.mu.Unlock()
}

// apply applies every queued completion and returns how many.
func (p *loopQueue) apply() int {
	p.mu.Lock()
	q := p.q
	p.q = p.spare[:0]
	p.mu.Unlock()
	for i, c := range q {
		c.Apply()
		q[i] = nil
	}
	p.spare = q[:0]
	// The flush: each deferring session's events, then its "write".
	for i, s := range p.deferred {
		p.deferred[i] = nil
		s.SendEvents()
		p.out = p.out[:0]
	}
	p.deferred = p.deferred[:0]
	return len(q)
}

// fanoutSessions starts n sessions, each subscribed to one topic of a
// backend.Fanout, on one poster; it returns the topic, the poster and the
// sessions' sinks. Everything is closed at the end of the test.
func fanoutSessions(tb testing.TB, n int, deferring bool) (*backend.Fanout, *loopQueue, []*subEventSink) {
	tb.Helper()
	pool := backend.NewPool(n+16, time.Minute)
	f := &backend.Fanout{}
	srv, err := NewServer(Config{
		Registry: NewRegistry(nil, []string{"test/topic"}),
		Handler:  topicBackend{f: f},
		Pool:     pool,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	post := &loopQueue{}
	sinks := make([]*subEventSink, n)
	sessions := make([]*Session, n)
	for i := range sessions {
		sinks[i] = &subEventSink{}
		if deferring {
			ds := &deferEventSink{subEventSink: sinks[i], loop: post}
			sessions[i] = srv.NewSession(WebSocket, ds, post)
			ds.sess = sessions[i]
		} else {
			sessions[i] = srv.NewSession(WebSocket, sinks[i], post)
		}
		sessions[i].HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"test/topic","params":{}}`))
	}
	answered := func() int {
		k := 0
		for _, s := range sinks {
			k += s.msgs
		}
		return k
	}
	poll.Until(tb, 10*time.Second, "subscriptions established", func() (bool, string) {
		post.apply()
		return answered() == n && f.Len() == n, fmt.Sprintf("%d of %d answered, %d joined", answered(), n, f.Len())
	})
	tb.Cleanup(func() {
		for _, s := range sessions {
			s.Close()
		}
		poll.Until(tb, 10*time.Second, "producers returned", func() (bool, string) {
			post.apply()
			return f.Len() == 0, fmt.Sprintf("%d members left", f.Len())
		})
		pool.Close()
	})
	for _, s := range sinks {
		s.msgs, s.bytes = 0, 0
	}
	post.posts = 0
	return f, post, sinks
}

// TestFanoutSharesEvent: a publish to a topic of the gateway's streams
// encodes the event once; every member's ring references that one copy until
// its connection writes it, and each member gets the event byte for byte.
func TestFanoutSharesEvent(t *testing.T) {
	for _, deferring := range []bool{false, true} {
		t.Run(fmt.Sprintf("deferring=%v", deferring), func(t *testing.T) { testFanoutSharesEvent(t, deferring) })
	}
}

func testFanoutSharesEvent(t *testing.T, deferring bool) {
	const n = 3
	f, post, sinks := fanoutSessions(t, n, deferring)
	for _, s := range sinks {
		s.keepLast = true
	}
	if got := f.Publish([]byte(`{"x":1}`)); got != n {
		t.Fatalf("published to %d members, want %d", got, n)
	}
	var bodies []*byte
	post.mu.Lock()
	for _, c := range post.q {
		st := c.(*stream)
		st.mu.Lock()
		bodies = append(bodies, unsafe.SliceData(st.ring[st.head].body))
		st.mu.Unlock()
	}
	post.mu.Unlock()
	if len(bodies) != n {
		t.Fatalf("%d streams posted, want %d", len(bodies), n)
	}
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Fatal("the members' rings hold copies of the event, not the one shared event")
		}
	}
	post.apply()
	want := `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1,"data":{"x":1}}}`
	for i, s := range sinks {
		if s.msgs != 1 || s.last != want {
			t.Fatalf("member %d: %d messages, last %s; want 1, %s", i, s.msgs, s.last, want)
		}
	}
}

// TestSharedEventNeverWritten: a slot that referenced a shared event is
// not reused as a buffer for a copied one: the shared event keeps its bytes.
func TestSharedEventNeverWritten(t *testing.T) {
	st, post, sink := subscribedStream(t)
	sink.keepLast = true
	shared := []byte(`"cursor":"1","seq":1,"data":"shared"`)
	keep := string(shared)
	for _, e := range []struct {
		body   []byte
		shared bool
	}{{shared, true}, {[]byte(`"cursor":"2","seq":2,"data":"copied, and longer than the first"`), false}} {
		if !st.emit(e.body[9:12], e.body, e.shared) {
			t.Fatal("emit refused")
		}
		(<-post).Apply()
		if !strings.Contains(sink.last, string(e.body)) {
			t.Fatalf("sent %s, want the event %s", sink.last, e.body)
		}
	}
	for range 16 { // around the ring
		st.Emit([]byte(`"3"`), []byte(`"cursor":"3","seq":3,"data":"copied again"`))
		(<-post).Apply()
	}
	if string(shared) != keep {
		t.Fatalf("the shared event became %s", shared)
	}
}

// BenchmarkFanoutDelivery is one publish to a topic of n sessions (a
// backend.Fanout of the sessions' streams) and the loop applying every
// stream it posted: each member's ring push, the post, the encoding and the
// send to a counting sink (the transport is not included). Reported per
// delivery; allocs/op is per publish. posts/delivery is the loop hand-offs.
func BenchmarkFanoutDelivery(b *testing.B) {
	for _, c := range []struct {
		n         int
		deferring bool
	}{{1000, false}, {10000, false}, {1000, true}, {10000, true}} {
		name := fmt.Sprint(c.n)
		if c.deferring {
			// As the loop's connections: framed at the flush (DeferringSink).
			name = "deferred-" + name
		}
		n := c.n
		b.Run(name, func(b *testing.B) {
			f, post, sinks := fanoutSessions(b, n, c.deferring)
			data := []byte(`{"t":1733400000000000000,"p":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
			f.Publish(data) // the rings' first event allocates them
			post.apply()
			for _, s := range sinks {
				s.msgs = 0
			}
			post.posts = 0
			b.ReportAllocs()
			for b.Loop() {
				if f.Publish(data) != n {
					b.Fatal("a member refused the event")
				}
				post.apply()
			}
			b.StopTimer()
			sent := 0
			for _, s := range sinks {
				sent += s.msgs
			}
			if sent != n*b.N {
				b.Fatalf("%d events sent, want %d", sent, n*b.N)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(sent), "ns/delivery")
			b.ReportMetric(float64(post.posts)/float64(sent), "posts/delivery")
		})
	}
}
