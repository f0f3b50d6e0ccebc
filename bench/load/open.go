package load

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
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
	// Drain bounds the wait, after the window, for replies still
	// outstanding (0: 2 s).
	Drain time.Duration
	// Spin makes the generator poll its sockets without ever parking, and
	// send each request exactly when due instead of a Quantum at a time.
	// For a generator that has its core to itself: a parked generator's
	// core halts, and on a virtual machine a halted vCPU can wake tens of
	// microseconds, sometimes milliseconds, late, which then adds to every
	// measured latency. The generator's CPU time then includes the
	// spinning; SpinIdle reports how much of it found nothing to do. Other
	// goroutines get the P only every spinYield, and see their sockets
	// ready only through sysmon's network poll (every 10 ms): do not spin
	// while they have timely work (W5's storm).
	Spin  bool
	Hooks Hooks
	// Conns to use instead of dialling (they stay open); Conns is ignored.
	// They must not be used by anyone else during the run.
	Reuse []*Conn
}

// openRing is the number of requests one connection may have outstanding;
// a request scheduled on a connection with that many is skipped. A power of
// two (loopConn.ring).
const openRing = 1024

// openLoop is the state of one open-loop run: one goroutine sends every
// request on schedule and reads every reply, over all connections (see
// poller). Every field is owned by that goroutine.
type openLoop struct {
	loopCore
	cfg      OpenConfig
	conns    []*loopConn
	t0       int64
	interval float64
	i        int64 // schedule index of the next request to send
	drain    time.Duration

	started, ended bool
	drainEnd       int64

	lag           LatBuf
	sent, skipped int64
}

// RunOpen runs a fixed-rate workload. The schedule is one send every 1/Rate
// seconds; one goroutine sends every request and reads every reply, waking
// on a timerfd and on readable sockets in its own epoll set (see poller); it
// sends at once what is due within the next Quantum (with Spin it polls
// instead, and sends each request when due). The generator's own
// lateness is reported as SendLag. A connection the server closes is counted
// in ClosedByPeer, its outstanding requests are not waited for, and the
// requests later scheduled on it are Skipped; RunOpen then returns
// ErrClosedByPeer with the result. Connections it dialled are closed when it
// returns; Reuse connections are handed back usable.
func RunOpen(ctx context.Context, cfg OpenConfig) (Result, error) {
	if cfg.Rate <= 0 {
		return Result{}, fmt.Errorf("load: rate %v must be positive", cfg.Rate)
	}
	conns := cfg.Reuse
	if conns == nil {
		var err error
		conns, _, err = DialMany(ctx, cfg.Target, cfg.Conns, 64, cfg.ReadBuf, nil)
		defer CloseAll(conns)
		if err != nil {
			return Result{Conns: len(conns)}, fmt.Errorf("dial: %w", err)
		}
	}
	if len(conns) == 0 {
		return Result{}, errors.New("load: open loop without connections")
	}
	p, err := newPoller(256)
	if err != nil {
		return Result{Conns: len(conns)}, err
	}
	defer p.Close()
	rec, lagRec := NewRecorder(), NewRecorder()
	l := &openLoop{cfg: cfg, loopCore: loopCore{p: p, d: conns[0].Dialect(), lat: LatBuf{R: rec}},
		interval: 1e9 / cfg.Rate, lag: LatBuf{R: lagRec}, drain: cfg.Drain}
	if l.drain <= 0 {
		l.drain = 2 * time.Second
	}
	defer detach(conns)
	for i, c := range conns {
		fd, err := c.attach()
		if err != nil {
			return Result{Conns: len(conns)}, fmt.Errorf("attach: %w", err)
		}
		t := NewTemplate(cfg.Request, c.Mask(), 0, cfg.IDOff)
		o := &loopConn{c: c, fd: fd, tag: i, tmpl: t, ring: make([]slot, openRing),
			wbuf: make([]byte, 0, t.Len())}
		l.conns = append(l.conns, o)
		if err := p.add(fd, i, false); err != nil {
			return Result{Conns: len(conns)}, fmt.Errorf("epoll_ctl: %w", err)
		}
		// What a reused connection buffered before the run would not make
		// its socket readable: read it now (stray replies of an earlier
		// run are counted as unmatched).
		l.read(o)
	}
	l.t0 = Now() + int64(10*time.Millisecond)
	l.win = Window{Start: l.t0 + int64(cfg.Warmup), End: l.t0 + int64(cfg.Warmup+cfg.Measure)}
	serr := l.run(ctx)
	res := l.result(len(conns), rec)
	res.Sent, res.Skipped, res.ClosedByPeer = l.sent, l.skipped, int64(l.dropped)
	l.lag.Flush()
	lag := lagRec.Latency()
	res.SendLag = &lag
	if serr == nil && l.dropped > 0 {
		serr = fmt.Errorf("%w: %d of %d (first: %v)", ErrClosedByPeer, l.dropped, len(conns), l.firstErr)
	}
	return res, serr
}

