package topics

import (
	"testing"
	"time"

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

// startTopics starts an embedded NATS server (with JetStream in a temp
// dir when js) and Topics connected to it, both stopped at the end of tb,
// and returns the topics and the server's URL.
func startTopics(tb testing.TB, js bool) (*Topics, string) {
	tb.Helper()
	cfg := testnats.Config{}
	if js {
		cfg.StoreDir = tb.TempDir()
	}
	ns := testnats.StartWith(tb, cfg)
	tops, err := New(Config{URL: ns.ClientURL(), JetStream: js})
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
		name := "nats"
		if js {
			name = "jetstream"
		}
		b.Run(name, func(b *testing.B) {
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
