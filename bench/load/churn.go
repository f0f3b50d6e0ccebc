package load

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// ChurnConfig is the connection churn workload: Workers goroutines each
// repeat connect, upgrade (and the dialect's hello), one echo request, a
// closing handshake, for the whole run. Rate is completed cycles per second
// and Latency the duration of a whole cycle.
type ChurnConfig struct {
	Target  Target
	Workers int
	Params  []byte
	Warmup  time.Duration
	Measure time.Duration
	Hooks   Hooks
	// CloseWait bounds the wait for the server's close frame (0: 1 s).
	CloseWait time.Duration
}

// ChurnResult adds the churn workload's failure counts to Result.
type ChurnResult struct {
	Result
	DialErrors    int64 `json:"dial_errors"`
	CloseTimeouts int64 `json:"close_timeouts"` // server did not finish the closing handshake in CloseWait
}

// RunChurn runs the churn workload.
func RunChurn(ctx context.Context, cfg ChurnConfig) (ChurnResult, error) {
	wait := cfg.CloseWait
	if wait <= 0 {
		wait = time.Second
	}
	req, off := cfg.Target.Dialect.Echo(cfg.Params)
	rec := NewRecorder()
	t0 := Now()
	win := Window{Start: t0 + int64(cfg.Warmup), End: t0 + int64(cfg.Warmup+cfg.Measure)}
	var (
		wg                            sync.WaitGroup
		cycles, errs, dialErrs, slows atomic.Int64
		errMu                         sync.Mutex
		firstErr                      error // guarded by errMu
	)
	for range max(cfg.Workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := LatBuf{R: rec}
			defer lat.Flush()
			buf := make([]byte, 0, len(req)+16)
			for ctx.Err() == nil && Now() < win.End {
				start := Now()
				dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				c, err := Dial(dctx, cfg.Target, 1024)
				cancel()
				if err != nil {
					dialErrs.Add(1)
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				c.nc.SetDeadline(time.Now().Add(5 * time.Second))
				buf = NewTemplate(req, c.Mask(), 0, off).Append(buf[:0], IDOf(0))
				ok := c.Write(buf) == nil
				for ok {
					msg, err := c.Next()
					if err != nil {
						ok = false
						break
					}
					m := c.d.Classify(msg)
					if m.HasID && m.ID == IDOf(0) {
						ok = m.Kind == KindReply
						break
					}
				}
				c.nc.SetDeadline(time.Time{})
				if !c.CloseHandshake(wait) {
					slows.Add(1)
				}
				if !ok {
					errs.Add(1)
					continue
				}
				if end := Now(); win.In(end) {
					cycles.Add(1)
					lat.Add(end - start)
				}
			}
		}()
	}
	err := sleepUntil(ctx, win.Start)
	if err == nil {
		cfg.Hooks.start()
		err = sleepUntil(ctx, win.End)
		cfg.Hooks.end()
	}
	wg.Wait()
	res := ChurnResult{Result: Result{Conns: cfg.Workers, Requests: cycles.Load(), Errors: errs.Load(),
		Seconds: win.Seconds(), Latency: rec.Latency()},
		DialErrors: dialErrs.Load(), CloseTimeouts: slows.Load()}
	res.Rate = float64(res.Requests) / res.Seconds
	if err == nil && res.Requests == 0 {
		err = firstErr
	}
	return res, err
}
