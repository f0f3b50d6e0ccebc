package load

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// HoldConfig is the in-flight memory workload: Conns connections each send
// PerConn calls that the server holds unanswered (edge/gate on edge, or on the
// upstream behind a proxy), the caller measures the server with every call
// in flight, then releases them (edge/open), and every call must come back
// answered exactly once.
type HoldConfig struct {
	Target  Target
	Conns   int
	PerConn int
	// Request is the held call (a JSONRPC Call payload) and IDOff the offset
	// of its id digits.
	Request []byte
	IDOff   int
	// Settle is the quiet time after the connections are up (before Idle)
	// and again after every call is held (before Held).
	Settle time.Duration
	// Idle is called once every connection is open and settled, before any
	// call is sent: the baseline.
	Idle func()
	// Arrived, when set, waits until the calls have reached what holds them
	// (the upstream behind a proxy: edge/stats only says that the server the
	// clients talk to has them), after edge/stats counted them and before
	// Settle and Held. A call released before it arrives is never answered.
	Arrived func(ctx context.Context) error
	// Held is called once every call is in flight (edge/stats on every
	// connection counts PerConn of them, Arrived returned) and Settle has
	// passed.
	Held func()
	// Release makes the server answer the held calls (edge/open); it returns
	// how many calls it released, as far as it knows (-1: unknown).
	Release func() (int64, error)
	// Drain bounds the wait for every answer after Release [10s].
	Drain time.Duration
}

// HoldResult is what the in-flight workload observed.
type HoldResult struct {
	Conns        int     `json:"conns"`
	Calls        int64   `json:"calls"`    // sent
	Held         int64   `json:"held"`     // in flight by edge/stats before Held
	Released     int64   `json:"released"` // Release's count (-1: unknown)
	Answered     int64   `json:"answered"` // successful replies, one per call
	Errors       int64   `json:"errors"`   // error replies to calls
	Duplicates   int64   `json:"duplicates,omitempty"`
	Unmatched    int64   `json:"unmatched,omitempty"` // replies whose id was never sent
	Unanswered   int64   `json:"unanswered"`          // calls without a reply after Drain
	DrainSeconds float64 `json:"drain_seconds"`       // from Release to the last answer
	// After the drain: edge/stats summed over every connection.
	StatsAnswered int   `json:"stats_answered"`
	InFlightIDs   int64 `json:"in_flight_ids"`
	Tasks         int64 `json:"tasks"`
	Leaked        int64 `json:"leaked"` // InFlightIDs + Tasks after the drain
}

// holdConn is one connection's bookkeeping; its reader goroutine owns every
// field but c.
type holdConn struct {
	c                                 *Conn
	seen                              []bool
	answered, errors, dups, unmatched int64
	last                              int64 // when the last reply arrived
	done                              chan struct{}
}

func (h *holdConn) read(perConn int) {
	defer close(h.done)
	d := h.c.Dialect()
	for got := 0; got < perConn; {
		msg, err := h.c.Next()
		if err != nil {
			return
		}
		m := d.Classify(msg)
		if (m.Kind != KindReply && m.Kind != KindError) || !m.HasID {
			continue
		}
		seq := m.ID - IDBase
		if m.ID < IDBase || seq >= uint64(perConn) {
			h.unmatched++
			continue
		}
		if h.seen[seq] {
			h.dups++
			continue
		}
		h.seen[seq] = true
		got++
		h.last = Now()
		if m.Kind == KindError {
			h.errors++
		} else {
			h.answered++
		}
	}
}

