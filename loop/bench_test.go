package loop

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/rpc"
)

// countSink counts the messages a session sends.
type countSink struct{ n int }

func (s *countSink) Send([]byte)        { s.n++ }
func (s *countSink) OutboundBytes() int { return 0 }
func (s *countSink) OutboundLimit() int { return 1 << 30 }
func (s *countSink) Writable() bool     { return true }

// BenchmarkTurnBatched measures the batching seam of a loop turn: a
// pipelining client's 64 calls to a non-blocking method (edge/echo) are
// classified and dispatched, gathered into one batch, handed to the pool when
// the turn flushes, and the batch's completion is applied. Reported per
// request. Run with -cpu 1 to match the gateway's GOMAXPROCS=1 deployment.
func BenchmarkTurnBatched(b *testing.B) {
	pool := backend.NewPool(4096, time.Minute)
	b.Cleanup(pool.Close)
	mem := backend.NewMemory()
	srv, err := rpc.NewServer(rpc.Config{Handler: mem, NonBlocking: mem.NonBlocking, Pool: pool,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	l := &eventLoop{srv: &Server{rpc: srv}, turn: srv.NewTurn()}
	// There is no gnet loop to wake: completions wait in the queue, as
	// they do while a turn is about to drain it itself.
	l.inTurn = true
	sink := &countSink{}
	s := srv.NewSession(rpc.WebSocket, sink, l)
	const window = 64
	msgs := make([][]byte, window)
	for i := range msgs {
		msgs[i] = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"edge/echo","params":{"p":"0123456789ab"}}`, 1000+i)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(msgs[0])))
	for b.Loop() {
		for _, m := range msgs {
			s.HandleMessage(m)
		}
		l.flush()
		for sent := sink.n + window; sink.n < sent; {
			runtime.Gosched()
			l.mu.Lock()
			l.applyLocked()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*window), "ns/req")
	if st := s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		b.Fatalf("stats %+v", st)
	}
}
