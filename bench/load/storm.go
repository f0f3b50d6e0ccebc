package load

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// StormConfig is edge's cancellation storm: StormConns connections send
// edge/sleep requests at Rate per second in total, and cancel
// CancelFraction of them with $/cancelRequest within CancelWithin, while
// EchoConns other connections carry echo requests at EchoRate per second
// (open loop, so that the probe's load is the same in both phases) whose
// latency is measured first in a quiet phase, then during the storm. Afterwards every
// connection is asked edge/stats: once everything settled, every in-flight
// id and task must be gone.
type StormConfig struct {
	Target         Target
	StormConns     int
	Rate           float64
	SleepMs        int
	CancelFraction float64
	CancelWithin   time.Duration
	EchoConns      int
	EchoRate       float64
	EchoParams     []byte
	Warmup         time.Duration
	Quiet          time.Duration
	Storm          time.Duration
	Hooks          Hooks // around the measured storm window
}

// StormResult is what the storm measured.
type StormResult struct {
	EchoQuiet         Result  `json:"echo_quiet"`
	EchoStorm         Result  `json:"echo_storm"`
	Sleeps            int64   `json:"sleeps"`
	Cancels           int64   `json:"cancels"`
	Answered          int64   `json:"answered"`           // responses to sleeps that were not cancelled
	AnsweredCancelled int64   `json:"answered_cancelled"` // responses to cancelled sleeps that arrived after the cancel was sent (legal only when completion won the race)
	CrossedCancel     int64   `json:"crossed_cancel"`     // responses already received (not yet read) when the generator sent the cancel
	CancelDelay       Latency `json:"cancel_delay"`       // from a sleep's send to its cancel's send (the generator's promise: within CancelWithin)
	Errors            int64   `json:"errors"`
	Unanswered        int64   `json:"unanswered"` // uncancelled sleeps still without a response after settling
	StatsConns        int     `json:"stats_conns"`
	StatsAnswered     int     `json:"stats_answered"`
	InFlightIDs       int64   `json:"in_flight_ids"`
	Tasks             int64   `json:"tasks"`
	Subscriptions     int64   `json:"subscriptions"`
	OutboundBytes     int64   `json:"outbound_bytes"`
	Leaked            int64   `json:"leaked"` // InFlightIDs + Tasks + Subscriptions
}

const (
	stateFree uint32 = iota
	stateSent
	stateCancelled
)

type stormConn struct {
	c        *Conn
	sleep    *Template
	cancel   *Template
	seqs     []atomic.Uint64
	states   []atomic.Uint32
	cancelAt []atomic.Int64 // when the cancel of the slot's request was written
	next     uint64         // scheduler-owned
	wbuf     []byte         // scheduler-owned

	answered, answeredCancelled, crossed, errors int64 // reader-owned
}

func (s *stormConn) read() {
	d := s.c.Dialect()
	for {
		msg, err := s.c.Next()
		if err != nil {
			return
		}
		m := d.Classify(msg)
		if m.Kind == KindError {
			s.errors++
		}
		if (m.Kind != KindReply && m.Kind != KindError) || !m.HasID || m.ID < IDBase {
			continue
		}
		seq := m.ID - IDBase
		i := seq & uint64(len(s.states)-1)
		if s.seqs[i].Load() != seq {
			continue
		}
		switch s.states[i].Swap(stateFree) {
		case stateSent:
			s.answered++
		case stateCancelled:
			// The read that returned the reply ended before the cancel was
			// written: the reply was already here, the race was ours.
			if s.c.At() < s.cancelAt[i].Load() {
				s.crossed++
			} else {
				s.answeredCancelled++
			}
		}
	}
}

type pendingCancel struct {
	due  int64
	sent int64 // when the sleep was written
	conn *stormConn
	seq  uint64
}

type cancelHeap []pendingCancel

