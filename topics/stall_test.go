package topics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
)

// publishCall forwards an edge/publish of data on name and returns its
// call, whose answer comes on done.
func publishCall(tops *Topics, name, data string) *call {
	c := &call{params: []byte(`{"name":"` + name + `","data":` + data + `}`), done: make(chan error, 1)}
	tops.Forward(c, backend.Origin{})
	return c
}

// TestJetStreamStallAnswersInTime is the regression test of issue 19 item
// 5: the writer waited for each JetStream acknowledgement in turn, Timeout
// each, so a stream that stopped acknowledging held a batch of n publishes
// n*Timeout, and every edge/topic queued behind them as long (1024 * 5 s,
// ~85 min, for a full batch). Here the stream stops acknowledging for
// real: its subject is moved elsewhere while another NATS client listens
// on the topics' subjects (a plain-NATS edge on the same prefix, say), so
// a publish reaches a subscriber and no stream, and no acknowledgement
// comes. Ten publishes must all be answered UPSTREAM_UNAVAILABLE within
// 3*Timeout (one deadline per batch), an edge/topic forwarded after them
// must be answered within that bound too, and readiness must say why.
// Then the stream gets its subject back, and publishes succeed again.
func TestJetStreamStallAnswersInTime(t *testing.T) {
	const timeout = time.Second
	const bound = 3 * timeout
	tops, url := startTopicsWith(t, true, func(c *Config) { c.Timeout = timeout })
	nc, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if c := publishCall(tops, "s", "1"); !within(c.done, 10*time.Second) {
		t.Fatal("the first publish was never answered")
	}

	// The stream stops acknowledging.
	st, err := js.Stream(ctx, tops.stream)
	if err != nil {
		t.Fatal(err)
	}
	scfg := st.CachedInfo().Config
	subjects := scfg.Subjects
	scfg.Subjects = []string{"elsewhere.>"}
	if _, err := js.UpdateStream(ctx, scfg); err != nil {
		t.Fatal(err)
	}
	listener, err := nc.Subscribe(tops.Subject(">"), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	var pubs []*call
	for i := range 10 {
		pubs = append(pubs, publishCall(tops, "s", `{"i":`+itoa(i)+`}`))
	}
	fresh := newGateStream(false)
	topic := &chanCall{params: []byte(`{"name":"fresh"}`), st: fresh, done: make(chan error, 1)}
	tops.Forward(topic, backend.Origin{})

	for i, c := range pubs {
		select {
		case err := <-c.done:
			if !errors.Is(err, backend.ErrUpstreamUnavailable) {
				t.Fatalf("publish %d to a stream that does not acknowledge: %v, want UPSTREAM_UNAVAILABLE", i, err)
			}
		case <-time.After(bound - time.Since(start)):
			t.Fatalf("publish %d not answered within %s of a stream that stopped acknowledging (Timeout %s)", i, bound, timeout)
		}
	}
	select {
	case <-fresh.established:
	case <-topic.done:
	case <-time.After(bound - time.Since(start)):
		t.Fatalf("edge/topic queued behind the publishes not answered within %s", bound)
	}
	poll.Until(t, 5*time.Second, "readiness says the stream does not acknowledge", func() (bool, string) {
		why := tops.NotReady()
		return strings.Contains(why, "no publish acknowledged"), "NotReady: " + why
	})

	// The stream acknowledges again: one publish at a time goes out until
	// one is acknowledged.
	if err := listener.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	scfg.Subjects = subjects
	if _, err := js.UpdateStream(ctx, scfg); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "publishes acknowledged again", func() (bool, string) {
		c := publishCall(tops, "s", "2")
		select {
		case err := <-c.done:
			return err == nil, "publish: " + errString(err)
		case <-time.After(bound):
			return false, "publish not answered"
		}
	})
	if why := tops.NotReady(); why != "" {
		t.Fatalf("after an acknowledged publish NotReady still says %q", why)
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestRefusedPublishKeepsReady: a publish the stream refuses (an event
// over the stream's largest message) is answered UPSTREAM_UNAVAILABLE at
// once, and the stream, which answered, stays ready: a client must not be
// able to take an edge out of service by publishing something too large.
func TestRefusedPublishKeepsReady(t *testing.T) {
	tops, url := startTopics(t, true)
	_, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, tops.stream)
	if err != nil {
		t.Fatal(err)
	}
	scfg := st.CachedInfo().Config
	scfg.MaxMsgSize = 64
	if _, err := js.UpdateStream(ctx, scfg); err != nil {
		t.Fatal(err)
	}
	// Twice: the acker answers a batch, then records how the stream
	// answered it, before it takes the next, so once the second answer is
	// in, the first batch's record is made.
	for i := range 2 {
		c := publishCall(tops, "s", `"`+strings.Repeat("x", 100)+`"`)
		select {
		case err := <-c.done:
			if !errors.Is(err, backend.ErrUpstreamUnavailable) {
				t.Fatalf("publish %d over the stream's largest message: %v, want UPSTREAM_UNAVAILABLE", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("publish %d not answered", i)
		}
	}
	if why := tops.NotReady(); why != "" {
		t.Fatalf("after a refused publish NotReady says %q", why)
	}
}
