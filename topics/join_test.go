package topics

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// subCall is a backend.Call of edge/topic with its stream.
type subCall struct {
	params []byte
	st     *answerStream
	done   chan error
}

func (c *subCall) Method() string                  { return "edge/topic" }
func (c *subCall) Params() []byte                  { return c.params }
func (c *subCall) Stream() backend.Stream          { return c.st }
func (c *subCall) Finish(result []byte, err error) { c.done <- err }

// answerStream is a backend.Stream whose Establish runs answered: what a
// client does once it reads the response.
type answerStream struct {
	answered func()
	mu       sync.Mutex
	events   int // guarded by mu
	emitted  chan struct{}
}

func (s *answerStream) ID() string      { return "s1" }
func (*answerStream) Namespace() string { return "" }

func (s *answerStream) Establish([]byte) { s.answered() }

func (s *answerStream) Emit(_, _ []byte) bool {
	s.mu.Lock()
	s.events++
	first := s.events == 1
	s.mu.Unlock()
	if first {
		close(s.emitted)
	}
	return true
}

func (s *answerStream) EmitWait(_ context.Context, cursor, body []byte) bool {
	return s.Emit(cursor, body)
}

// TestEventPublishedOnAnswerDelivered: a live subscriber whose client
// publishes the moment it reads the subscription's response gets that
// event. The response is sent with the topics' lock held, so the publish
// (by another NATS connection, acknowledged or flushed) and its delivery
// to this edge happen before Establish returns: the subscriber must
// already be one of the topic's subscribers then. Establishing before
// joining lost the event (TestTopicsJetStreamReplay failed 14 times in
// 300 under load, its first events missing).
func TestEventPublishedOnAnswerDelivered(t *testing.T) {
	for _, js := range []bool{false, true} {
		t.Run(mode(js), func(t *testing.T) {
			tops, url := startTopics(t, js)
			nc, pubJS := connect(t, url)
			// The first subscriber waits for the topic's NATS
			// subscription; the second joins the topic in place.
			for i := 1; i <= 2; i++ {
				st := &answerStream{emitted: make(chan struct{})}
				delivered := make(chan error, 1)
				st.answered = func() {
					var err error
					if js {
						_, err = pubJS.Publish(context.Background(), tops.Subject("x"), []byte(`{"i":1}`))
					} else {
						err = nc.Publish(tops.Subject("x"), []byte(`{"i":1}`))
						if err == nil {
							err = nc.Flush()
						}
					}
					if err == nil {
						// Bounded: the event reaches this edge in
						// milliseconds; without a subscriber it never
						// comes.
						select {
						case <-st.emitted:
						case <-time.After(2 * time.Second):
							err = errNotDelivered
						}
					}
					delivered <- err
				}
				c := &subCall{params: []byte(`{"name":"x"}`), st: st, done: make(chan error, 1)}
				tops.Forward(c, backend.Origin{})
				select {
				case err := <-delivered:
					if err != nil {
						t.Fatalf("subscriber %d: %v", i, err)
					}
				case err := <-c.done:
					t.Fatalf("subscriber %d: edge/topic ended before its response: %v", i, err)
				case <-time.After(10 * time.Second):
					t.Fatalf("subscriber %d: edge/topic was never answered", i)
				}
			}
		})
	}
}

var errNotDelivered = errors.New("the event published on the response never reached the subscriber")
