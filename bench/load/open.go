package load

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// OpenConfig is an open-loop (fixed-rate) run: Rate requests per second in
// total, spread round-robin over Conns connections, each request's latency
// measured from its scheduled send time, so a server that stalls is charged
// for every request that should have been sent meanwhile (no coordinated
// omission).
type OpenConfig struct {
	Target  Target
	Conns   int
	Rate    float64 // requests per second, all connections together
	Request []byte
	IDOff   int
	ReadBuf int
	Warmup  time.Duration
	Measure time.Duration
	Hooks   Hooks
	// Conns to use instead of dialling (they stay open); Conns is ignored.
	Reuse []*Conn
}

// openSlot is a request in flight on an open-loop connection; the scheduler
// writes it and the connection's reader reads it, hence the atomics.
type openSlot struct {
	seq   atomic.Uint64
	start atomic.Int64 // scheduled (or earlier actual) send time; 0: free
}

// openConn is one connection of an open-loop run.
type openConn struct {
	c    *Conn
	tmpl *Template
	ring []openSlot
	mask uint64
	next uint64 // scheduler-owned
	wbuf []byte // scheduler-owned

	lat                        LatBuf // reader-owned
	replies, errors, unmatched int64  // reader-owned
	err                        error  // reader-owned
}

const openRing = 1024

func (o *openConn) read(win Window) {
	defer o.lat.Flush()
	d := o.c.Dialect()
	for {
		msg, err := o.c.Next()
		if err != nil {
			if !isTimeout(err) {
				o.err = err
			}
			return
		}
		now := o.c.At()
		m := d.Classify(msg)
		switch m.Kind {
		case KindPing:
			o.c.WriteText(d.PingReply())
			continue
		case KindError:
			o.errors++
		case KindReply:
		default:
			continue
		}
		if !m.HasID || m.ID < IDBase {
			continue
		}
		seq := m.ID - IDBase
		s := &o.ring[seq&o.mask]
		start := s.start.Load()
		if start == 0 || s.seq.Load() != seq {
			o.unmatched++
			continue
		}
		s.start.Store(0)
		if win.In(now) {
			o.replies++
			o.lat.Add(now - start)
		}
	}
}

// RunOpen runs a fixed-rate workload. The schedule is one send every
// 1/Rate seconds from one goroutine paced by a timerfd (see Pacer); the
// generator's own lateness is reported as SendLag.
func RunOpen(ctx context.Context, cfg OpenConfig) (Result, error) {
	conns := cfg.Reuse
	if conns == nil {
		var err error
		conns, _, err = DialMany(ctx, cfg.Target, cfg.Conns, 64, cfg.ReadBuf, nil)
		defer CloseAll(conns)
		if err != nil {
			return Result{Conns: len(conns)}, fmt.Errorf("dial: %w", err)
		}
	}
	if cfg.Rate <= 0 {
		return Result{}, fmt.Errorf("load: rate %v must be positive", cfg.Rate)
	}
	rec, lagRec := NewRecorder(), NewRecorder()
	lag := LatBuf{R: lagRec}
	t0 := Now() + int64(10*time.Millisecond)
	win := Window{Start: t0 + int64(cfg.Warmup), End: t0 + int64(cfg.Warmup+cfg.Measure)}
	ocs := make([]*openConn, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		t := NewTemplate(cfg.Request, c.Mask(), 0, cfg.IDOff)
		ocs[i] = &openConn{c: c, tmpl: t, ring: make([]openSlot, openRing), mask: openRing - 1,
			wbuf: make([]byte, 0, t.Len()), lat: LatBuf{R: rec}}
		wg.Add(1)
		go func() { defer wg.Done(); ocs[i].read(win) }()
	}
	interval := 1e9 / cfg.Rate
	pacer := NewPacer()
	defer pacer.Close()
	pacer.ForRate(cfg.Rate)
	var sent, skipped int64
	started := false
	var serr error
	for i := int64(0); serr == nil; i++ {
		due := t0 + int64(float64(i)*interval)
		if !started && due >= win.Start {
			if err := sleepUntil(ctx, win.Start); err != nil {
				serr = err
				break
			}
			cfg.Hooks.start()
			started = true
		}
		if due >= win.End {
			break
		}
		if !pacer.Due(due) {
			if ctx.Err() != nil {
				serr = ctx.Err()
				break
			}
			pacer.Wait(due)
		}
		o := ocs[i%int64(len(ocs))]
		seq := o.next
		s := &o.ring[seq&o.mask]
		if s.start.Load() != 0 {
			skipped++ // the connection has openRing requests outstanding
			continue
		}
		o.next++
		o.wbuf = o.tmpl.Append(o.wbuf[:0], IDOf(seq))
		now := Now()
		start := min(due, now)
		s.seq.Store(seq)
		s.start.Store(start)
		if win.In(due) {
			lag.Add(max(now-due, 0))
		}
		if err := o.c.Write(o.wbuf); err != nil {
			serr = err
		}
		sent++
	}
	lag.Flush()
	if serr == nil {
		serr = sleepUntil(ctx, win.End)
	}
	if started {
		cfg.Hooks.end()
	}
	waitDrain(ocs, 2*time.Second)
	unblock(conns)
	wg.Wait()
	if cfg.Reuse != nil {
		for _, c := range conns {
			c.nc.SetReadDeadline(time.Time{})
		}
	}
	res := Result{Conns: len(conns), Seconds: win.Seconds(), Sent: sent, Skipped: skipped}
	for _, o := range ocs {
		res.Requests += o.replies
		res.Errors += o.errors
		res.Unmatched += o.unmatched
		if serr == nil && res.Requests == 0 && o.err != nil {
			serr = o.err
		}
	}
	res.Rate = float64(res.Requests) / res.Seconds
	res.Latency = rec.Latency()
	l := lagRec.Latency()
	res.SendLag = &l
	return res, serr
}

// waitDrain polls until no open-loop request is outstanding or grace passes.
func waitDrain(ocs []*openConn, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		busy := false
		for _, o := range ocs {
			for i := range o.ring {
				if o.ring[i].start.Load() != 0 {
					busy = true
					break
				}
			}
			if busy {
				break
			}
		}
		if !busy {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
