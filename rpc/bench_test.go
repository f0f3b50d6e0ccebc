package rpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
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
func (s *countSink) OutboundLimit() int { return 1 << 30 }
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

// queuePoster collects completions the way an event loop does: workers append
// under a mutex; the loop takes the whole queue at the end of its turn. Like
// the loop it is a TurnPoster: the calls of a turn go to the pool together
// when it flushes turn.
type queuePoster struct {
	mu    sync.Mutex
	queue []Completion
	turn  *Turn // loop-owned
}

func (p *queuePoster) Turn() *Turn { return p.turn }

func (p *queuePoster) Post(c Completion) {
	p.mu.Lock()
	p.queue = append(p.queue, c)
	p.mu.Unlock()
}

// BenchmarkSessionEchoPipelined measures the session path of a turn that
// brings 64 echo requests, as a pipelining client sends them: each is
// classified and dispatched, the loop yields once so that the workers run
// them, and the completions are applied. Reported per request. Run with
// -cpu 1 to match the gateway's GOMAXPROCS=1 deployment in the bench suite.
func BenchmarkSessionEchoPipelined(b *testing.B) {
	pool := backend.NewPool(4096, time.Minute)
	srv, err := NewServer(Config{
		Handler: benchHandler{gate: make(chan struct{})},
		Pool:    pool,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	post := &queuePoster{turn: srv.NewTurn()}
	sink := &countSink{}
	s := srv.NewSession(WebSocket, sink, post)
	const window = 64
	msgs := make([][]byte, window)
	for i := range msgs {
		msgs[i] = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"edge/echo","params":{"p":"0123456789ab"}}`, 1000+i)
	}
	var spare []Completion
	b.ReportAllocs()
	b.SetBytes(int64(len(msgs[0])))
	for b.Loop() {
		for _, m := range msgs {
			s.HandleMessage(m)
		}
		post.turn.Flush()
		for applied := 0; applied < window; {
			runtime.Gosched()
			post.mu.Lock()
			q := post.queue
			post.queue = spare[:0]
			post.mu.Unlock()
			for i, c := range q {
				c.Apply()
				q[i] = nil
			}
			applied += len(q)
			spare = q[:0]
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*window), "ns/req")
	if st := s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 || sink.n == 0 {
		b.Fatalf("stats %+v, %d bytes sent", st, sink.n)
	}
}