// RunHold runs the in-flight workload (jsonrpc dialect: it counts the held
// calls with edge/stats). Each connection writes its PerConn calls in one
// write, then edge/stats (answered by the connection itself, in order after
// them) says how many the server holds. The result is returned with an
// error when a call was not held, not answered, or answered twice, or when
// state is left over after the drain.
func RunHold(ctx context.Context, cfg HoldConfig) (HoldResult, error) {
	res := HoldResult{Released: -1}
	if _, ok := cfg.Target.Dialect.(JSONRPC); !ok {
		return res, ErrNotSupported
	}
	drain := cfg.Drain
	if drain <= 0 {
		drain = 10 * time.Second
	}
	conns, _, err := DialMany(ctx, cfg.Target, cfg.Conns, 64, 0, nil)
	defer CloseAll(conns)
	res.Conns = len(conns)
	if err != nil {
		return res, fmt.Errorf("dial: %w", err)
	}
	if err := sleepUntil(ctx, Now()+int64(cfg.Settle)); err != nil {
		return res, err
	}
	if cfg.Idle != nil {
		cfg.Idle()
	}
	hcs := make([]*holdConn, len(conns))
	var buf []byte
	for i, c := range conns {
		hcs[i] = &holdConn{c: c, seen: make([]bool, cfg.PerConn), done: make(chan struct{})}
		t := NewTemplate(cfg.Request, c.Mask(), 0, cfg.IDOff)
		buf = buf[:0]
		for s := range cfg.PerConn {
			buf = t.Append(buf, IDOf(uint64(s)))
		}
		if err := c.Write(buf); err != nil {
			return res, fmt.Errorf("send: %w", err)
		}
		res.Calls += int64(cfg.PerConn)
	}
	// edge/stats is read by the one goroutine here, before the readers
	// start: a call answered early (refused) is counted as not held.
	for _, h := range hcs {
		st, err := Stats(h.c, 10*time.Second)
		if err != nil {
			return res, fmt.Errorf("edge/stats with the calls in flight: %w", err)
		}
		res.Held += st.InFlightIDs
	}
	var herr error
	if res.Held != res.Calls {
		herr = fmt.Errorf("%d of %d calls held by the server (refused or answered early)", res.Held, res.Calls)
	} else if cfg.Arrived != nil {
		herr = cfg.Arrived(ctx)
	}
	if herr == nil {
		if err := sleepUntil(ctx, Now()+int64(cfg.Settle)); err != nil {
			return res, err
		}
		if cfg.Held != nil {
			cfg.Held()
		}
	}
	// Release what is held (all of it, or what there is after a failure) and
	// collect the answers.
	var wg sync.WaitGroup
	for _, h := range hcs {
		wg.Add(1)
		go func() { defer wg.Done(); h.read(cfg.PerConn) }()
	}
	t0 := Now()
	var rerr error
	if cfg.Release != nil {
		res.Released, rerr = cfg.Release()
	}
	deadline := time.NewTimer(drain)
	defer deadline.Stop()
	for _, h := range hcs {
		select {
		case <-h.done:
		case <-deadline.C:
			unblock(conns)
		case <-ctx.Done():
			unblock(conns)
		}
	}
	wg.Wait()
	last := t0
	for _, h := range hcs {
		res.Answered += h.answered
		res.Errors += h.errors
		res.Duplicates += h.dups
		res.Unmatched += h.unmatched
		last = max(last, h.last)
		for _, s := range h.seen {
			if !s {
				res.Unanswered++
			}
		}
	}
	res.DrainSeconds = float64(last-t0) / 1e9
	for _, h := range hcs {
		h.c.NetConn().SetReadDeadline(time.Time{})
		st, err := Stats(h.c, 5*time.Second)
		if err != nil {
			continue
		}
		res.StatsAnswered++
		res.InFlightIDs += st.InFlightIDs
		res.Tasks += st.Tasks
	}
	res.Leaked = res.InFlightIDs + res.Tasks
	switch {
	case herr != nil:
		return res, herr
	case rerr != nil:
		return res, fmt.Errorf("release: %w", rerr)
	case ctx.Err() != nil:
		return res, ctx.Err()
	case res.Unanswered > 0 || res.Errors > 0 || res.Duplicates > 0:
		return res, fmt.Errorf("of %d calls %d answered, %d errors, %d duplicate replies, %d unanswered after %s",
			res.Calls, res.Answered, res.Errors, res.Duplicates, res.Unanswered, drain)
	case res.Released >= 0 && res.Released != res.Calls:
		return res, fmt.Errorf("the gate released %d calls, %d were sent", res.Released, res.Calls)
	case res.StatsAnswered < len(hcs):
		return res, fmt.Errorf("edge/stats answered on %d of %d connections after the drain", res.StatsAnswered, len(hcs))
	case res.Leaked != 0:
		return res, fmt.Errorf("state left after the drain: %d in-flight ids, %d tasks", res.InFlightIDs, res.Tasks)
	}
	return res, nil
}
