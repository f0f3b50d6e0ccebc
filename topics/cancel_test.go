package topics

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openengine/edge/backend"
)

// nopCall is an edge/topic call whose stream takes everything; Finish
// counts.
type nopCall struct {
	params   []byte
	st       nopStream
	finished int
}

func (c *nopCall) Method() string                  { return "edge/topic" }
func (c *nopCall) Params() []byte                  { return c.params }
func (c *nopCall) Stream() backend.Stream          { return &c.st }
func (c *nopCall) Finish(result []byte, err error) { c.finished++ }

type nopStream struct{}

func (nopStream) ID() string                                    { return "s" }
func (nopStream) Namespace() string                             { return "" }
func (nopStream) Establish([]byte)                              {}
func (nopStream) Emit(_, _ []byte) bool                         { return true }
func (nopStream) EmitWait(context.Context, []byte, []byte) bool { return true }

// openTopics is Topics marked up without NATS: Forward and Cancel change
// the tables and queue operations that no writer takes.
func openTopics(tb testing.TB) *Topics {
	tb.Helper()
	tops, err := New(Config{URL: "nats://127.0.0.1:1"})
	if err != nil {
		tb.Fatal(err)
	}
	tops.up = true
	return tops
}

// subscribeEach subscribes one call to each of n topics and returns the
// tickets.
func subscribeEach(tb testing.TB, tops *Topics, n int) []backend.Ticket {
	tb.Helper()
	tickets := make([]backend.Ticket, n)
	for i := range tickets {
		c := &nopCall{params: []byte(`{"name":"t` + itoa(i) + `"}`)}
		tickets[i] = tops.Forward(c, backend.Origin{})
		if c.finished != 0 {
			tb.Fatalf("subscription %d finished at once", i)
		}
	}
	return tickets
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// TestCancelVisitsOneEntry is the regression test of issue 19 item 3: a
// Topics.Cancel looked at every subscription of the edge (under the lock
// every loop takes) to find out whether the topic still had a replay
// waiting, so cancelling n one-subscriber topics visited n*(n-1)/2
// entries. Cancel must visit a bounded number of entries, whatever n.
func TestCancelVisitsOneEntry(t *testing.T) {
	const n = 2000
	tops := openTopics(t)
	tickets := subscribeEach(t, tops, n)
	for _, tk := range tickets {
		tk.Cancel()
	}
	tops.mu.Lock()
	visited, subs, topics := tops.visited, len(tops.subs), len(tops.topics)
	tops.mu.Unlock()
	if subs != 0 || topics != 0 {
		t.Fatalf("after every cancel: %d subscriptions, %d topics left", subs, topics)
	}
	if visited > 2*n {
		t.Fatalf("cancelling %d subscriptions visited %d entries (want at most %d)", n, visited, 2*n)
	}
}

// BenchmarkCancel40k subscribes 40,000 subscriptions, one per topic, and
// cancels them all; it reports the total time of the cancels, the longest
// single Cancel and the 99.9th percentile. A Cancel holds Topics.mu for all
// of its work, so its duration bounds the lock's hold by a cancel (on this
// shared machine the longest also catches the scheduler's preemptions).
func BenchmarkCancel40k(b *testing.B) {
	const n = 40000
	b.ReportAllocs()
	var total time.Duration
	var each []time.Duration
	for b.Loop() {
		b.StopTimer()
		tops := openTopics(b)
		tickets := subscribeEach(b, tops, n)
		tops.take() // what the writer would have taken meanwhile
		b.StartTimer()
		start := time.Now()
		for _, tk := range tickets {
			t0 := time.Now()
			tk.Cancel()
			each = append(each, time.Since(t0))
		}
		total += time.Since(start)
	}
	slices.Sort(each)
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-total/op")
	b.ReportMetric(float64(each[len(each)-1].Microseconds()), "us-worst-cancel")
	b.ReportMetric(float64(each[len(each)*999/1000].Microseconds()), "us-p99.9-cancel")
}

// TestWaitingSubscriptionExpires: an edge/topic is answered within Timeout
// even when the writer does not get to it (here no writer runs at all: a
// writer busy with slow NATS or JetStream API calls queued before it). A
// live subscription waiting for its topic's NATS subscription and a replay
// waiting for its consumer end UPSTREAM_TIMEOUT at Timeout, not before,
// and leave nothing behind but the operations that undo theirs. Before,
// they waited for the writer however long it took.
func TestWaitingSubscriptionExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tops := openTopics(t)
		tops.cfg.JetStream = true
		live := &chanCall{params: []byte(`{"name":"a"}`), st: newGateStream(false), done: make(chan error, 1)}
		replay := &chanCall{params: []byte(`{"name":"b","fromCursor":"3"}`), st: newGateStream(false), done: make(chan error, 1)}
		tops.Forward(live, backend.Origin{})
		tops.Forward(replay, backend.Origin{})

		time.Sleep(tops.cfg.Timeout - time.Nanosecond)
		synctest.Wait()
		if len(live.done)+len(replay.done) != 0 {
			t.Fatal("a subscription ended before Timeout")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		for name, c := range map[string]*chanCall{"live": live, "replay": replay} {
			select {
			case err := <-c.done:
				if !errors.Is(err, backend.ErrUpstreamTimeout) {
					t.Errorf("%s: ended %v, want UPSTREAM_TIMEOUT", name, err)
				}
			default:
				t.Errorf("%s: not answered at Timeout", name)
			}
		}
		tops.mu.Lock()
		subs, topics := len(tops.subs), len(tops.topics)
		tops.mu.Unlock()
		if subs != 0 || topics != 0 {
			t.Errorf("%d subscriptions, %d topics left", subs, topics)
		}
		var kinds []opKind
		for ops, more := tops.take(); len(ops) > 0; ops, more = tops.take() {
			for _, o := range ops {
				kinds = append(kinds, o.kind)
			}
			if !more {
				break
			}
		}
		slices.Sort(kinds) // the two timers fire at the same instant, in either order
		if want := []opKind{opSubscribe, opUnsubscribe, opReplay, opStopReplay}; !slices.Equal(kinds, want) {
			t.Errorf("queued operations %v, want %v", kinds, want)
		}
	})
}

