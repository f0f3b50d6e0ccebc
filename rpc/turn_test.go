package rpc

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// TestTurnGathersUntilFlush: a Turn holds every call its loop's sessions
// dispatch until Flush. Calls to non-blocking methods go into batches of at
// most maxBatch calls, other calls go alone; once applied, a batch is kept
// for the next turn.
func TestTurnGathersUntilFlush(t *testing.T) {
	pool := backend.NewPool(4096, time.Minute)
	defer pool.Close()
	mem := backend.NewMemory()
	_, s, tn, post, sink := turnSession(t, Config{Handler: mem, NonBlocking: mem.NonBlocking, Pool: pool})

	const echoes = 2*maxBatch + 2
	for i := range echoes {
		s.HandleMessage(echoReq(strconv.Itoa(i), "x"))
	}
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":"s","method":"edge/sleep","params":{"ms":0}}`))
	if len(tn.jobs) != 3 || tn.open == nil || len(tn.open.tasks) != 2 {
		t.Fatalf("%d jobs and an open batch %v; want two full batches and the sleep, then two echoes open", len(tn.jobs), tn.open)
	}
	for i, j := range tn.jobs[:2] {
		if b, ok := j.(*batch); !ok || len(b.tasks) != maxBatch {
			t.Fatalf("job %d is %T, want a batch of %d", i, j, maxBatch)
		}
	}
	if task, ok := tn.jobs[2].(*Task); !ok || task.nonBlocking {
		t.Fatalf("job 2 is %T, want the edge/sleep task alone", tn.jobs[2])
	}
	if len(post.queue) != 0 {
		t.Fatal("a call ran before the flush")
	}

	runPipelined(t, s, post, nil) // flushes, then applies every completion
	if len(tn.jobs) != 0 || tn.open != nil || len(sink.msgs) != echoes+1 {
		t.Fatalf("after the flush: %d jobs, open batch %v, %d answers", len(tn.jobs), tn.open, len(sink.msgs))
	}
	if len(tn.spare) != 3 {
		t.Fatalf("%d batches kept for reuse, want the 3 applied", len(tn.spare))
	}
	s.HandleMessage(echoReq(strconv.Itoa(echoes), "x"))
	if len(tn.spare) != 2 || tn.open == nil {
		t.Fatal("the next turn's batch is not a reused one")
	}
	tn.Flush()
}

// TestTurnAdmitsFromCredit: a loop's sessions admit requests from their
// Turn's credit, taken from Server.owing a block at a time: while the turn
// runs, owing counts the credit with the requests (so a drain waits for
// it), and Flush gives back what no request still owes. Once the server
// drains, the credit left admits nothing: the next request is refused
// SERVER_SHUTTING_DOWN, as with a per-request admission.
func TestTurnAdmitsFromCredit(t *testing.T) {
	pool := backend.NewPool(64, time.Minute)
	defer pool.Close()
	srv, s, tn, post, sink := turnSession(t, Config{Handler: backend.NewMemory(), Pool: pool})

	// Answered at once (edge/stats): admitted and settled within the turn.
	for i := range 3 {
		s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"edge/stats","params":{}}`))
	}
	if n := srv.InFlight(); n != creditBlock {
		t.Fatalf("InFlight %d during the turn, want the block of credit taken (%d)", n, creditBlock)
	}
	tn.Flush()
	if n := srv.InFlight(); n != 0 || tn.credit != 0 {
		t.Fatalf("after the flush: InFlight %d, credit %d; want 0, 0", n, tn.credit)
	}

	// A call still running owes its answer after the flush (until it is
	// cancelled, below).
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":"s","method":"edge/sleep","params":{"ms":60000}}`))
	tn.Flush()
	if n := srv.InFlight(); n != 1 {
		t.Fatalf("InFlight %d with one call running, want 1", n)
	}
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":"a","method":"edge/stats","params":{}}`)) // takes a block
	srv.Drain()
	sink.msgs = nil
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":"b","method":"edge/stats","params":{}}`))
	if len(sink.msgs) != 1 || !strings.Contains(sink.msgs[0], "SERVER_SHUTTING_DOWN") {
		t.Fatalf("after Drain with credit left: %q, want SERVER_SHUTTING_DOWN", sink.msgs)
	}
	if n := srv.InFlight(); n <= 1 {
		t.Fatalf("InFlight %d before the flush, want the credit still counted", n)
	}
	tn.Flush()
	if n := srv.InFlight(); n != 1 {
		t.Fatalf("InFlight %d after the flush, want the running call alone", n)
	}
	runPipelined(t, s, post, [][]byte{cancelReq(`"s"`)})
	if n := srv.InFlight(); n != 0 {
		t.Fatalf("InFlight %d once the call returned, want 0", n)
	}
}

// turnSession is a server on cfg (its logs discarded) and a WebSocket
// session on a queuePoster with a Turn of its own.
func turnSession(t *testing.T, cfg Config) (*Server, *Session, *Turn, *queuePoster, *listSink) {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	post := &queuePoster{turn: srv.NewTurn()}
	sink := &listSink{}
	return srv, srv.NewSession(WebSocket, sink, post), post.turn, post, sink
}
