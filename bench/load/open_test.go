package load

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
)

// watchdog fails the test with every goroutine's stack if it is still running
// after d: a hung loop shows where it hangs.
func watchdog(t *testing.T, d time.Duration) {
	t.Helper()
	tm := time.AfterFunc(d, func() {
		buf := make([]byte, 1<<20)
		os.Stderr.Write(buf[:runtime.Stack(buf, true)])
		panic("watchdog: " + t.Name() + " still running after " + d.String())
	})
	t.Cleanup(func() { tm.Stop() })
}

func TestRunOpenDialects(t *testing.T) {
	tests := []struct {
		name  string
		raw   bool
		d     Dialect
		conns int
		rate  float64
		spin  bool
	}{
		{name: "jsonrpc", d: JSONRPC{}, conns: 50, rate: 5000},
		{name: "raw", raw: true, d: Raw{}, conns: 50, rate: 5000},
		{name: "one connection", d: JSONRPC{}, conns: 1, rate: 2000},
		{name: "jsonrpc spinning", d: JSONRPC{}, conns: 50, rate: 5000, spin: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			watchdog(t, 30*time.Second)
			srv := startTestServer(t, tt.raw)
			req, off := tt.d.Echo(Params(16))
			var hooks [2]int64
			measure, warmup, b0 := 400*time.Millisecond, 50*time.Millisecond, Now()
			res, err := RunOpen(testCtx(t), OpenConfig{Target: srv.target(tt.d), Conns: tt.conns, Rate: tt.rate,
				Request: req, IDOff: off, Warmup: warmup, Measure: measure, Spin: tt.spin,
				Hooks: Hooks{OnStart: func() { hooks[0] = Now() }, OnEnd: func() { hooks[1] = Now() }}})
			if err != nil {
				t.Fatal(err)
			}
			if tt.spin != (res.SpinIdle > 0) || res.SpinIdle >= res.Seconds {
				t.Fatalf("spin %v: idle spinning %.3f s of %.3f s", tt.spin, res.SpinIdle, res.Seconds)
			}
			want := tt.rate * measure.Seconds()
			if float64(res.Requests) < want*0.7 || float64(res.Requests) > want*1.2 {
				t.Fatalf("want about %.0f replies: %+v", want, res)
			}
			if res.Errors != 0 || res.Unmatched != 0 || res.Skipped != 0 || res.ClosedByPeer != 0 {
				t.Fatalf("result %+v", res)
			}
			if res.Latency.Count != res.Requests || res.SendLag == nil || res.SendLag.Count == 0 {
				t.Fatalf("latency %+v lag %+v for %d replies", res.Latency, res.SendLag, res.Requests)
			}
			checkHooks(t, hooks, b0, warmup, measure)
		})
	}
}

// TestRunOpenLatencyFromSchedule stalls the generator for 60 ms at the start
// of the window (a slow OnStart hook): the requests scheduled meanwhile go out
// late, and their latency must run from when they were scheduled, not from
// when they were sent (no coordinated omission), while the echo itself stays
// fast.
func TestRunOpenLatencyFromSchedule(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := startTestServer(t, false)
	req, off := JSONRPC{}.Echo(Params(16))
	const stall = 60 * time.Millisecond
	res, err := RunOpen(testCtx(t), OpenConfig{Target: srv.target(JSONRPC{}), Conns: 4, Rate: 1000,
		Request: req, IDOff: off, Warmup: 20 * time.Millisecond, Measure: 400 * time.Millisecond,
		Hooks: Hooks{OnStart: func() { time.Sleep(stall) }}}) // the stall itself, not a wait for an effect
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests < 300 || res.Unmatched != 0 {
		t.Fatalf("result %+v", res)
	}
	lo := float64(stall.Microseconds()) * 0.9
	if res.SendLag.Max < lo {
		t.Fatalf("send lag max %.0f us, want the %v stall: %+v", res.SendLag.Max, stall, res.SendLag)
	}
	if res.Latency.Max < res.SendLag.Max*0.99 || res.Latency.Max < lo {
		t.Fatalf("latency max %.0f us does not include the send lag (max %.0f us)", res.Latency.Max, res.SendLag.Max)
	}
	if res.Latency.P50 > float64(stall.Microseconds())/2 {
		t.Fatalf("latency p50 %.0f us: the stall should only touch the requests scheduled during it", res.Latency.P50)
	}
}