// TestLateExpiryLeavesNewSubscribers: a topic's expiry timer that fired
// as its waiting subscriber was cancelled, and got Topics.mu only after a
// new subscriber had come (a replay keeps the topic meanwhile), must not
// end the newcomer, whose own subscribe and timer were just queued. The
// late timer is run here by hand, at the point where it would have got the
// lock.
func TestLateExpiryLeavesNewSubscribers(t *testing.T) {
	tops := openTopics(t)
	tops.cfg.JetStream = true
	tops.Forward(&chanCall{params: []byte(`{"name":"a","fromCursor":"0"}`), st: newGateStream(false), done: make(chan error, 1)}, backend.Origin{})
	first := tops.Forward(&chanCall{params: []byte(`{"name":"a"}`), st: newGateStream(false), done: make(chan error, 1)}, backend.Origin{})
	tops.mu.Lock()
	tp, want := tops.topics["a"], tops.topics["a"].want
	tops.mu.Unlock()
	first.Cancel()
	second := &chanCall{params: []byte(`{"name":"a"}`), st: newGateStream(false), done: make(chan error, 1)}
	tops.Forward(second, backend.Origin{})

	tops.expireWaiting(tp, want) // the first subscriber's timer, late
	select {
	case err := <-second.done:
		t.Fatalf("the new subscriber ended %v by the timer of the one before", err)
	default:
	}
	tops.mu.Lock()
	defer tops.mu.Unlock()
	stop(tp.expiry)
	for _, s := range tops.subs {
		stop(s.expiry)
	}
}