func (h cancelHeap) Len() int           { return len(h) }
func (h cancelHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h cancelHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cancelHeap) Push(x any)        { *h = append(*h, x.(pendingCancel)) }
func (h *cancelHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sendHorizon is how far ahead of the clock now the storm sends, after
// waiting for the event at next: whatever is due within a Quantum (plus the
// pacer's lead), and next itself in any case. The pacer returns up to half a
// Quantum before next is within that, and a loop that then sent nothing
// would spin on the clock until it could: it did, at 95% of the generator's
// CPU during the storm, starving the echo probe that shares it.
func sendHorizon(now, lead, next int64) int64 { return max(now+lead+Quantum, next) }

// storm sends sleeps and cancels until end.
func storm(ctx context.Context, cfg StormConfig, scs []*stormConn, end int64, delay *LatBuf) (sleeps, cancels int64, err error) {
	pacer := NewPacer()
	defer pacer.Close()
	pacer.ForRate(cfg.Rate)
	interval := 1e9 / cfg.Rate
	t0 := Now()
	var pend cancelHeap
	rng := rand.New(rand.NewPCG(1, 2))
	ring := uint64(len(scs[0].states) - 1)
	for i := int64(0); ctx.Err() == nil; {
		nextSleep := t0 + int64(float64(i)*interval)
		next := nextSleep
		if len(pend) > 0 && pend[0].due < next {
			next = pend[0].due
		}
		if nextSleep >= end && len(pend) == 0 {
			return sleeps, cancels, nil
		}
		if !pacer.Due(next) {
			pacer.Wait(next)
		}
		now := sendHorizon(Now(), pacer.Lead(), next)
		for len(pend) > 0 && pend[0].due <= now {
			p := heap.Pop(&pend).(pendingCancel)
			s := p.conn
			t := Now()
			s.cancelAt[p.seq&ring].Store(t)
			if s.states[p.seq&ring].CompareAndSwap(stateSent, stateCancelled) {
				s.wbuf = s.cancel.Append(s.wbuf[:0], IDOf(p.seq))
				if err := s.c.Write(s.wbuf); err != nil {
					return sleeps, cancels, err
				}
				cancels++
				delay.Add(t - p.sent)
			}
		}
		for ; nextSleep <= now && nextSleep < end; nextSleep = t0 + int64(float64(i)*interval) {
			s := scs[i%int64(len(scs))]
			i++
			seq := s.next
			if s.states[seq&ring].Load() != stateFree {
				continue // ring full on this connection: skip
			}
			s.next++
			s.seqs[seq&ring].Store(seq)
			s.states[seq&ring].Store(stateSent)
			s.wbuf = s.sleep.Append(s.wbuf[:0], IDOf(seq))
			sent := Now()
			if err := s.c.Write(s.wbuf); err != nil {
				return sleeps, cancels, err
			}
			sleeps++
			if rng.Float64() < cfg.CancelFraction {
				heap.Push(&pend, pendingCancel{due: sent + rng.Int64N(int64(cfg.CancelWithin)+1), sent: sent, conn: s, seq: seq})
			}
		}
	}
	return sleeps, cancels, ctx.Err()
}

// RunStorm runs the cancellation storm against edge (jsonrpc dialect only).
func RunStorm(ctx context.Context, cfg StormConfig) (StormResult, error) {
	var res StormResult
	d := JSONRPC{}
	if _, ok := cfg.Target.Dialect.(JSONRPC); !ok {
		return res, ErrNotSupported
	}
	echoConns, _, err := DialMany(ctx, cfg.Target, cfg.EchoConns, 64, 0, nil)
	defer CloseAll(echoConns)
	if err != nil {
		return res, fmt.Errorf("dial echo: %w", err)
	}
	stormConns, _, err := DialMany(ctx, cfg.Target, cfg.StormConns, 64, 4096, nil)
	defer CloseAll(stormConns)
	if err != nil {
		return res, fmt.Errorf("dial storm: %w", err)
	}
	echoReq, echoOff := d.Echo(cfg.EchoParams)
	echo := OpenConfig{Target: cfg.Target, Rate: cfg.EchoRate, Request: echoReq, IDOff: echoOff,
		Warmup: cfg.Warmup, Measure: cfg.Quiet, Reuse: echoConns}
	if res.EchoQuiet, err = RunOpen(ctx, echo); err != nil {
		return res, fmt.Errorf("quiet echo: %w", err)
	}

	sleepReq, sleepOff := d.Call("edge/sleep", []byte(`{"ms":`+strconv.Itoa(cfg.SleepMs)+`}`))
	cancelReq, cancelOff := d.Cancel()
	scs := make([]*stormConn, len(stormConns))
	var rwg sync.WaitGroup
	for i, c := range stormConns {
		scs[i] = &stormConn{c: c,
			sleep:  NewTemplate(sleepReq, c.Mask(), 0, sleepOff),
			cancel: NewTemplate(cancelReq, c.Mask(), 0, cancelOff),
			seqs:   make([]atomic.Uint64, 256), states: make([]atomic.Uint32, 256), cancelAt: make([]atomic.Int64, 256)}
		rwg.Add(1)
		go func() { defer rwg.Done(); scs[i].read() }()
	}
	stormEnd := Now() + int64(cfg.Warmup+cfg.Storm+100*time.Millisecond)
	type stormOut struct {
		sleeps, cancels int64
		err             error
	}
	done := make(chan stormOut, 1)
	delayRec := NewRecorder()
	go func() {
		delay := LatBuf{R: delayRec}
		s, c, err := storm(ctx, cfg, scs, stormEnd, &delay)
		delay.Flush()
		done <- stormOut{s, c, err}
	}()
	echo.Measure, echo.Hooks = cfg.Storm, cfg.Hooks
	res.EchoStorm, err = RunOpen(ctx, echo)
	so := <-done
	res.Sleeps, res.Cancels = so.sleeps, so.cancels
	res.CancelDelay = delayRec.Latency()
	if err == nil {
		err = so.err
	}
	if err != nil {
		unblock(stormConns)
		rwg.Wait()
		return res, err
	}
	// Settle: every uncancelled sleep must be answered.
	settle := time.Now().Add(time.Duration(cfg.SleepMs)*time.Millisecond + 3*time.Second)
	for time.Now().Before(settle) {
		busy := false
		for _, s := range scs {
			for i := range s.states {
				if s.states[i].Load() == stateSent {
					busy = true
					break
				}
			}
			if busy {
				break
			}
		}
		if !busy {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	unblock(stormConns)
	rwg.Wait()
	for _, s := range scs {
		res.Answered += s.answered
		res.AnsweredCancelled += s.answeredCancelled
		res.CrossedCancel += s.crossed
		res.Errors += s.errors
		for i := range s.states {
			if s.states[i].Load() == stateSent {
				res.Unanswered++
			}
		}
	}
	all := append(append([]*Conn(nil), stormConns...), echoConns...)
	res.StatsConns = len(all)
	for _, c := range all {
		st, err := Stats(c, 5*time.Second)
		if err != nil {
			continue
		}
		res.StatsAnswered++
		res.InFlightIDs += st.InFlightIDs
		res.Tasks += st.Tasks
		res.Subscriptions += st.Subscriptions
		res.OutboundBytes += st.OutboundBytes
	}
	res.Leaked = res.InFlightIDs + res.Tasks + res.Subscriptions
	return res, nil
}

// ConnStats is edge's edge/stats result for one connection.
type ConnStats struct {
	InFlightIDs, Tasks, Subscriptions, OutboundBytes int64
}

// statsSeq is the sequence number of edge/stats requests (far from any
// workload's).
const statsSeq = 2_000_000_000

// Stats asks edge for a connection's bookkeeping (edge/stats) and waits up to
// timeout for the answer. No other goroutine may be reading c.
func Stats(c *Conn, timeout time.Duration) (ConnStats, error) {
	var st ConnStats
	msg, err := Call(c, "edge/stats", []byte(`{}`), timeout)
	if err != nil {
		return st, err
	}
	get := func(k string) int64 { v, _ := FindUint(msg, k); return int64(v) }
	st.InFlightIDs = get(`"inFlightIds":`)
	st.Tasks = get(`"tasks":`)
	st.Subscriptions = get(`"subscriptions":`)
	st.OutboundBytes = get(`"outboundBytes":`)
	return st, nil
}

// Call sends one jsonrpc call on c (id IDOf(statsSeq), far from any
// workload's) and waits up to timeout for its reply, skipping other
// messages; it returns the whole reply, or an error for an error reply. No
// other goroutine may be reading c.
func Call(c *Conn, method string, params []byte, timeout time.Duration) ([]byte, error) {
	req, off := JSONRPC{}.Call(method, params)
	c.nc.SetDeadline(time.Now().Add(timeout))
	defer c.nc.SetDeadline(time.Time{})
	if err := c.Write(NewTemplate(req, c.Mask(), 0, off).Append(nil, IDOf(statsSeq))); err != nil {
		return nil, err
	}
	for {
		msg, err := c.Next()
		if err != nil {
			return nil, err
		}
		m := c.d.Classify(msg)
		if !m.HasID || m.ID != IDOf(statsSeq) {
			continue
		}
		if m.Kind != KindReply {
			return nil, fmt.Errorf("load: %s: %.200s", method, msg)
		}
		return msg, nil
	}
}
