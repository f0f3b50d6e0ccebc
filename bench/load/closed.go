package load

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ClosedConfig is a closed-loop run: Conns connections, each keeping Window
// requests in flight (a reply immediately releases the next request).
type ClosedConfig struct {
	Target  Target
	Conns   int
	Window  int
	Request []byte // the request payload (from a Dialect builder)
	IDOff   int    // offset of its id digits
	Frag    int    // split the request into fragments of this many bytes (0: one frame)
	ReadBuf int    // per-connection read buffer (0: DefaultReadBuffer)
	Warmup  time.Duration
	Measure time.Duration
	// Spin makes the loop poll its sockets without ever parking (see
	// OpenConfig.Spin): a parked generator's vCPU halts whenever the server
	// has not answered yet, and waking it is slow on a virtual machine, so
	// that a closed loop against a slower server turns into a latency-bound
	// ping-pong instead of keeping the server busy. The generator's CPU
	// time then includes the polling; SpinIdle reports how much of it found
	// nothing to do. Not while another goroutine of the process has timely
	// work (W7 runs two closed loops side by side).
	Spin  bool
	Hooks Hooks
	// Conns to use instead of dialling (they stay open); Conns is ignored.
	// They must not be used by anyone else during the run.
	Reuse []*Conn
}

// ringSize returns a power of two comfortably above the window, so that a
// slot is reused only long after its request was answered even when replies
// come back out of order.
func ringSize(window int) int {
	n := 64
	for n < 4*window {
		n <<= 1
	}
	return n
}

// closedDrain bounds the wait, after the window, for the replies still
// outstanding.
const closedDrain = 2 * time.Second

// closedConn is one connection of a closed-loop run; wbuf holds the next
// batch. Every field is owned by the loop's goroutine.
type closedConn struct {
	loopConn
	from uint64 // first sequence number appended since the last stamp
}

func newClosedConn(c *Conn, tag int, req []byte, idOff, frag, window int) *closedConn {
	n := ringSize(window)
	t := NewTemplate(req, c.Mask(), frag, idOff)
	return &closedConn{loopConn: loopConn{
		c: c, fd: -1, tag: tag, tmpl: t,
		ring: make([]slot, n),
		wbuf: make([]byte, 0, window*t.Len()),
	}}
}

// push appends the next request to the write buffer.
func (o *closedConn) push() {
	o.wbuf = o.tmpl.Append(o.wbuf, IDOf(o.next))
	o.next++
	o.out++
}

// stamp records the current time as the send time of the requests appended
// since the last stamp.
func (o *closedConn) stamp() {
	now := Now()
	for s := o.from; s < o.next; s++ {
		*o.slot(s) = slot{seq: s, sent: now}
	}
	o.from = o.next
}

// closedLoop is the state of one closed-loop run: one goroutine drives every
// connection, each keeping its window of requests in flight, through a
// poller of its own (see poller and openLoop). Every field is owned by that
// goroutine.
type closedLoop struct {
	loopCore
	cfg   ClosedConfig
	conns []*closedConn

	started, ended bool
	drainEnd       int64
}

// RunClosed runs a closed-loop workload and returns what it measured in its
// window. Each connection writes its whole window at once, then, whenever it
// has consumed every reply it holds, the requests those replies released,
// with one write. One goroutine drives every connection: their sockets sit in
// an epoll set of its own (see poller) that parks in the Go netpoller, or is
// polled without parking with Spin; reads and writes are non-blocking raw
// syscalls, one read per readable socket (no empty reads). After the window
// it waits up to closedDrain for the replies outstanding. A connection that
// fails or that the server closes is dropped (its requests no longer
// waited for); the run returns the first such error only when no reply was
// measured. Connections it dialled are closed when it returns; Reuse
// connections are handed back usable.
func RunClosed(ctx context.Context, cfg ClosedConfig) (Result, error) {
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
		return Result{}, errors.New("load: closed loop without connections")
	}
	window := max(cfg.Window, 1)
	p, err := newPoller(256)
	if err != nil {
		return Result{Conns: len(conns)}, err
	}
	defer p.Close()
	rec := NewRecorder()
	l := &closedLoop{cfg: cfg, loopCore: loopCore{p: p, d: conns[0].Dialect(), lat: LatBuf{R: rec}}}
	defer detach(conns)
	for i, c := range conns {
		o := newClosedConn(c, i, cfg.Request, cfg.IDOff, cfg.Frag, window)
		fd, err := c.attach()
		if err != nil {
			return Result{Conns: len(conns)}, fmt.Errorf("attach: %w", err)
		}
		o.fd = fd
		l.conns = append(l.conns, o)
		if err := p.add(fd, i, false); err != nil {
			return Result{Conns: len(conns)}, fmt.Errorf("epoll_ctl: %w", err)
		}
	}
	t0 := Now()
	l.win = Window{Start: t0 + int64(cfg.Warmup), End: t0 + int64(cfg.Warmup+cfg.Measure)}
	for _, o := range l.conns {
		for range window {
			o.push()
		}
		l.outstanding += window
		l.flush(o)
		// What a reused connection buffered before the run would not make
		// its socket readable: read it now (stray replies of an earlier
		// run are counted as unmatched).
		if !o.closed {
			l.read(o)
		}
	}
	serr := l.run(ctx)
	res := l.result(len(conns), rec)
	if serr != nil {
		return res, serr
	}
	if res.Requests == 0 && l.firstErr != nil {
		return res, l.firstErr
	}
	return res, nil
}

