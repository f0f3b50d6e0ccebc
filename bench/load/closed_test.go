package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// windowServer answers a closed loop in batches: it holds a connection's
// requests until it has exactly window of them, then answers them all with
// one write, in reverse order. A client that keeps fewer than window requests
// in flight therefore gets no reply at all, and one that keeps more is caught
// (over). Requests are echoed back unchanged (the raw dialect), or, with
// centrifuge set, answered as centrifuge rpc replies, the batch's replies
// newline-separated in one frame (after the connect reply). With ping set
// every batch carries a ping the client must answer: centrifuge's {} first
// in the batch's frame, or a WebSocket ping frame after the replies; pings
// and pongs are counted.
type windowServer struct {
	ln         net.Listener
	window     int
	centrifuge bool
	ping       bool

	over, batches, pings, pongs atomic.Int64
}

func startWindowServer(t *testing.T, s *windowServer) *windowServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(nc)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *windowServer) target() Target {
	var d Dialect = Raw{}
	if s.centrifuge {
		d = Centrifuge{}
	}
	return Target{Addr: s.ln.Addr().String(), Dialect: d}
}

func (s *windowServer) serve(nc net.Conn) {
	defer nc.Close()
	if _, err := ws.Upgrade(nc); err != nil {
		return
	}
	br := bufio.NewReader(nc)
	var held [][]byte
	var msg []byte // a fragmented message so far
	for {
		h, err := ws.ReadHeader(br)
		if err != nil {
			return
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(br, p); err != nil {
			return
		}
		if h.Masked {
			ws.Cipher(p, h.Mask, 0)
		}
		switch h.OpCode {
		case ws.OpPong:
			s.pongs.Add(1)
			continue
		case ws.OpText, ws.OpContinuation:
		default:
			return
		}
		msg = append(msg, p...)
		if !h.Fin {
			continue
		}
		m := msg
		msg = nil
		if s.centrifuge {
			switch {
			case string(m) == "{}":
				s.pongs.Add(1)
				continue
			case bytes.Contains(m, []byte(`"connect":`)):
				nc.Write(serverFrame(ws.OpText, true, []byte(`{"id":1,"connect":{"client":"c"}}`)))
				continue
			}
		}
		if held = append(held, m); len(held) > s.window {
			s.over.Add(1)
		}
		if len(held) < s.window {
			continue
		}
		var out, lines []byte
		if s.ping {
			s.pings.Add(1)
			if s.centrifuge {
				lines = append(lines, "{}\n"...)
			}
		}
		for i := len(held) - 1; i >= 0; i-- {
			r := held[i]
			if !s.centrifuge {
				out = append(out, serverFrame(ws.OpText, true, r)...)
				continue
			}
			// {"id":<10 digits>,"rpc":...} -> {"id":<10 digits>,"rpc":{"data":{}}}
			lines = append(lines, r[:len(`{"id":`)+IDWidth]...)
			lines = append(lines, `,"rpc":{"data":{}}}`...)
			if i > 0 {
				lines = append(lines, '\n')
			}
		}
		if s.centrifuge {
			out = serverFrame(ws.OpText, true, lines)
		} else if s.ping {
			// After the replies: the client must write its next batch
			// although the last thing it read was no reply.
			out = append(out, serverFrame(ws.OpPing, true, []byte("pp"))...)
		}
		if _, err := nc.Write(out); err != nil {
			return
		}
		s.batches.Add(1)
		held = held[:0]
	}
}

// TestRunClosedWindow runs the closed loop against windowServer: every
// connection must keep exactly its window in flight (fewer would stall the
// server, more is counted), every reply must be matched (they come back in
// reverse order), and the run must end cleanly, parked and spinning.
func TestRunClosedWindow(t *testing.T) {
	tests := []struct {
		name          string
		conns, window int
		size, frag    int
		centrifuge    bool
		ping          bool
		spin          bool
	}{
		{name: "w1", conns: 20, window: 1, size: 16},
		{name: "w1 spinning", conns: 20, window: 1, size: 16, spin: true},
		{name: "pipelined", conns: 3, window: 16, size: 100},
		{name: "pipelined spinning", conns: 3, window: 16, size: 100, spin: true},
		{name: "fragmented", conns: 2, window: 3, size: 5000, frag: 1024},
		{name: "ws pings", conns: 2, window: 4, size: 16, ping: true},
		{name: "centrifuge multi per frame", conns: 3, window: 8, size: 16, centrifuge: true},
		{name: "centrifuge pings spinning", conns: 3, window: 8, size: 16, centrifuge: true, ping: true, spin: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			watchdog(t, 30*time.Second)
			srv := startWindowServer(t, &windowServer{window: tt.window, centrifuge: tt.centrifuge, ping: tt.ping})
			tg := srv.target()
			req, off := EchoOfSize(tg.Dialect, tt.size)
			var hooks [2]int64
			const warmup, measure = 30 * time.Millisecond, 300 * time.Millisecond
			began, b0 := time.Now(), Now()
			res, err := RunClosed(testCtx(t), ClosedConfig{Target: tg, Conns: tt.conns, Window: tt.window,
				Request: req, IDOff: off, Frag: tt.frag, Warmup: warmup, Measure: measure, Spin: tt.spin,
				Hooks: Hooks{OnStart: func() { hooks[0] = Now() }, OnEnd: func() { hooks[1] = Now() }}})
			if err != nil {
				t.Fatal(err)
			}
			// A connection with a request more than its window in flight
			// ends the run with that request held by the server: the run
			// then waits out the drain.
			if took := time.Since(began); took > warmup+measure+closedDrain/2 {
				t.Fatalf("took %v: requests left unanswered", took)
			}
			if res.Requests < int64(tt.window) || res.Errors != 0 || res.Unmatched != 0 || res.Conns != tt.conns {
				t.Fatalf("result %+v", res)
			}
			if res.Latency.Count != res.Requests || res.Latency.P50 <= 0 {
				t.Fatalf("latency %+v for %d replies", res.Latency, res.Requests)
			}
			if n := srv.over.Load(); n != 0 {
				t.Fatalf("a connection had more than %d requests in flight (%d times)", tt.window, n)
			}
			// Every request sent was answered: the run waited for its
			// last replies, which came in whole batches.
			if b := srv.batches.Load(); b*int64(tt.window) < res.Requests {
				t.Fatalf("%d batches of %d for %d replies", b, tt.window, res.Requests)
			}
			if tt.spin != (res.SpinIdle > 0) || res.SpinIdle >= res.Seconds {
				t.Fatalf("spin %v: idle polling %.3f s of %.3f s", tt.spin, res.SpinIdle, res.Seconds)
			}
			checkHooks(t, hooks, b0, warmup, measure)
			if tt.ping {
				// Each ping was answered; the last pongs may still be on
				// their way to the server.
				deadline := time.Now().Add(5 * time.Second)
				for srv.pongs.Load() < srv.pings.Load() && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if p, q := srv.pings.Load(), srv.pongs.Load(); p == 0 || q != p {
					t.Fatalf("%d pings, %d pongs", p, q)
				}
			}
		})
	}
}

