package load

import (
	"context"
	"fmt"
	"sync"
	"time"
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
	Hooks   Hooks
	// Conns to use instead of dialling (they stay open); Conns is ignored.
	Reuse []*Conn
}

// slot is one request in flight: its sequence number and send time.
type slot struct {
	seq  uint64
	sent int64 // 0: free
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

// closedWorker drives one connection of a closed-loop run. Every field is
// owned by its goroutine.
type closedWorker struct {
	c      *Conn
	d      Dialect
	tmpl   *Template
	win    Window
	window int

	ring []slot
	mask uint64
	next uint64 // next sequence number
	from uint64 // first sequence number appended since the last flush
	out  int    // requests in flight
	wbuf []byte
	lat  LatBuf

	replies, errors, unmatched int64
	err                        error
}

func newClosedWorker(c *Conn, req []byte, idOff, frag, window int, win Window, rec *Recorder) *closedWorker {
	n := ringSize(window)
	t := NewTemplate(req, c.Mask(), frag, idOff)
	return &closedWorker{
		c: c, d: c.Dialect(), tmpl: t, win: win, window: window,
		ring: make([]slot, n), mask: uint64(n - 1),
		wbuf: make([]byte, 0, window*t.Len()),
		lat:  LatBuf{R: rec},
	}
}

// push appends the next request to the write buffer.
func (w *closedWorker) push() {
	w.wbuf = w.tmpl.Append(w.wbuf, IDOf(w.next))
	w.next++
	w.out++
}

// stamp records the current time as the send time of the requests appended
// since the last stamp.
func (w *closedWorker) stamp() {
	now := Now()
	for s := w.from; s < w.next; s++ {
		w.ring[s&w.mask] = slot{seq: s, sent: now}
	}
	w.from = w.next
}

// flush stamps the requests appended since the last flush and writes them
// with one syscall.
func (w *closedWorker) flush() error {
	if len(w.wbuf) == 0 {
		return nil
	}
	w.stamp()
	err := w.c.Write(w.wbuf)
	w.wbuf = w.wbuf[:0]
	return err
}

// handle processes one server message; it reports whether the message
// answered a request of ours.
func (w *closedWorker) handle(msg []byte, now int64) {
	m := w.d.Classify(msg)
	switch m.Kind {
	case KindPing:
		w.c.WriteText(w.d.PingReply())
		return
	case KindReply, KindError:
	default:
		return
	}
	if m.Kind == KindError {
		w.errors++
	}
	if !m.HasID || m.ID < IDBase {
		return
	}
	seq := m.ID - IDBase
	s := &w.ring[seq&w.mask]
	if s.sent == 0 || s.seq != seq {
		w.unmatched++
		return
	}
	if w.win.In(now) {
		w.replies++
		w.lat.Add(now - s.sent)
	}
	s.sent = 0
	w.out--
	if now < w.win.End {
		w.push()
	}
}

func (w *closedWorker) run() {
	defer w.lat.Flush()
	for range w.window {
		w.push()
	}
	if w.err = w.flush(); w.err != nil {
		return
	}
	for {
		msg, err := w.c.Next()
		if err != nil {
			if !isTimeout(err) {
				w.err = err
			}
			return
		}
		now := w.c.At()
		w.handle(msg, now)
		if !w.c.Ready() {
			if w.err = w.flush(); w.err != nil {
				return
			}
		}
		if w.out == 0 && now >= w.win.End {
			return
		}
	}
}

// RunClosed runs a closed-loop workload and returns what it measured in its
// window. Connections it dialled are closed when it returns.
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
	window := max(cfg.Window, 1)
	rec := NewRecorder()
	t0 := Now()
	win := Window{Start: t0 + int64(cfg.Warmup), End: t0 + int64(cfg.Warmup+cfg.Measure)}
	workers := make([]*closedWorker, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		workers[i] = newClosedWorker(c, cfg.Request, cfg.IDOff, cfg.Frag, window, win, rec)
		wg.Add(1)
		go func() { defer wg.Done(); workers[i].run() }()
	}
	err := sleepUntil(ctx, win.Start)
	if err == nil {
		cfg.Hooks.start()
		err = sleepUntil(ctx, win.End)
		cfg.Hooks.end()
	}
	grace := 2 * time.Second
	if err != nil {
		grace = 0
	}
	waitOrUnblock(&wg, grace, conns)
	if cfg.Reuse != nil {
		for _, c := range conns {
			c.nc.SetReadDeadline(time.Time{})
		}
	}
	res := Result{Conns: len(conns), Seconds: win.Seconds()}
	var werr error
	for _, w := range workers {
		res.Requests += w.replies
		res.Errors += w.errors
		res.Unmatched += w.unmatched
		if werr == nil && w.err != nil {
			werr = w.err
		}
	}
	res.Rate = float64(res.Requests) / res.Seconds
	res.Latency = rec.Latency()
	if err != nil {
		return res, err
	}
	if res.Requests == 0 && werr != nil {
		return res, werr
	}
	return res, nil
}
