package topics

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
)

// chanCall is an edge/topic call on stream st whose Finish is sent on done.
// A second Finish panics.
type chanCall struct {
	params   []byte
	st       backend.Stream
	done     chan error
	finished atomic.Bool
}

func (c *chanCall) Method() string         { return "edge/topic" }
func (c *chanCall) Params() []byte         { return c.params }
func (c *chanCall) Stream() backend.Stream { return c.st }

func (c *chanCall) Finish(result []byte, err error) {
	if c.finished.Swap(true) {
		panic("edge/topic call finished twice")
	}
	c.done <- err
}

// gateStream is a backend.Stream that closes established on its response,
// and whose first Emit closes entered and then waits for release (a
// subscriber's stream that is slow to take an event, or one of many in a
// long fan-out); later ones are recorded in events.
type gateStream struct {
	established chan struct{}
	entered     chan struct{}
	release     chan struct{}
	once        sync.Once
	mu          sync.Mutex
	events      [][]byte // guarded by mu: the bodies emitted
}

func newGateStream(block bool) *gateStream {
	g := &gateStream{established: make(chan struct{}), entered: make(chan struct{}), release: make(chan struct{})}
	if !block {
		close(g.release)
	}
	return g
}

func (g *gateStream) ID() string         { return "g" }
func (*gateStream) Namespace() string    { return "" }
func (g *gateStream) Establish(_ []byte) { close(g.established) }

func (g *gateStream) Emit(_, body []byte) bool {
	g.once.Do(func() { close(g.entered) })
	<-g.release
	g.mu.Lock()
	g.events = append(g.events, append([]byte(nil), body...))
	g.mu.Unlock()
	return true
}

func (g *gateStream) EmitWait(_ context.Context, cursor, body []byte) bool {
	return g.Emit(cursor, body)
}

func (g *gateStream) bodies() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]byte(nil), g.events...)
}

