package rpc

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// batchLoop plays an event loop with a Turn that it never flushes: calls to
// non-blocking methods go into the Turn's open batch, other calls are kept as
// its jobs; the test decides when a batch runs and when completions are
// applied.
type batchLoop struct {
	turn   *Turn
	posted []Completion
}

func (l *batchLoop) Turn() *Turn { return l.turn }

// cut ends the open batch and returns it.
func (l *batchLoop) cut() *batch {
	b := l.turn.open
	l.turn.open = nil
	return b
}

func (l *batchLoop) Post(c Completion) { l.posted = append(l.posted, c) }

// apply applies every posted completion.
func (l *batchLoop) apply() {
	for _, c := range l.posted {
		c.Apply()
	}
	l.posted = nil
}

// listSink records every message sent.
type listSink struct{ msgs []string }

func (s *listSink) Send(msg []byte)    { s.msgs = append(s.msgs, string(msg)) }
func (s *listSink) OutboundBytes() int { return 0 }
func (s *listSink) OutboundLimit() int { return 1 << 30 }
func (s *listSink) Writable() bool     { return true }

func newBatchSession(t *testing.T) (*Session, *batchLoop, *listSink, *backend.Pool) {
	t.Helper()
	pool := backend.NewPool(64, time.Minute)
	t.Cleanup(pool.Close)
	mem := backend.NewMemory()
	srv, err := NewServer(Config{Handler: mem, NonBlocking: mem.NonBlocking, Pool: pool,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	l := &batchLoop{turn: srv.NewTurn()}
	sink := &listSink{}
	return srv.NewSession(WebSocket, sink, l), l, sink, pool
}

func echoReq(id, v string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/echo","params":{"v":"` + v + `"}}`)
}

func cancelReq(id string) []byte {
	return []byte(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":` + id + `}}`)
}

// TestBatchOnlyNonBlocking: calls to methods named in Config.NonBlocking go
// into a batch; others (edge/sleep) are submitted on their own.
func TestBatchOnlyNonBlocking(t *testing.T) {
	s, l, _, _ := newBatchSession(t)
	s.HandleMessage(echoReq("1", "a"))
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":2,"method":"edge/sleep","params":{"ms":1}}`))
	s.HandleMessage(echoReq("3", "c"))
	if l.turn.open == nil || len(l.turn.open.tasks) != 2 || len(l.turn.jobs) != 1 {
		t.Fatalf("batch of %v, %d other jobs; want the two echoes batched and the sleep alone", l.turn.open, len(l.turn.jobs))
	}
	if l.turn.jobs[0].(*Task).nonBlocking {
		t.Fatal("edge/sleep is marked non-blocking")
	}
}

// TestBatchCancelAndReuseID schedules the cancellation races through
// batches, deterministically: a request is cancelled and its id reused while
// the first is still unrun in the same batch, and in another batch an old
// request finishes after a newer one took its id. Each old completion must
// be dropped without answering, releasing or cancelling the newer request.
// The session has two defences, either enough here: a cancelled task's
// completion is dropped, and an id is released only by the generation that
// holds it. A session with neither (matching completions by id) answers the
// old request instead of the new one.
func TestBatchCancelAndReuseID(t *testing.T) {
	s, l, sink, pool := newBatchSession(t)

	// Same batch: old id 1, cancel, new id 1.
	s.HandleMessage(echoReq("1", "old"))
	s.HandleMessage(cancelReq("1"))
	s.HandleMessage(echoReq("1", "new"))
	b := l.cut()
	if len(b.tasks) != 2 {
		t.Fatalf("batch holds %d calls, want 2", len(b.tasks))
	}
	b.Run()
	l.apply()
	want := []string{`{"jsonrpc":"2.0","id":1,"result":{"v":"new"}}`}
	if strings.Join(sink.msgs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("sent %q, want %q", sink.msgs, want)
	}

	// Separate batches: old id 2 (b1) is cancelled, new id 2 (b2) completes,
	// id 2 is reused by a third request (b3), then the old one finishes.
	sink.msgs = nil
	s.HandleMessage(echoReq("2", "old"))
	b1 := l.cut()
	s.HandleMessage(cancelReq("2"))
	s.HandleMessage(echoReq("2", "second"))
	b2 := l.cut()
	b2.Run()
	l.apply()
	s.HandleMessage(echoReq("2", "third"))
	b3 := l.cut()
	b1.Run() // the old request returns last but one
	l.apply()
	if st := s.Stats(); st.InFlightIDs != 1 || st.Tasks != 1 {
		t.Fatalf("after the old completion: %+v, want the third request alone holding id 2", st)
	}
	b3.Run()
	l.apply()
	want = []string{`{"jsonrpc":"2.0","id":2,"result":{"v":"second"}}`, `{"jsonrpc":"2.0","id":2,"result":{"v":"third"}}`}
	if strings.Join(sink.msgs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("sent %q, want %q", sink.msgs, want)
	}
	if st := s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		t.Fatalf("after every completion: %+v, want nothing left", st)
	}
	if n := pool.Running(); n != 0 {
		t.Fatalf("%d global slots still taken", n)
	}
	l.turn.Flush() // the loop's turn ends: its unused admission credit goes back
	if n := s.srv.InFlight(); n != 0 {
		t.Fatalf("InFlight %d, want 0", n)
	}
}

// TestMethodNotFoundLogged: a request edge refuses with -32601 says why in
// the debug log (before, nothing was logged), and the oecp profile's reason
// names --profile jsonrpc.
func TestMethodNotFoundLogged(t *testing.T) {
	pool := backend.NewPool(4, time.Minute)
	t.Cleanup(pool.Close)
	var logs strings.Builder
	srv, err := NewServer(Config{Handler: backend.NewMemory(), Pool: pool,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	sink := &listSink{}
	s := srv.NewSession(WebSocket, sink, &batchLoop{turn: srv.NewTurn()})
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"orders/list","params":{}}`))
	if len(sink.msgs) != 1 || !strings.Contains(sink.msgs[0], `"code":-32601`) {
		t.Fatalf("answers %q, want one -32601", sink.msgs)
	}
	if got := logs.String(); !strings.Contains(got, `method="\"orders/list\""`) || !strings.Contains(got, "--profile jsonrpc") {
		t.Fatalf("log %q: want the method and the reason naming --profile jsonrpc", got)
	}
}

// TestBatchEchoWithoutParams: in a jsonrpc batch, edge/echo without params
// answers null; the batched path wrote `"result":}` (invalid JSON).
func TestBatchEchoWithoutParams(t *testing.T) {
	pool := backend.NewPool(4, time.Minute)
	t.Cleanup(pool.Close)
	mem := backend.NewMemory()
	srv, err := NewServer(Config{Handler: mem, NonBlocking: mem.NonBlocking, Pool: pool, Profile: ProfileJSONRPC,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	l := &batchLoop{turn: srv.NewTurn()}
	sink := &listSink{}
	s := srv.NewSession(WebSocket, sink, l)
	// A first call leaves its task, and the task's result buffer, for reuse.
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":[1]}`))
	l.cut().Run()
	l.apply()
	s.HandleMessage([]byte(`[{"jsonrpc":"2.0","id":3,"method":"edge/echo"}]`))
	l.cut().Run()
	l.apply()
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":4,"method":"edge/echo"}`))
	l.cut().Run()
	l.apply()
	want := []string{`{"jsonrpc":"2.0","id":1,"result":[1]}`, `[{"jsonrpc":"2.0","id":3,"result":null}]`, `{"jsonrpc":"2.0","id":4,"result":null}`}
	if !slices.Equal(sink.msgs, want) {
		t.Fatalf("answers %q, want %s", sink.msgs, want)
	}
}