// TestRunOpenClosedByServer has the server close every other connection
// after its first request: the run must count them, not wait for their
// outstanding requests (Drain is long), keep measuring the others, and
// report ErrClosedByPeer with the result.
func TestRunOpenClosedByServer(t *testing.T) {
	tests := []struct {
		name       string
		closeFrame bool
	}{
		{name: "socket closed"},
		{name: "close frame", closeFrame: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			watchdog(t, 30*time.Second)
			srv := start(t, &testServer{closeEvery: 2, closeFrame: tt.closeFrame})
			req, off := JSONRPC{}.Echo(Params(16))
			const warmup, measure, drain = 50 * time.Millisecond, 300 * time.Millisecond, 20 * time.Second
			began := time.Now()
			res, err := RunOpen(testCtx(t), OpenConfig{Target: srv.target(JSONRPC{}), Conns: 10, Rate: 2000,
				Request: req, IDOff: off, Warmup: warmup, Measure: measure, Drain: drain})
			took := time.Since(began)
			if !errors.Is(err, ErrClosedByPeer) {
				t.Fatalf("err = %v, want ErrClosedByPeer", err)
			}
			if res.ClosedByPeer != 5 {
				t.Fatalf("closed by peer %d, want 5: %+v", res.ClosedByPeer, res)
			}
			if took > warmup+measure+drain/2 {
				t.Fatalf("took %v: waited for the closed connections' requests", took)
			}
			// The five live connections carry half the schedule; the other
			// half is skipped.
			if res.Requests < 200 || res.Requests > 350 || res.Skipped == 0 || res.Unmatched != 0 {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

// TestRunOpenAllClosed: when the server closes every connection the run ends
// at once instead of running out its schedule.
func TestRunOpenAllClosed(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := start(t, &testServer{closeEvery: 1})
	req, off := JSONRPC{}.Echo(Params(16))
	began := time.Now()
	started, ended := false, false
	res, err := RunOpen(testCtx(t), OpenConfig{Target: srv.target(JSONRPC{}), Conns: 3, Rate: 1000,
		Request: req, IDOff: off, Warmup: 10 * time.Millisecond, Measure: 20 * time.Second,
		Hooks: Hooks{OnStart: func() { started = true }, OnEnd: func() { ended = true }}})
	if !errors.Is(err, ErrClosedByPeer) || res.ClosedByPeer != 3 {
		t.Fatalf("err = %v, result %+v", err, res)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("took %v", took)
	}
	if started != ended {
		t.Fatalf("hooks: started %v, ended %v", started, ended)
	}
}

// TestRunOpenStopsAtDeadline runs against a server that never answers: the
// run must end by itself after the window and the drain, with nothing
// matched, and end promptly when its context is cancelled.
func TestRunOpenStopsAtDeadline(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := startTestServer(t, false)
	req, off := JSONRPC{}.Call("test/silent", []byte(`{}`))
	const warmup, measure, drain = 50 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond
	began := time.Now()
	ended := false
	res, err := RunOpen(testCtx(t), OpenConfig{Target: srv.target(JSONRPC{}), Conns: 5, Rate: 1000,
		Request: req, IDOff: off, Warmup: warmup, Measure: measure, Drain: drain,
		Hooks: Hooks{OnEnd: func() { ended = true }}})
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 0 || res.Sent < 200 || !ended {
		t.Fatalf("result %+v, end hook %v", res, ended)
	}
	if took < warmup+measure+drain || took > warmup+measure+drain+2*time.Second {
		t.Fatalf("took %v, want about %v", took, warmup+measure+drain)
	}

	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	began = time.Now()
	ended = false
	_, err = RunOpen(ctx, OpenConfig{Target: srv.target(JSONRPC{}), Conns: 5, Rate: 1000,
		Request: req, IDOff: off, Warmup: 10 * time.Millisecond, Measure: 20 * time.Second,
		Hooks: Hooks{OnEnd: func() { ended = true }}})
	if !errors.Is(err, context.DeadlineExceeded) || !ended {
		t.Fatalf("err = %v, end hook %v", err, ended)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("cancelled run took %v", took)
	}
}

// TestRunOpenReuse runs twice on the same connections and then a closed
// loop on them: the open loop must hand them back usable (detached, nothing
// left half-read).
func TestRunOpenReuse(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := startTestServer(t, false)
	ctx := testCtx(t)
	conns, _, err := DialMany(ctx, srv.target(JSONRPC{}), 4, 4, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(conns)
	req, off := JSONRPC{}.Echo(Params(16))
	for i := range 2 {
		res, err := RunOpen(ctx, OpenConfig{Rate: 2000, Request: req, IDOff: off,
			Warmup: 20 * time.Millisecond, Measure: 200 * time.Millisecond, Reuse: conns})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if res.Requests < 300 || res.Unmatched != 0 || res.Conns != 4 {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	res, err := RunClosed(ctx, ClosedConfig{Window: 2, Request: req, IDOff: off,
		Measure: 100 * time.Millisecond, Reuse: conns})
	if err != nil || res.Requests == 0 || res.Unmatched != 0 {
		t.Fatalf("closed loop after the open loop: %+v %v", res, err)
	}
}