// TestRunClosedLarge pipelines 2 MiB per connection: what the socket does
// not take at once goes through the Conn's backlog and the write events.
func TestRunClosedLarge(t *testing.T) {
	watchdog(t, 60*time.Second)
	srv := startTestServer(t, true)
	req, off := EchoOfSize(Raw{}, 512<<10)
	res, err := RunClosed(testCtx(t), ClosedConfig{Target: srv.target(Raw{}), Conns: 1, Window: 4,
		Request: req, IDOff: off, Frag: 64 << 10, ReadBuf: 64 << 10, Warmup: 20 * time.Millisecond, Measure: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Unmatched != 0 || res.Latency.Count != res.Requests {
		t.Fatalf("result %+v", res)
	}
}

// TestClosedLoopHeldBatch writes to a peer that does not read: a batch the
// Conn refuses (its backlog would exceed backlogLimit) must be held, stamped,
// with the socket watched for writing, and go out whole, in order, once the
// peer reads; then the watch stops.
func TestClosedLoopHeldBatch(t *testing.T) {
	watchdog(t, 30*time.Second)
	c, peer := socketPair(t, 4096)
	p, err := newPoller(8)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fd, err := c.attach()
	if err != nil {
		t.Fatal(err)
	}
	defer c.detach(time.Second)
	if err := p.add(fd, 0, false); err != nil {
		t.Fatal(err)
	}
	req, off := EchoOfSize(JSONRPC{}, 800<<10)
	o := newClosedConn(c, 0, req, off, 0, 2)
	o.fd = fd
	l := &closedLoop{conns: []*closedConn{o}, loopCore: loopCore{p: p, d: JSONRPC{},
		win: Window{End: math.MaxInt64}, lat: LatBuf{R: NewRecorder()}}}
	o.push()
	l.flush(o) // the socket takes part of it, the Conn keeps the rest
	if o.held || !o.c.backlogged() || !o.outWatch {
		t.Fatalf("first batch: held %v backlogged %v watched %v", o.held, o.c.backlogged(), o.outWatch)
	}
	o.push()
	l.flush(o) // the backlog and this batch exceed backlogLimit
	if !o.held || !o.outWatch || o.ring[1].sent == 0 {
		t.Fatalf("second batch: held %v watched %v stamp %d", o.held, o.outWatch, o.ring[1].sent)
	}
	want := o.tmpl.Append(o.tmpl.Append(nil, IDOf(0)), IDOf(1))
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(fdReader(peer), int64(len(want))))
		got <- b
	}()
	for o.held || o.c.backlogged() {
		now := Now()
		evs, err := p.await(now, now+int64(time.Second), false, l.win, &l.spinIdle)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			l.event(ev)
		}
		if o.closed {
			t.Fatal(o.err)
		}
	}
	if o.outWatch || len(o.wbuf) != 0 {
		t.Fatalf("after the flush: watched %v, %d bytes left", o.outWatch, len(o.wbuf))
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, want %d: the two requests in order", len(b), len(want))
	}
}

