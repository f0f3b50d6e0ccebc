package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// derivingHandler answers edge/echo like the memory backend, but first
// derives contexts from ctx the way real backends do (an upstream call with a
// timeout, a cause, a cleanup hook) and leaves what the context package
// starts for them behind when it returns.
type derivingHandler struct{}

var errHandlerDone = errors.New("handler done")

func (derivingHandler) Call(ctx context.Context, method string, params, dst []byte) ([]byte, error) {
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	cctx, cancelCause := context.WithCancelCause(tctx)
	stop := context.AfterFunc(ctx, func() {})
	if err := context.Cause(cctx); err != nil {
		cancelCause(err)
		cancel()
		return dst, err
	}
	// Return with the derived contexts cancelled in an order that leaves the
	// runtime's propagation goroutines and callbacks running after Call.
	cancelCause(errHandlerDone)
	cancel()
	_ = stop
	return append(dst, params...), nil
}

// TestPooledTaskContextNotReusedWhileReachable is the regression test of the
// reused request context (hardening issue, item 3). A Task used to embed its
// request context and a reused Task was reset with *t = Task{...}: a handler
// that derived a context left a goroutine of the context package (or an
// AfterFunc registration) that still reads the parent's Done, Err or Value
// after Call returned, while the loop had already reset the Task for the next
// request. Under -race, 64 pipelined echoes x 50 rounds through such a
// handler reported data races; now a request's context is never reused while
// anything can still reach it.
func TestPooledTaskContextNotReusedWhileReachable(t *testing.T) {
	pool := backend.NewPool(4096, time.Minute)
	defer pool.Close()
	srv, err := NewServer(Config{
		Handler: derivingHandler{},
		Pool:    pool,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	post := &queuePoster{turn: srv.NewTurn()}
	sink := &countSink{}
	s := srv.NewSession(WebSocket, sink, post)
	const window, rounds = 64, 50
	msgs := make([][]byte, window)
	for i := range msgs {
		msgs[i] = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"edge/echo","params":{"i":%d}}`, i, i)
	}
	for range rounds {
		runPipelined(t, s, post, msgs)
	}
	if st := s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		t.Fatalf("stats after the rounds: %+v", st)
	}
	if want := window * rounds * len(`{"jsonrpc":"2.0","id":1,"result":{"i":1}}`); sink.n < want {
		t.Fatalf("sent %d bytes, want at least %d", sink.n, want)
	}
}

// TestRequestContextCancelReachesDerived: cancelling a request (the loop's
// $/cancelRequest) reaches every context derived from it, AfterFunc
// callbacks run once, and context.Cause reports context.Canceled.
func TestRequestContextCancelReachesDerived(t *testing.T) {
	c := newReqCtx()
	tctx, cancel := context.WithTimeout(c, time.Minute)
	defer cancel()
	cctx, cancelCause := context.WithCancelCause(c)
	defer cancelCause(nil)
	ran := make(chan struct{}, 2)
	stop := context.AfterFunc(c, func() { ran <- struct{}{} })
	stopped := context.AfterFunc(c, func() { ran <- struct{}{} })
	if !stopped() {
		t.Fatal("stop before cancel reported false")
	}
	c.cancel()
	for _, d := range []context.Context{tctx, cctx} {
		select {
		case <-d.Done():
		case <-time.After(maxWait):
			t.Fatal("derived context not cancelled")
		}
		if !errors.Is(context.Cause(d), context.Canceled) {
			t.Fatalf("cause %v", context.Cause(d))
		}
	}
	select {
	case <-ran:
	case <-time.After(maxWait):
		t.Fatal("AfterFunc did not run")
	}
	if stop() {
		t.Fatal("stop after the callback ran reported true")
	}
	select {
	case <-ran:
		t.Fatal("a stopped AfterFunc ran")
	default:
	}
	var once sync.Once
	once.Do(c.cancel) // a second cancel is a no-op
}

// runPipelined plays one loop turn of a pipelining client: msgs are handled,
// the dispatched calls go to the pool together, and the loop applies
// completions until every call of the session is back (also those it
// dispatched before, whose turn the caller has not flushed).
func runPipelined(t *testing.T, s *Session, post *queuePoster, msgs [][]byte) {
	t.Helper()
	for _, m := range msgs {
		s.HandleMessage(m)
	}
	post.turn.Flush()
	deadline := time.Now().Add(maxWait)
	for s.Stats().Tasks > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still running after %s", s.Stats().Tasks, maxWait)
		}
		runtime.Gosched()
		post.mu.Lock()
		q := post.queue
		post.queue = nil
		post.mu.Unlock()
		for _, c := range q {
			c.Apply()
		}
	}
}
