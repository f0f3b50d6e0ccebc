package load

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// FanoutConfig is a subscription fan-out run: Subscribers connections each
// subscribe to Topic, then one publisher connection publishes EventSize-byte
// events at Rate per second. Each event carries its scheduled publish time,
// so every delivery's publish-to-receive latency is measured.
type FanoutConfig struct {
	Target Target
	// SubTargets, when set, are where the subscribers connect, spread
	// evenly in order (fan-out across servers: the publisher stays on
	// Target).
	SubTargets  []Target
	Subscribers int
	Topic       string
	Rate        float64 // publishes per second
	EventSize   int     // bytes of the published data object
	Warmup      time.Duration
	Measure     time.Duration
	Hooks       Hooks
	// SubscribeTimeout bounds the wait for every subscription to be
	// confirmed (0: 30 s).
	SubscribeTimeout time.Duration
	// Drain bounds the wait, after the window, for the events published in
	// it to arrive (0: 2 s).
	Drain time.Duration
}

// sharedWindow is a Window published to reader goroutines after they start.
type sharedWindow struct{ start, end atomic.Int64 }

func (w *sharedWindow) in(t int64) bool { return t >= w.start.Load() && t < w.end.Load() }

type subscriber struct {
	c      *Conn
	lat    LatBuf
	closed int64
	errors int64
	ok     bool
}

// read counts the events received inside the window into delivered (and
// records their latency), and the events published inside the window into
// published, whenever they arrive.
func (s *subscriber) read(win *sharedWindow, established, failed, delivered, published *atomic.Int64) {
	defer s.lat.Flush()
	d := s.c.Dialect()
	for {
		msg, err := s.c.Next()
		if err != nil {
			return
		}
		now := s.c.At()
		m := d.Classify(msg)
		switch m.Kind {
		case KindPing:
			s.c.WriteText(d.PingReply())
		case KindReply:
			if !s.ok && m.HasID && m.ID == IDBase {
				s.ok = true
				established.Add(1)
			}
		case KindError:
			s.errors++
			if !s.ok && m.HasID && m.ID == IDBase {
				failed.Add(1)
			}
		case KindClosed:
			s.closed++
		case KindEvent:
			t, ok := EventTime(msg)
			if !ok {
				break
			}
			if win.in(now) {
				delivered.Add(1)
				s.lat.Add(now - t)
			}
			if win.in(t) {
				published.Add(1)
			}
		}
	}
}

