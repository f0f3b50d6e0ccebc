package topics

import (
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
				tops.Forward(c)
				if err := <-c.done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
