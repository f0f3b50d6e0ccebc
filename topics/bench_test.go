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
			cfg := testnats.Config{}
			if js {
				cfg.StoreDir = b.TempDir()
			}
			ns := testnats.StartWith(b, cfg)
			tops, err := New(Config{URL: ns.ClientURL(), JetStream: js})
			if err != nil {
				b.Fatal(err)
			}
			if err := tops.Start(); err != nil {
				b.Fatal(err)
			}
			defer tops.Close()
			poll.Until(b, 5*time.Second, "topics connected", func() (bool, string) {
				return tops.Ready(), "not connected"
			})
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