// RunFanout runs the fan-out workload. Deliveries counts the events received
// in the window, Rate is Deliveries per second, and Latency runs from the
// moment the publisher sent the event to its receipt. The publisher sends on
// a fixed schedule; when the generator itself is late (SendLag) the event
// carries the actual send time, so the generator's lateness is not charged to
// the server (the server cannot deliver what it has not been sent). Lost
// counts deliveries of events published in the window that had not arrived
// by the end of the drain.
func RunFanout(ctx context.Context, cfg FanoutConfig) (Result, error) {
	d := cfg.Target.Dialect
	subReq, subOff, ok := d.Subscribe(cfg.Topic)
	data, tOff := EventData(cfg.EventSize)
	pubReq, pubOff, ok2 := d.Publish(cfg.Topic, data)
	if !ok || !ok2 {
		return Result{}, ErrNotSupported
	}
	if cfg.Rate <= 0 {
		return Result{}, fmt.Errorf("load: rate %v must be positive", cfg.Rate)
	}
	tPos := bytes.Index(pubReq, data) + tOff
	timeout := cfg.SubscribeTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	targets := cfg.SubTargets
	if len(targets) == 0 {
		targets = []Target{cfg.Target}
	}
	var conns []*Conn
	defer func() { CloseAll(conns) }()
	for i, t := range targets {
		n := cfg.Subscribers / len(targets)
		if i < cfg.Subscribers%len(targets) {
			n++
		}
		cs, _, err := DialMany(ctx, t, n, 64, 4096, nil)
		conns = append(conns, cs...)
		if err != nil {
			return Result{Subscribers: len(conns)}, fmt.Errorf("dial %s: %w", t.Addr, err)
		}
	}
	pub, err := Dial(ctx, cfg.Target, 0)
	if err != nil {
		return Result{}, fmt.Errorf("dial publisher: %w", err)
	}
	defer pub.Close()

	rec := NewRecorder()
	win := &sharedWindow{}
	win.start.Store(math.MaxInt64)
	win.end.Store(math.MaxInt64)
	var established, failed, delivered, arrived atomic.Int64
	subs := make([]*subscriber, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		subs[i] = &subscriber{c: c, lat: LatBuf{R: rec}}
		wg.Add(1)
		go func() { defer wg.Done(); subs[i].read(win, &established, &failed, &delivered, &arrived) }()
	}
	stop := func() { unblock(conns); unblock([]*Conn{pub}); wg.Wait() }
	for _, c := range conns {
		if err := c.Write(NewTemplate(subReq, c.Mask(), 0, subOff).Append(nil, IDOf(0))); err != nil {
			stop()
			return Result{}, fmt.Errorf("subscribe: %w", err)
		}
	}
	deadline := time.Now().Add(timeout)
	for established.Load()+failed.Load() < int64(len(conns)) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if n := established.Load(); n < int64(len(conns)) {
		stop()
		return Result{Subscribers: int(n)}, fmt.Errorf("%w: %d of %d subscriptions confirmed (%d refused)",
			ErrNotEstablished, n, len(conns), failed.Load())
	}

	// The publisher: reads its replies on its own goroutine and times them
	// from the scheduled publish (the request's round trip).
	var pubErrors atomic.Int64
	pubSent := make([]atomic.Int64, 4096)
	rttRec := NewRecorder()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rtt := LatBuf{R: rttRec}
		defer rtt.Flush()
		for {
			msg, err := pub.Next()
			if err != nil {
				return
			}
			m := d.Classify(msg)
			switch m.Kind {
			case KindError:
				pubErrors.Add(1)
			case KindPing:
				pub.WriteText(d.PingReply())
			}
			if m.Kind == KindReply && m.HasID && m.ID >= IDBase {
				if t := pubSent[(m.ID-IDBase)%uint64(len(pubSent))].Swap(0); t != 0 {
					rtt.Add(pub.At() - t)
				}
			}
		}
	}()
	tmpl := NewTemplate(pubReq, pub.Mask(), 0, pubOff, [2]int{tPos, TimeWidth})
	wbuf := make([]byte, 0, tmpl.Len())
	t0 := Now() + int64(10*time.Millisecond)
	w := Window{Start: t0 + int64(cfg.Warmup), End: t0 + int64(cfg.Warmup+cfg.Measure)}
	win.start.Store(w.Start)
	win.end.Store(w.End)
	pacer := NewPacer()
	defer pacer.Close()
	pacer.ForRate(cfg.Rate)
	interval := 1e9 / cfg.Rate
	var published int64
	lagRec := NewRecorder()
	lag := LatBuf{R: lagRec}
	started := false
	var serr error
	for i := int64(0); ; i++ {
		due := t0 + int64(float64(i)*interval)
		if !started && due >= w.Start {
			if serr = sleepUntil(ctx, w.Start); serr != nil {
				break
			}
			cfg.Hooks.start()
			started = true
		}
		if due >= w.End {
			break
		}
		if !pacer.Due(due) {
			if serr = ctx.Err(); serr != nil {
				break
			}
			pacer.Wait(due)
		}
		now := Now()
		start := now
		if w.In(due) {
			lag.Add(max(now-due, 0))
		}
		wbuf = tmpl.AppendWith(wbuf[:0], IDOf(uint64(i)), TimeBase+uint64(start))
		pubSent[uint64(i)%uint64(len(pubSent))].Store(start)
		if serr = pub.Write(wbuf); serr != nil {
			break
		}
		if w.In(start) {
			published++
		}
	}
	if serr == nil {
		serr = sleepUntil(ctx, w.End)
	}
	if started {
		cfg.Hooks.end()
	}
	drain := cfg.Drain
	if drain <= 0 {
		drain = 2 * time.Second
	}
	want := published * int64(len(conns))
	for end := time.Now().Add(drain); arrived.Load() < want && time.Now().Before(end) && ctx.Err() == nil; {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	res := Result{Conns: len(conns) + 1, Subscribers: len(conns), Seconds: w.Seconds(), Published: published,
		Errors: pubErrors.Load()}
	res.Deliveries = delivered.Load()
	res.Lost = max(want-arrived.Load(), 0)
	for _, s := range subs {
		res.ClosedByPeer += s.closed
		res.Errors += s.errors
	}
	res.Requests = res.Deliveries
	res.Rate = float64(res.Deliveries) / res.Seconds
	res.Latency = rec.Latency()
	l := rttRec.Latency()
	res.PublishRTT = &l
	lag.Flush()
	sl := lagRec.Latency()
	res.SendLag = &sl
	return res, serr
}
