package rpc

import (
	"bytes"
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

// lendingForwarder is a backend.Borrower that records, during Forward,
// whether the params it is given are the client's message itself, and
// keeps them (LentCall.Keep) when keep is set.
type lendingForwarder struct {
	msg   []byte
	keep  bool
	lent  []bool
	calls []backend.Call
}

func (f *lendingForwarder) BorrowsParams() {}

func (f *lendingForwarder) Forward(c backend.Call, _ backend.Origin) backend.Ticket {
	p := c.Params()
	f.lent = append(f.lent, len(p) > 0 && &p[0] == &f.msg[bytes.Index(f.msg, []byte(`{"p"`))])
	if f.keep {
		c.(backend.LentCall).Keep()
	}
	f.calls = append(f.calls, c)
	return backend.Ticket{}
}

// TestParamsLentToBorrower: a forwarded call's params are the client's
// message itself during Forward when the forwarder is a backend.Borrower
// (no copy); one that keeps them gets its own copy, which outlives the
// message's buffer, and the call keeps nothing of the message otherwise.
// A forwarder that is no Borrower gets a copy (TestPlainSubscription's
// forwarder reads them after Forward).
func TestParamsLentToBorrower(t *testing.T) {
	for _, keep := range []bool{false, true} {
		f := &lendingForwarder{keep: keep}
		pool := backend.NewPool(4, time.Minute)
		t.Cleanup(pool.Close)
		srv, err := NewServer(Config{Handler: backend.NewMemory(), Pool: pool,
			Forward: func(string) backend.Forwarder { return f },
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s := srv.NewSession(WebSocket, &recSink{}, &fakePoster{ch: make(chan Completion, 16)})
		f.msg = []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"p":1}}`)
		s.HandleMessage(f.msg)
		copy(f.msg, bytes.Repeat([]byte("X"), len(f.msg))) // the read buffer is reused
		if len(f.lent) != 1 || !f.lent[0] {
			t.Fatalf("keep %v: params lent %v, want the message itself during Forward", keep, f.lent)
		}
		want := ""
		if keep {
			want = `{"p":1}`
		}
		if got := string(f.calls[0].Params()); got != want {
			t.Fatalf("keep %v: params after Forward %q, want %q", keep, got, want)
		}
	}
}
