package rpc

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// loopPoster is a poster that is event loop i of loops (backend.Homed) and
// counts for the session (CountingPoster), as the gateway's loops are.
type loopPoster struct {
	fakePoster
	loops any
	i     int
	ctr   *Counters
}

func (p *loopPoster) Home() (any, int)    { return p.loops, p.i }
func (p *loopPoster) Counters() *Counters { return p.ctr }

// twoLoops stands for a set of two loops (Origin.Loops).
type twoLoops struct{ n int }

// originForwarder records the origins of the calls it is given and
// finishes them at once.
type originForwarder struct{ got []backend.Origin }

func (f *originForwarder) Forward(c backend.Call, o backend.Origin) backend.Ticket {
	f.got = append(f.got, o)
	c.Finish([]byte(`{}`), nil)
	return backend.Ticket{}
}

// TestForwardOrigin: a session hands its forwarder the call's origin, the
// event loop its poster is and the loop's clock of the admitting turn, so
// that the forwarder picks a connection the same loop owns and times the
// call from its admission without asking the call (issue 19 item 7: it
// used to type-assert backend.Homed and backend.Admitted on every call); a
// session on no loop gives the zero origin's loop.
func TestForwardOrigin(t *testing.T) {
	f := &originForwarder{}
	pool := backend.NewPool(4, time.Minute)
	t.Cleanup(pool.Close)
	srv, err := NewServer(Config{
		Handler: backend.NewMemory(),
		Pool:    pool,
		Forward: func(method string) backend.Forwarder {
			if method == "edge/echo" {
				return f
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	loops := twoLoops{}
	lp := &loopPoster{fakePoster: fakePoster{ch: make(chan Completion, 16)}, loops: loops, i: 1, ctr: srv.NewCounters()}
	lp.ctr.Now = 12345
	on := srv.NewSession(WebSocket, &recSink{}, lp)
	off := srv.NewSession(WebSocket, &recSink{}, &fakePoster{ch: make(chan Completion, 16)})
	on.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`))
	off.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`))
	if len(f.got) != 2 {
		t.Fatalf("forwarded %d calls, want 2", len(f.got))
	}
	if o := f.got[0]; o.Loops != any(loops) || o.Loop != 1 || o.Admitted != 12345 {
		t.Fatalf("the call from loop 1 came with origin %+v, want loop 1 of its Loops admitted at 12345", o)
	}
	if o := f.got[1]; o.Loops != nil {
		t.Fatalf("the call from no loop came with origin %+v, want no Loops", o)
	}
}