// TestRunClosedClosedByServer: the connections the server closes are dropped
// and the others measured; a run whose every connection is closed returns
// the error.
func TestRunClosedClosedByServer(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := start(t, &testServer{closeEvery: 2})
	req, off := JSONRPC{}.Echo(Params(16))
	res, err := RunClosed(testCtx(t), ClosedConfig{Target: srv.target(JSONRPC{}), Conns: 4, Window: 2,
		Request: req, IDOff: off, Warmup: 20 * time.Millisecond, Measure: 200 * time.Millisecond})
	if err != nil || res.Requests == 0 || res.Unmatched != 0 {
		t.Fatalf("result %+v, %v", res, err)
	}

	srv = start(t, &testServer{closeEvery: 1})
	res, err = RunClosed(testCtx(t), ClosedConfig{Target: srv.target(JSONRPC{}), Conns: 2, Window: 2,
		Request: req, IDOff: off, Warmup: 20 * time.Millisecond, Measure: 100 * time.Millisecond})
	if err == nil || res.Requests != 0 {
		t.Fatalf("every connection closed: result %+v, err %v", res, err)
	}
}

// TestRunClosedStops runs against a server that never answers: the run must
// end by itself after the window and the drain, with nothing matched and no
// error, and promptly when its context is cancelled (end hook run).
func TestRunClosedStops(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := startTestServer(t, false)
	req, off := JSONRPC{}.Call("test/silent", []byte(`{}`))
	const warmup, measure = 20 * time.Millisecond, 100 * time.Millisecond
	for _, spin := range []bool{false, true} {
		began := time.Now()
		res, err := RunClosed(testCtx(t), ClosedConfig{Target: srv.target(JSONRPC{}), Conns: 3, Window: 2,
			Request: req, IDOff: off, Warmup: warmup, Measure: measure, Spin: spin})
		took := time.Since(began)
		if err != nil || res.Requests != 0 {
			t.Fatalf("spin %v: result %+v, %v", spin, res, err)
		}
		if want := warmup + measure + closedDrain; took < want || took > want+2*time.Second {
			t.Fatalf("spin %v: took %v, want about %v", spin, took, want)
		}
	}

	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	ended := false
	_, err := RunClosed(ctx, ClosedConfig{Target: srv.target(JSONRPC{}), Conns: 3, Window: 2,
		Request: req, IDOff: off, Warmup: 10 * time.Millisecond, Measure: 20 * time.Second,
		Hooks: Hooks{OnEnd: func() { ended = true }}})
	if !errors.Is(err, context.DeadlineExceeded) || !ended {
		t.Fatalf("err = %v, end hook %v", err, ended)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("cancelled run took %v", took)
	}
}

// TestRunClosedReuse runs the closed loop twice on the same connections,
// then the open loop: each must hand them back usable.
func TestRunClosedReuse(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := startTestServer(t, false)
	ctx := testCtx(t)
	conns, _, err := DialMany(ctx, srv.target(JSONRPC{}), 3, 3, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(conns)
	req, off := JSONRPC{}.Echo(Params(16))
	for i := range 2 {
		res, err := RunClosed(ctx, ClosedConfig{Window: 4, Request: req, IDOff: off,
			Measure: 100 * time.Millisecond, Reuse: conns, Spin: i == 1})
		if err != nil || res.Requests == 0 || res.Unmatched != 0 || res.Conns != 3 {
			t.Fatalf("run %d: %+v %v", i, res, err)
		}
	}
	res, err := RunOpen(ctx, OpenConfig{Rate: 1000, Request: req, IDOff: off,
		Warmup: 10 * time.Millisecond, Measure: 100 * time.Millisecond, Reuse: conns})
	if err != nil || res.Requests == 0 || res.Unmatched != 0 {
		t.Fatalf("open loop after the closed loop: %+v %v", res, err)
	}
}

// checkHooks checks that a run called its window's hooks at its edges: the
// start hook not before the warm-up was over, the end hook not before the
// measured window was, and each once. (How late a hook may come depends on
// the scheduler of a shared machine, so that is not checked.)
func checkHooks(t *testing.T, hooks [2]int64, began int64, warmup, measure time.Duration) {
	t.Helper()
	if hooks[0] < began+int64(warmup) || hooks[1] < began+int64(warmup+measure) || hooks[1] <= hooks[0] {
		t.Fatalf("hooks at %v, run began at %d: want the start hook %v after it and the end hook %v after that", hooks, began, warmup, measure)
	}
}
