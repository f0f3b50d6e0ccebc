package load

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunClosed(t *testing.T) {
	tests := []struct {
		name          string
		raw, tls      bool
		d             Dialect
		conns, window int
		size, frag    int
	}{
		{name: "jsonrpc w1", d: JSONRPC{}, conns: 4, window: 1, size: 16},
		{name: "jsonrpc pipelined", d: JSONRPC{}, conns: 2, window: 32, size: 1024},
		{name: "raw", raw: true, d: Raw{}, conns: 2, window: 8, size: 16},
		{name: "1MiB fragmented", d: JSONRPC{}, conns: 1, window: 1, size: 1 << 20, frag: 64 << 10},
		{name: "64KiB raw", raw: true, d: Raw{}, conns: 1, window: 2, size: 64 << 10},
		{name: "wss jsonrpc w1", tls: true, d: JSONRPC{}, conns: 4, window: 1, size: 16},
		{name: "wss pipelined", tls: true, d: JSONRPC{}, conns: 2, window: 32, size: 1024},
		{name: "wss 1MiB fragmented", tls: true, d: JSONRPC{}, conns: 1, window: 1, size: 1 << 20, frag: 64 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &testServer{raw: tt.raw}
			if tt.tls {
				s.tls = serverTLS(t)
			}
			srv := start(t, s)
			req, off := EchoOfSize(tt.d, tt.size)
			var hooks [2]int64
			measure := 300 * time.Millisecond
			if tt.size > 64<<10 {
				measure = 2 * time.Second // slow under the race detector
			}
			b0 := Now()
			res, err := RunClosed(testCtx(t), ClosedConfig{
				Target: srv.target(tt.d), Conns: tt.conns, Window: tt.window,
				Request: req, IDOff: off, Frag: tt.frag,
				Warmup: 50 * time.Millisecond, Measure: measure,
				Hooks: Hooks{OnStart: func() { hooks[0] = Now() }, OnEnd: func() { hooks[1] = Now() }},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests == 0 || res.Errors != 0 || res.Unmatched != 0 {
				t.Fatalf("result %+v", res)
			}
			if res.Latency.Count != res.Requests || res.Latency.P50 <= 0 {
				t.Fatalf("latency %+v for %d requests", res.Latency, res.Requests)
			}
			checkHooks(t, hooks, b0, 50*time.Millisecond, measure)
		})
	}
}

func TestRunClosedErrors(t *testing.T) {
	srv := startTestServer(t, false)
	req, off := JSONRPC{}.Call("no/such", []byte(`{}`))
	res, err := RunClosed(testCtx(t), ClosedConfig{Target: srv.target(JSONRPC{}), Conns: 1, Window: 4,
		Request: req, IDOff: off, Measure: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors == 0 || res.Errors < res.Requests {
		t.Fatalf("want every reply counted as an error: %+v", res)
	}
}

func TestRunOpen(t *testing.T) {
	srv := startTestServer(t, false)
	req, off := JSONRPC{}.Echo(Params(16))
	res, err := RunOpen(testCtx(t), OpenConfig{Target: srv.target(JSONRPC{}), Conns: 20, Rate: 2000,
		Request: req, IDOff: off, Warmup: 50 * time.Millisecond, Measure: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests < 800 || res.Requests > 1200 || res.Errors != 0 || res.Unmatched != 0 {
		t.Fatalf("want about 1000 replies at 2000/s for 0.5 s: %+v", res)
	}
	if res.SendLag == nil || res.SendLag.Count == 0 {
		t.Fatalf("no send lag recorded: %+v", res)
	}
}

func TestRunFanout(t *testing.T) {
	srv := startTestServer(t, false)
	res, err := RunFanout(testCtx(t), FanoutConfig{Target: srv.target(JSONRPC{}), Subscribers: 20, Topic: "bench",
		Rate: 200, EventSize: 128, Warmup: 50 * time.Millisecond, Measure: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// 100 publishes x 20 subscribers, give or take the window's edges.
	if res.Deliveries < 1600 || res.Deliveries > 2400 || res.Published < 90 || res.Latency.Count != res.Deliveries {
		t.Fatalf("result %+v", res)
	}
	// Subscribers spread over two servers, published on the first: the
	// second's (7 of 15) get nothing, the first's (8) everything.
	other := startTestServer(t, false)
	res, err = RunFanout(testCtx(t), FanoutConfig{Target: srv.target(JSONRPC{}), SubTargets: []Target{srv.target(JSONRPC{}), other.target(JSONRPC{})},
		Subscribers: 15, Topic: "bench", Rate: 200, EventSize: 128, Warmup: 50 * time.Millisecond, Measure: 500 * time.Millisecond})
	if res.Subscribers != 15 || res.Published < 90 || res.Deliveries < 8*res.Published-2*8 || res.Deliveries > 8*res.Published+2*8 ||
		res.Lost < 7*res.Published-2*7 {
		t.Fatalf("over two servers: %v %+v", err, res)
	}
	if _, err := RunFanout(testCtx(t), FanoutConfig{Target: srv.target(Raw{}), Subscribers: 1, Rate: 1}); err != ErrNotSupported {
		t.Fatalf("raw fan-out: err = %v", err)
	}
}

func TestRunChurn(t *testing.T) {
	srv := startTestServer(t, false)
	res, err := RunChurn(testCtx(t), ChurnConfig{Target: srv.target(JSONRPC{}), Workers: 4, Params: Params(16),
		Warmup: 50 * time.Millisecond, Measure: 300 * time.Millisecond, CloseWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 || res.DialErrors != 0 {
		t.Fatalf("result %+v", res)
	}
}

func TestRunIdle(t *testing.T) {
	for _, wss := range []bool{false, true} {
		t.Run(map[bool]string{false: "ws", true: "wss"}[wss], func(t *testing.T) {
			s := &testServer{}
			if wss {
				s.tls = serverTLS(t)
			}
			srv := start(t, s)
			started := false
			res, err := RunIdle(testCtx(t), IdleConfig{Target: srv.target(JSONRPC{}), Conns: 200, Hold: 100 * time.Millisecond,
				Hooks: Hooks{OnStart: func() { started = true }}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Conns != 200 || res.Failed != 0 || res.ClosedByPeer != 0 || !started {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

func TestRunStorm(t *testing.T) {
	srv := startTestServer(t, false)
	res, err := RunStorm(testCtx(t), StormConfig{Target: srv.target(JSONRPC{}), StormConns: 20, Rate: 2000, SleepMs: 50,
		CancelFraction: 0.9, CancelWithin: 5 * time.Millisecond, EchoConns: 2, EchoRate: 500, EchoParams: Params(16),
		Warmup: 50 * time.Millisecond, Quiet: 200 * time.Millisecond, Storm: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sleeps == 0 || res.Cancels == 0 || res.Answered == 0 || res.Unanswered != 0 {
		t.Fatalf("result %+v", res)
	}
	if res.StatsAnswered != 22 || res.Leaked != 0 {
		t.Fatalf("stats: %+v", res)
	}
	if res.EchoQuiet.Requests == 0 || res.EchoStorm.Requests == 0 {
		t.Fatalf("echo: %+v", res)
	}
}

func TestRunHold(t *testing.T) {
	srv := startTestServer(t, false)
	tgt := srv.target(JSONRPC{})
	req, off := JSONRPC{}.Call("edge/gate", []byte(`{"name":"g"}`))
	var idle, arrived, held bool
	release := func() (int64, error) {
		c, err := Dial(testCtx(t), tgt, 0)
		if err != nil {
			return -1, err
		}
		defer c.Close()
		msg, err := Call(c, "edge/open", []byte(`{"name":"g"}`), 5*time.Second)
		if err != nil {
			return -1, err
		}
		n, _ := FindUint(msg, `"released":`)
		return int64(n), nil
	}
	res, err := RunHold(testCtx(t), HoldConfig{Target: tgt, Conns: 8, PerConn: 32, Request: req, IDOff: off,
		Settle: 10 * time.Millisecond, Idle: func() { idle = true }, Held: func() { held = arrived },
		Arrived: func(context.Context) error { arrived = true; return nil }, Release: release})
	if err != nil {
		t.Fatalf("%v: %+v", err, res)
	}
	if !idle || !held || !arrived || res.Calls != 256 || res.Held != 256 || res.Released != 256 || res.Answered != 256 ||
		res.Unanswered != 0 || res.StatsAnswered != 8 || res.Leaked != 0 {
		t.Fatalf("result %+v", res)
	}
}

func TestRunHoldNotHeld(t *testing.T) {
	srv := startTestServer(t, false)
	// edge/echo is answered at once: nothing is held, and RunHold says so
	// (and still collects every answer).
	req, off := JSONRPC{}.Echo(Params(16))
	res, err := RunHold(testCtx(t), HoldConfig{Target: srv.target(JSONRPC{}), Conns: 2, PerConn: 4, Request: req, IDOff: off,
		Drain: time.Second})
	if err == nil || !strings.Contains(err.Error(), "0 of 8 calls held") {
		t.Fatalf("err %v, result %+v", err, res)
	}
}