// run is the loop: start and end the window on time, handle what the
// sockets have; after the window, wait for the outstanding replies up to the
// drain time. It returns when that is over or when ctx is done.
func (l *closedLoop) run(ctx context.Context) error {
	done := ctx.Done()
	for {
		now := Now()
		if !l.started && now >= l.win.Start {
			l.cfg.Hooks.start()
			l.started = true
			now = Now()
		}
		if !l.ended && now >= l.win.End {
			l.cfg.Hooks.end()
			l.ended = true
			l.drainEnd = Now() + int64(closedDrain)
		}
		if l.ended && (l.outstanding == 0 || now >= l.drainEnd) {
			return nil
		}
		select {
		case <-done:
			l.stop()
			return ctx.Err()
		default:
		}
		evs, err := l.p.await(now, l.nextWake(now), l.cfg.Spin, l.win, &l.spinIdle)
		if err != nil {
			l.stop()
			return err
		}
		for _, ev := range evs {
			l.event(ev)
		}
	}
}

// stop runs the end hook of a window cut short.
func (l *closedLoop) stop() {
	if l.started && !l.ended {
		l.cfg.Hooks.end()
		l.ended = true
	}
}

// nextWake is when the loop must next look at the clock: the window's
// edges or the end of the drain, and at least every maxPark for the context.
func (l *closedLoop) nextWake(now int64) int64 {
	next := now + maxPark
	switch {
	case !l.started:
		next = min(next, l.win.Start)
	case !l.ended:
		next = min(next, l.win.End)
	default:
		next = min(next, l.drainEnd)
	}
	return next
}

// event handles one poller event.
func (l *closedLoop) event(ev unix.EpollEvent) {
	if ev.Fd == timerTag {
		l.p.fired(Now())
		return
	}
	o := l.conns[ev.Fd]
	if o.closed {
		return
	}
	if ev.Events&unix.EPOLLOUT != 0 {
		if !l.writable(&o.loopConn) {
			return
		}
		if o.held {
			if l.flush(o); o.closed {
				return
			}
		}
		l.watchOut(&o.loopConn)
	}
	if ev.Events&^uint32(unix.EPOLLOUT) != 0 {
		l.read(o)
	}
}

// read handles every message that arrived on o, writing the requests they
// released each time it has consumed every reply it holds.
func (l *closedLoop) read(o *closedConn) {
	o.c.readable()
	for {
		msg, err := o.c.Next()
		if err != nil {
			if err != errWouldBlock {
				l.drop(&o.loopConn, err)
				return
			}
			// Usually flushed already; not when the last complete frame
			// was a control frame or the start of a fragmented message.
			l.flush(o)
			return
		}
		l.handle(o, msg, o.c.At())
		if o.closed {
			return
		}
		if !o.c.Ready() {
			if l.flush(o); o.closed {
				return
			}
		}
	}
}

// flush stamps the requests appended since the last flush and writes them
// with one write. What the socket does not take now the Conn keeps and the
// poller's write events deliver; a batch the Conn refuses (its backlog is
// full) stays in wbuf, stamped, and goes once the backlog drained.
func (l *closedLoop) flush(o *closedConn) {
	if len(o.wbuf) == 0 {
		return
	}
	o.stamp()
	switch err := o.c.Write(o.wbuf); err {
	case nil:
		o.wbuf, o.held = o.wbuf[:0], false
	case errBacklog:
		o.held = true
	default:
		l.drop(&o.loopConn, err)
		return
	}
	l.watchOut(&o.loopConn)
}

// handle processes one server message received at now; a reply inside
// the window releases the next request.
func (l *closedLoop) handle(o *closedConn, msg []byte, now int64) {
	if l.loopCore.handle(&o.loopConn, msg, now) && now < l.win.End {
		o.push()
		l.outstanding++
	}
}