// within waits for ch for at most d and reports whether it was closed (or
// sent on) in time.
func within[T any](ch <-chan T, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// subscribeGate subscribes a gateStream to name and waits for its response.
func subscribeGate(t *testing.T, tops *Topics, name string, block bool) (*gateStream, backend.Ticket, *chanCall) {
	t.Helper()
	g := newGateStream(block)
	c := &chanCall{params: []byte(`{"name":"` + name + `"}`), st: g, done: make(chan error, 1)}
	tk := tops.Forward(c, backend.Origin{})
	select {
	case <-g.established:
	case err := <-c.done:
		t.Fatalf("edge/topic %s ended before its response: %v", name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("edge/topic %s was never answered", name)
	}
	return g, tk, c
}

// TestCancelDuringFanOut is the regression test of issue 19 item 3's
// second half: a topic's publish held the topic's fan-out lock on nats.go's
// goroutine for the whole fan-out, and a Cancel of one of its subscribers
// took that lock under Topics.mu, so a fan-out that takes long (many
// subscribers, here one whose Emit is held) stopped every loop's
// edge/topic and cancel. The test holds the fan-out inside one member's
// Emit, then cancels the other member and subscribes to another topic:
// both must return while the fan-out is still held.
func TestCancelDuringFanOut(t *testing.T) {
	tops, url := startTopics(t, false)
	slow, _, _ := subscribeGate(t, tops, "big", true)
	defer close(slow.release)
	_, other, _ := subscribeGate(t, tops, "big", false)

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(tops.Subject("big"), []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if !within(slow.entered, 10*time.Second) {
		t.Fatal("the event never reached the slow subscriber")
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		other.Cancel()
		g := newGateStream(false)
		tops.Forward(&chanCall{params: []byte(`{"name":"elsewhere"}`), st: g, done: make(chan error, 1)}, backend.Origin{})
	}()
	if !within(done, 5*time.Second) {
		t.Fatal("Cancel and Forward waited for a fan-out in progress (Topics.mu held behind the fan-out's lock)")
	}
}

// TestStaleSubscribeNotReady: a topic's live consumer (JetStream; with
// plain NATS the topic itself goes with its last subscriber) that the
// writer made for live subscribers who have all gone meanwhile is removed
// by the unsubscribe queued after it; a new live subscriber who came
// meanwhile must wait for the subscribe queued for it, not be answered on
// the old one. Answered on the old one, an event published after its
// response but before the new consumer existed was lost: the new one
// starts after the stream's last event. A replay keeps the topic; the
// writer is held (hookSubscribe) in the first subscribe while the first
// live subscriber is cancelled and a second one comes, and in the second
// subscribe while a client publishes an event: if the second subscriber
// was answered by then, it must get that event.
func TestStaleSubscribeNotReady(t *testing.T) {
	tops, url := startTopics(t, true)
	_, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	replay := newGateStream(false)
	tops.Forward(&chanCall{params: []byte(`{"name":"h","fromCursor":"0"}`), st: replay, done: make(chan error, 1)}, backend.Origin{})
	if !within(replay.established, 10*time.Second) {
		t.Fatal("the replay was never answered")
	}

	entered, release := make(chan int), make(chan struct{})
	calls := 0
	tops.hookSubscribe = func() {
		calls++
		entered <- calls
		<-release
	}
	first := &chanCall{params: []byte(`{"name":"h"}`), st: newGateStream(false), done: make(chan error, 1)}
	tk := tops.Forward(first, backend.Origin{})
	if n := <-entered; n != 1 {
		t.Fatalf("subscribe %d, want 1", n)
	}
	tk.Cancel()
	second := newGateStream(false)
	tops.Forward(&chanCall{params: []byte(`{"name":"h"}`), st: second, done: make(chan error, 1)}, backend.Origin{})
	release <- struct{}{}

	if n := <-entered; n != 2 {
		t.Fatalf("subscribe %d, want 2", n)
	}
	answered := within(second.established, 0)
	if _, err := js.Publish(ctx, tops.Subject("h"), []byte(`{"i":1}`)); err != nil {
		t.Fatal(err)
	}
	release <- struct{}{}

	if !within(second.established, 10*time.Second) {
		t.Fatal("the second subscriber was never answered")
	}
	if _, err := js.Publish(ctx, tops.Subject("h"), []byte(`{"i":2}`)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the event after the response delivered", func() (bool, string) {
		got := second.bodies()
		return len(got) > 0 && bytes.Contains(got[len(got)-1], []byte(`{"i":2}`)), "events: " + strings.Join(strs(got), " | ")
	})
	if got := second.bodies(); answered && !bytes.Contains(got[0], []byte(`{"i":1}`)) {
		t.Fatalf("answered before the event {\"i\":1} was published, then got only %q", strs(got))
	}
}

// sharedStream is a backend.Stream and backend.SharedEmitter that keeps
// the events handed to it by reference, as the gateway's streams do, and
// counts those it had to copy (Emit).
type sharedStream struct {
	countStream
	copied int
	kept   [][]byte // the bodies given to EmitShared, not copied
}

func (s *sharedStream) Emit(_, body []byte) bool { s.copied++; return true }

func (s *sharedStream) EmitShared(_, body []byte) bool {
	s.kept = append(s.kept, body)
	return true
}

// TestFanoutSharesEvent: a topic's fan-out encodes each event once and
// hands that one encoding to every member that can keep it
// (backend.SharedEmitter) instead of a scratch buffer every member must
// copy: the members' bodies share one backing array, and an event a member
// kept is not overwritten by the next publish.
func TestFanoutSharesEvent(t *testing.T) {
	var f fanout
	streams := make([]*sharedStream, 3)
	for i := range streams {
		streams[i] = &sharedStream{}
		f.join(&sub{st: streams[i]})
	}
	if n := f.publish([]byte(`{"a":1}`)); n != len(streams) {
		t.Fatalf("delivered %d, want %d", n, len(streams))
	}
	if n := f.publish([]byte(`{"b":2}`)); n != len(streams) {
		t.Fatalf("delivered %d, want %d", n, len(streams))
	}
	want := [][]byte{[]byte(`"cursor":"1","seq":1,"data":{"a":1}`), []byte(`"cursor":"2","seq":2,"data":{"b":2}`)}
	for i, s := range streams {
		if s.copied != 0 || len(s.kept) != 2 {
			t.Fatalf("member %d: %d events copied, %d kept; want every event kept, none copied", i, s.copied, len(s.kept))
		}
		for j, body := range s.kept {
			if !bytes.Equal(body, want[j]) {
				t.Fatalf("member %d, event %d reads %q, want %q", i, j+1, body, want[j])
			}
			if &body[0] != &streams[0].kept[j][0] {
				t.Fatalf("member %d, event %d: a copy of its own, not the shared encoding", i, j+1)
			}
		}
	}
}