// run is the loop: send what is due, wait for a reply or the next due time,
// read what arrived; after the window, wait for the outstanding replies up to
// the drain time. It returns when that is over, when every connection is
// closed, or when ctx is done.
func (l *openLoop) run(ctx context.Context) error {
	done := ctx.Done()
	for {
		now := Now()
		if !l.started && now >= l.win.Start {
			l.cfg.Hooks.start()
			l.started = true
			now = Now()
		}
		l.sendDue(now)
		if !l.ended && l.due(l.i) >= l.win.End && now >= l.win.End {
			if l.started {
				l.cfg.Hooks.end()
			}
			l.ended = true
			l.drainEnd = Now() + int64(l.drain)
		}
		if l.ended && (l.outstanding == 0 || now >= l.drainEnd) {
			return nil
		}
		if l.dropped == len(l.conns) {
			if l.started && !l.ended {
				l.cfg.Hooks.end()
			}
			return nil
		}
		select {
		case <-done:
			if l.started && !l.ended {
				l.cfg.Hooks.end()
			}
			return ctx.Err()
		default:
		}
		evs, err := l.p.await(now, l.nextWake(now), l.cfg.Spin, l.win, &l.spinIdle)
		if err != nil {
			return err
		}
		// A burst of replies (a server that stalled, then answered them
		// all) takes a while to read: keep sending on schedule meanwhile.
		next := l.due(l.i) - l.ahead()
		for _, ev := range evs {
			l.event(ev)
			if now := Now(); now >= next {
				l.sendDue(now)
				next = l.due(l.i) - l.ahead()
			}
		}
	}
}

// ahead is how early requests are sent: a Quantum plus the timer's lead
// when the loop parks between sends, nothing when it spins.
func (l *openLoop) ahead() int64 {
	if l.cfg.Spin {
		return 0
	}
	return l.p.lead + Quantum
}

// due is the scheduled send time of request i.
func (l *openLoop) due(i int64) int64 { return l.t0 + int64(float64(i)*l.interval) }

// nextWake is when the loop must next look at the clock: the next request's
// due time (or the window's edges, or the end of the drain), and at least
// every maxPark for the context.
func (l *openLoop) nextWake(now int64) int64 {
	next := now + maxPark
	switch {
	case !l.ended:
		next = min(next, l.due(l.i), l.win.End)
		if !l.started {
			next = min(next, l.win.Start)
		}
	default:
		next = min(next, l.drainEnd)
	}
	return next
}

// sendDue sends every request due within ahead (a Quantum plus the
// poller's lead, as Pacer.Due; nothing when spinning), window requests only
// once the window's start hook has run.
func (l *openLoop) sendDue(now int64) {
	limit := now + l.ahead()
	if !l.started {
		limit = min(limit, l.win.Start-1)
	}
	for {
		due := l.due(l.i)
		if due >= l.win.End || due > limit {
			return
		}
		o := l.conns[l.i%int64(len(l.conns))]
		l.i++
		l.send(o, due)
	}
}

// send writes the next request of o, scheduled at due.
func (l *openLoop) send(o *loopConn, due int64) {
	if o.closed {
		l.skipped++
		return
	}
	seq := o.next
	s := o.slot(seq)
	if s.sent != 0 {
		l.skipped++ // the connection has openRing requests outstanding
		return
	}
	o.wbuf = o.tmpl.Append(o.wbuf[:0], IDOf(seq))
	now := Now()
	if err := o.c.Write(o.wbuf); err != nil {
		l.skipped++
		if err != errBacklog {
			l.drop(o, err)
		}
		return
	}
	o.next++
	*s = slot{seq: seq, sent: min(due, now)}
	o.out++
	l.outstanding++
	l.sent++
	if l.win.In(due) {
		l.lag.Add(max(now-due, 0))
	}
	l.watchOut(o)
}

// event handles one poller event.
func (l *openLoop) event(ev unix.EpollEvent) {
	if ev.Fd == timerTag {
		l.p.fired(Now())
		return
	}
	o := l.conns[ev.Fd]
	if o.closed {
		return
	}
	if ev.Events&unix.EPOLLOUT != 0 {
		if !l.writable(o) {
			return
		}
		l.watchOut(o)
	}
	if ev.Events&^uint32(unix.EPOLLOUT) != 0 {
		l.read(o)
	}
}

// read handles every message that arrived on o.
func (l *openLoop) read(o *loopConn) {
	o.c.readable()
	for {
		msg, err := o.c.Next()
		if err != nil {
			if err != errWouldBlock {
				l.drop(o, err)
			}
			return
		}
		l.handle(o, msg, o.c.At())
		if o.closed {
			return
		}
	}
}
