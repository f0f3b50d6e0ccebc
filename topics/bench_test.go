package topics

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testnats"
)

// call is a backend.Call of edge/publish whose Finish signals done.
type call struct {
	params []byte
	done   chan error
}

func (c *call) Method() string                  { return "edge/publish" }
func (c *call) Params() []byte                  { return c.params }
func (c *call) Stream() backend.Stream          { return nil }
func (c *call) Finish(result []byte, err error) { c.done <- err }

// connect connects a NATS client of the test to url (closed at the end of
// tb) with its JetStream context.
func connect(tb testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}

// mode names a test's or benchmark's run with JetStream or plain NATS.
func mode(js bool) string {
	if js {
		return "jetstream"
	}
	return "nats"
}

// startTopics starts an embedded NATS server (with JetStream in a temp
// dir when js) and Topics connected to it, both stopped at the end of tb,
// and returns the topics and the server's URL.
func startTopics(tb testing.TB, js bool) (*Topics, string) {
	tb.Helper()
	return startTopicsWith(tb, js, nil)
}

// startTopicsWith is startTopics with the topics' Config changed by set
// (unless nil).
func startTopicsWith(tb testing.TB, js bool, set func(*Config)) (*Topics, string) {
	tb.Helper()
	cfg := testnats.Config{}
	if js {
		cfg.StoreDir = tb.TempDir()
	}
	ns := testnats.StartWith(tb, cfg)
	tcfg := Config{URL: ns.ClientURL(), JetStream: js}
	if set != nil {
		set(&tcfg)
	}
	tops, err := New(tcfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tops.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tops.Close)
	poll.Until(tb, 5*time.Second, "topics connected", func() (bool, string) {
		return tops.Ready(), "not connected"
	})
	return tops, ns.ClientURL()
}

// BenchmarkPublish is one edge/publish at a time from Forward to Finish
// (the loop's side is not included): plain NATS waits for a flush round
// trip, JetStream for the stream's acknowledgement (file storage in a
// temp dir).
func BenchmarkPublish(b *testing.B) {
	for _, js := range []bool{false, true} {
		b.Run(mode(js), func(b *testing.B) {
			tops, _ := startTopics(b, js)
			c := &call{params: []byte(`{"name":"bench","data":{"x":1}}`), done: make(chan error, 1)}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				tops.Forward(c, backend.Origin{})
				if err := <-c.done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// countStream is a backend.Stream that counts its events.
type countStream struct{ n int }

func (s *countStream) ID() string                                    { return "c" }
func (*countStream) Namespace() string                               { return "" }
func (s *countStream) Establish([]byte)                              {}
func (s *countStream) Emit(_, _ []byte) bool                         { s.n++; return true }
func (s *countStream) EmitWait(context.Context, []byte, []byte) bool { s.n++; return true }

// BenchmarkFanout is one event to a topic of 1,000 members, the topics'
// fan-out (a snapshot of the members, no lock held while emitting) beside
// backend.Fanout (which the topics used before: its lock held for the
// whole fan-out); "churn" has one member leave and another join between
// events, so that each publish takes a new snapshot.
func BenchmarkFanout(b *testing.B) {
	const n = 1000
	data := []byte(`{"x":1}`)
	b.Run("backend", func(b *testing.B) {
		var f backend.Fanout
		streams := make([]*countStream, n)
		for i := range streams {
			streams[i] = &countStream{}
			f.Join(streams[i])
		}
		b.ReportAllocs()
		for b.Loop() {
			f.Publish(data)
		}
	})
	for _, churn := range []bool{false, true} {
		name := "topics"
		if churn {
			name = "topics-churn"
		}
		b.Run(name, func(b *testing.B) {
			var f fanout
			subs := make([]*sub, n)
			for i := range subs {
				subs[i] = &sub{st: &countStream{}}
				f.join(subs[i])
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if churn {
					s := subs[i%n]
					f.leave(s)
					f.join(s)
				}
				f.publish(data)
			}
		})
	}
}
