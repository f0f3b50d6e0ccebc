package rpc

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// subStreamBackend establishes every subscription at once, hands its Stream to
// the benchmark and parks until cancelled.
type subStreamBackend struct{ streams chan backend.Stream }

func (b subStreamBackend) Call(_ context.Context, _ string, _, dst []byte) ([]byte, error) {
	return append(dst, "null"...), nil
}

func (b subStreamBackend) Subscribe(ctx context.Context, _ string, _ []byte, s backend.Stream) error {
	s.Establish([]byte(`{"subscriptionId":"` + s.ID() + `"}`))
	b.streams <- s
	<-ctx.Done()
	return nil
}

// subEventSink counts what the session sends.
type subEventSink struct {
	msgs, bytes int
	last        string // the last message, when keepLast
	keepLast    bool
}

func (s *subEventSink) Send(msg []byte) {
	s.msgs++
	s.bytes += len(msg)
	if s.keepLast {
		s.last = string(msg)
	}
}
func (s *subEventSink) OutboundBytes() int { return 0 }
func (s *subEventSink) OutboundLimit() int { return 1 << 30 }
func (s *subEventSink) Writable() bool     { return true }

// subscribedStream starts a session with one live subscription whose
// producer parks and returns its stream, the session's poster (the test
// plays the loop: it applies what is posted) and its sink. The session is
// closed at the end of the test.
func subscribedStream(tb testing.TB) (*stream, chanPoster, *subEventSink) {
	tb.Helper()
	pool := backend.NewPool(16, time.Minute)
	be := subStreamBackend{streams: make(chan backend.Stream, 1)}
	srv, err := NewServer(Config{
		Registry: NewRegistry(nil, []string{"test/bench"}),
		Handler:  be,
		Pool:     pool,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	post := make(chanPoster, 1) // bench_test.go
	sink := &subEventSink{}
	s := srv.NewSession(WebSocket, sink, post)
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"test/bench","params":{}}`))
	st := (<-be.streams).(*stream)
	(<-post).Apply() // the response
	tb.Cleanup(func() {
		s.Close()
		(<-post).Apply() // the producer's return
		pool.Close()
	})
	if sink.msgs != 1 {
		tb.Fatalf("establishment sent %d messages", sink.msgs)
	}
	return st, post, sink
}

// BenchmarkEventDelivery measures one subscription event from the producer's
// Emit to its bytes in the sink: the ring push and the post to the loop, then
// the loop applying the stream, encoding the event and handing it to the
// sink, all on the benchmark goroutine (the transport is not included). "one"
// applies after every Emit (a loop turn per event); "batch64" emits 64 events
// per loop turn, as a fast producer does, and reports per event.
func BenchmarkEventDelivery(b *testing.B) {
	for _, batch := range []int{1, 64} {
		name := "one"
		if batch > 1 {
			name = "batch" + strconv.Itoa(batch)
		}
		b.Run(name, func(b *testing.B) {
			st, post, sink := subscribedStream(b)
			cursor := []byte(`"123456"`)
			body := []byte(`"cursor":"123456","seq":123456,"data":"0123456789abcdef0123456789abcdef"`)
			sink.msgs, sink.bytes = 0, 0
			b.ReportAllocs()
			start := time.Now()
			events := 0
			for b.Loop() {
				for range batch {
					if !st.Emit(cursor, body) {
						b.Fatal("Emit refused")
					}
				}
				(<-post).Apply()
				events += batch
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if sink.msgs != events {
				b.Fatalf("%d events emitted, %d delivered", events, sink.msgs)
			}
			b.SetBytes(int64(sink.bytes / max(b.N, 1)))
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(events), "ns/event")
			b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
		})
	}
}
