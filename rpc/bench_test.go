package rpc

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// benchHandler answers edge/echo at once; any other method blocks until gate
// is closed (or its ctx is cancelled).
type benchHandler struct{ gate chan struct{} }

func (h benchHandler) Call(ctx context.Context, method string, params, dst []byte) ([]byte, error) {
	if method != "edge/echo" {
		select {
		case <-h.gate:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
	return append(dst, params...), nil
}

// chanPoster hands completions to the benchmark goroutine, which plays the
// loop and applies them inline.
type chanPoster chan Completion

func (p chanPoster) Post(c Completion) { p <- c }

// countSink counts the bytes the session sends.
type countSink struct{ n int }

func (s *countSink) Send(msg []byte)    { s.n += len(msg) }
func (s *countSink) OutboundBytes() int { return 0 }
func (s *countSink) Writable() bool     { return true }

func benchSession(b *testing.B) (*Session, chanPoster, *countSink) {
	b.Helper()
	pool := backend.NewPool(4096, time.Minute)
	gate := make(chan struct{})
	srv, err := NewServer(Config{
		Handler: benchHandler{gate: gate},
		Pool:    pool,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	post := make(chanPoster, 1)
	sink := &countSink{}
	s := srv.NewSession(WebSocket, sink, post)
	b.Cleanup(func() {
		close(gate)
		pool.Close()
	})
	return s, post, sink
}

// BenchmarkSessionEcho measures the session path of one unary request: classify,
// admission, dispatch to a pool worker whose handler answers at once, and the
// completion applied on the benchmark goroutine (the loop) with the response
// encoded to the sink. The worker hand-off is included; the transport is not.
func BenchmarkSessionEcho(b *testing.B) {
	s, post, sink := benchSession(b)
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"hello":"world"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		s.HandleMessage(msg)
		(<-post).Apply()
	}
	b.StopTimer()
	if st := s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 || sink.n == 0 {
		b.Fatalf("stats %+v, %d bytes sent", st, sink.n)
	}
}

// BenchmarkSessionRejectDuplicate measures the loop-only path of a request
// answered inline: a duplicate of an id in flight.
func BenchmarkSessionRejectDuplicate(b *testing.B) {
	s, _, sink := benchSession(b)
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"get","params":{}}`)
	s.HandleMessage(msg) // blocks in the backend until cleanup
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		s.HandleMessage(msg)
	}
	b.StopTimer()
	if st := s.Stats(); st.InFlightIDs != 1 || sink.n == 0 {
		b.Fatalf("stats %+v, %d bytes sent", st, sink.n)
	}
}

// BenchmarkSessionStats measures edge/stats, answered by the session itself.
func BenchmarkSessionStats(b *testing.B) {
	s, _, sink := benchSession(b)
	msg := []byte(`{"jsonrpc":"2.0","id":"s","method":"edge/stats","params":{}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		s.HandleMessage(msg)
	}
	b.StopTimer()
	if sink.n == 0 {
		b.Fatal("nothing sent")
	}
}
