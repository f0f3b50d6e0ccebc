package upstream

import (
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/rpc"
)

// benchLoops is the identity of a set of one event loop that the bench's
// session and link share (never called: the bench drives the loop).
type benchLoops struct{ Loops }

func (benchLoops) NumLoops() int { return 1 }

// benchLoop is the session's poster: the event loop the link lives on.
// Completions queue until the bench applies them, as a loop applies them
// at the end of the turn that read the answers.
type benchLoop struct {
	loops Loops
	ctr   *rpc.Counters
	turn  *rpc.Turn
	queue []rpc.Completion
}

func (p *benchLoop) Counters() *rpc.Counters { return p.ctr }

// Turn implements rpc.TurnPoster, as the gateway's loops do: the bench
// flushes it at the end of each of its turns (endTurn).
func (p *benchLoop) Turn() *rpc.Turn { return p.turn }

// endTurn ends a turn as the loop's flush does (loop/eventloop.go).
func (p *benchLoop) endTurn() { p.turn.Flush() }

func (p *benchLoop) Post(c rpc.Completion) { p.queue = append(p.queue, c) }
func (p *benchLoop) Home() (any, int)      { return p.loops, 0 }

func (p *benchLoop) apply() {
	for i, c := range p.queue {
		c.Apply()
		p.queue[i] = nil
	}
	p.queue = p.queue[:0]
}

// frameSink frames every message as a WebSocket text frame into one
// buffer, as a loop connection does for its turn's write (loop/result.go).
type frameSink struct {
	out  []byte
	sent int
}

func (s *frameSink) Send(msg []byte) {
	s.out = codec.AppendFrame(s.out, 1, msg)
	s.sent++
}

// SendResult implements rpc.ResultSink as the loop's connections do: the
// response encoded straight after its frame header.
func (s *frameSink) SendResult(id, result []byte) {
	s.out = codec.AppendResult(codec.AppendFrameHeader(s.out, 1, codec.ResultSize(id, result)), id, result)
	s.sent++
}

func (s *frameSink) OutboundBytes() int { return len(s.out) }
func (s *frameSink) OutboundLimit() int { return 1 << 30 }
func (s *frameSink) Writable() bool     { return true }

// loopProxy is a session and a byte-stream link on the same event loop,
// without the sockets: the session's requests go to the link's output and
// the upstream's answers are fed to the link's Traffic, as the loop would.
type loopProxy struct {
	u    *Upstream
	l    *link
	s    *rpc.Session
	post *benchLoop
	sink *frameSink
}

// newLoopProxy returns a loopProxy whose link frames as frame (nil:
// NDJSON) with cfg, and whose session's methods are all forwarded.
func newLoopProxy(tb testing.TB, frame func(dst, msg []byte) []byte, cfg Config) *loopProxy {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Logger = discard
	u := New("b", nil, cfg)
	l := newLink(u, "bench", frame, frame != nil)
	loops := benchLoops{}
	l.home, l.loops = 0, loops
	u.links = []*link{l}
	p := newPlacement(loops)
	p.byHome[0] = []*link{l}
	u.place.Store(p)
	l.open()
	pool := backend.NewPool(16, time.Minute)
	tb.Cleanup(pool.Close)
	srv, err := rpc.NewServer(rpc.Config{Handler: backend.NewMemory(), Pool: pool, Logger: discard,
		Forward: func(string) backend.Forwarder { return u }})
	if err != nil {
		tb.Fatal(err)
	}
	post := &benchLoop{loops: loops, ctr: srv.NewCounters(), turn: srv.NewTurn()}
	sink := &frameSink{}
	return &loopProxy{u: u, l: l, s: srv.NewSession(rpc.WebSocket, sink, post), post: post, sink: sink}
}

// BenchmarkProxyPipelined is edge's own work for a pipelining client of a
// proxied method, per request, without the sockets: a client's 64
// requests are classified and admitted by its session and forwarded to an
// upstream link on the session's own loop, the link's output is taken,
// the upstream's 64 answers are read (one Traffic, as one read) and
// completed, and their responses framed for the client. Building the
// answers is counted too (a few ns each), and the loop's clock read for
// the client's read. Reported per request (ns/req).
func BenchmarkProxyPipelined(b *testing.B) {
	p := newLoopProxy(b, nil, Config{})
	u, l, s, post, sink := p.u, p.l, p.s, p.post, p.sink
	const window = 64
	msgs := make([][]byte, window)
	for i := range msgs {
		msgs[i] = []byte(`{"jsonrpc":"2.0","id":` + itoa(1000+i) + `,"method":"edge/echo","params":{"p":"0123456789ab"}}`)
	}
	var answers []byte
	next := uint64(0)
	b.ReportAllocs()
	runtime.LockOSThread() // for threadCPU
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU()
	for b.Loop() {
		post.ctr.Now = nowNanos() // the loop's clock of the turn that reads the requests
		for _, m := range msgs {
			s.HandleMessage(m)
		}
		post.endTurn()
		if out := l.Output(); len(out) == 0 {
			b.Fatal("nothing forwarded")
		}
		answers = answers[:0]
		for range window {
			next++
			answers = strconv.AppendUint(append(answers, `{"jsonrpc":"2.0","id":`...), next, 10)
			answers = append(answers, `,"result":{"p":"0123456789ab"}}`+"\n"...)
		}
		if n, err := l.Traffic(answers, nowNanos()); n != len(answers) || err != nil {
			b.Fatalf("Traffic took %d of %d bytes: %v", n, len(answers), err)
		}
		post.apply()
		post.endTurn()
		sink.out = sink.out[:0]
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*window), "ns/req")
	// The CPU time of the bench's thread: on a shared machine the
	// elapsed time also counts the time other processes had the core.
	b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N*window), "cpu-ns/req")
	if sink.sent != b.N*window {
		b.Fatalf("sent %d of %d", sink.sent, b.N*window)
	}
	if st := s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		b.Fatalf("stats %+v", st)
	}
	if u.Dropped() != 0 {
		b.Fatalf("dropped %d", u.Dropped())
	}
}

// threadCPU is the CPU time the calling thread has used (user and
// system), in nanoseconds.
func threadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func itoa(n int) string { return string(codec.AppendUint(nil, uint64(n))) }
