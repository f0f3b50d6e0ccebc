package load

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// IdleConfig is the idle-connections workload: Conns connections are opened
// (and their hello done) and then held without traffic for Hold. Each gets a
// reader goroutine so that pings are answered and server closes are noticed.
type IdleConfig struct {
	Target      Target
	Conns       int
	Concurrency int // dials in flight (0: 64)
	Hold        time.Duration
	// Settle is the quiet time after the last connection before OnStart.
	Settle time.Duration
	Hooks  Hooks
	// Progress, when set, is told how many connections are up during the ramp.
	Progress func(done int)
}

// IdleResult is what the idle workload observed.
type IdleResult struct {
	Conns        int     `json:"conns"` // established
	Failed       int     `json:"failed"`
	RampSeconds  float64 `json:"ramp_seconds"`
	ClosedByPeer int64   `json:"closed_by_peer"` // during the hold
}

// RunIdle runs the idle workload; Hooks.OnStart fires once every connection
// is up and settled, Hooks.OnEnd at the end of the hold.
func RunIdle(ctx context.Context, cfg IdleConfig) (IdleResult, error) {
	conc := cfg.Concurrency
	if conc <= 0 {
		conc = 64
	}
	start := time.Now()
	conns, failed, err := DialMany(ctx, cfg.Target, cfg.Conns, conc, 512, cfg.Progress)
	defer CloseAll(conns)
	res := IdleResult{Conns: len(conns), Failed: failed, RampSeconds: time.Since(start).Seconds()}
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := c.Dialect()
			for {
				msg, err := c.Next()
				if err != nil {
					if !isTimeout(err) {
						closed.Add(1)
					}
					return
				}
				if d.Classify(msg).Kind == KindPing {
					c.WriteText(d.PingReply())
				}
			}
		}()
	}
	serr := sleepUntil(ctx, Now()+int64(cfg.Settle))
	if serr == nil {
		cfg.Hooks.start()
		serr = sleepUntil(ctx, Now()+int64(cfg.Hold))
		cfg.Hooks.end()
	}
	unblock(conns)
	wg.Wait()
	res.ClosedByPeer = closed.Load()
	if err == nil {
		err = serr
	}
	return res, err
}
