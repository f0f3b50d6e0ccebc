package upstream

import (
	"sync/atomic"
	"time"

	"github.com/openengine/edge/internal/hist"
)

// outcome is how a forwarded call ended, a label of edge's per-upstream
// request metrics (CONTRACT.md section 12).
type outcome uint8

const (
	outcomeOK          outcome = iota // a result (a subscription: established)
	outcomeError                      // the upstream's error object, or a bad answer
	outcomeCancelled                  // the gateway cancelled it before its answer came
	outcomeTimeout                    // UPSTREAM_TIMEOUT
	outcomeUnavailable                // UPSTREAM_UNAVAILABLE: not sent, or the connection failed
	outcomeBusy                       // SERVER_BUSY: not sent, every http replica at its bound
	numOutcomes
)

var outcomeLabels = [numOutcomes]string{"ok", "error", "cancelled", "timeout", "unavailable", "busy"}

// NumOutcomes is the length of Stats.Outcomes.
const NumOutcomes = int(numOutcomes)

// OutcomeLabel is the label of Stats.Outcomes[i].
func OutcomeLabel(i int) string { return outcomeLabels[i] }

// Stats are an upstream's counters.
type Stats struct {
	// Up and Total are its connections that take calls, of all
	// (Upstream.Connected).
	Up, Total int
	// Outcomes counts forwarded calls by outcome (OutcomeLabel).
	Outcomes [NumOutcomes]uint64
	// Duration is the time from forwarding a call to its answer (or its
	// failure) of the calls that were sent.
	Duration hist.Hist
	// NotificationsDropped counts notifications not sent because every
	// http replica that is up had --upstream-http-conns requests in
	// flight.
	NotificationsDropped uint64
	// SlowClosed counts the exec, tcp and ws connections closed because
	// the upstream did not read their output: over
	// Config.MaxPendingBytes, or stalled for Config.WriteStallTimeout.
	SlowClosed uint64
	// PendingPeak is the most output one of its exec, tcp or ws
	// connections has held for the upstream, in bytes (as seen at each
	// write, at output the upstream is owed, and at each sweep).
	PendingPeak int64
}

// counters are an upstream's call counters. They are counted where a call
// ends: on the event loops that own the byte-stream links, on the NATS
// links' goroutines and on the HTTP calls' goroutines, with atomic adds
// (uncontended on a loop but for the loops' own). Safe for concurrent use.
type counters struct {
	outcomes     [numOutcomes]atomic.Uint64
	duration     hist.Atomic
	notesDropped atomic.Uint64 // http notifications over the bound (http.go)
}

// ended counts a call that ended with o after it was sent at start (Unix
// nanoseconds; 0: never sent, no duration).
func (c *counters) ended(o outcome, start, now int64) {
	c.outcomes[o].Add(1)
	if start != 0 {
		c.duration.Observe(now - start)
	}
}

// Stats returns the upstream's counters. Concurrent.
func (u *Upstream) Stats() Stats {
	var st Stats
	st.Up, st.Total = u.Connected()
	for i := range st.Outcomes {
		st.Outcomes[i] = u.counters.outcomes[i].Load()
	}
	st.Duration = u.counters.duration.Load()
	st.NotificationsDropped = u.counters.notesDropped.Load()
	st.SlowClosed = uint64(u.slowClosed.Load())
	for _, l := range u.links {
		st.PendingPeak = max(st.PendingPeak, l.peak.Load())
	}
	return st
}

// tally counts the calls that end while a byte-stream link reads (during
// one Traffic, link.now set), added to the upstream's counters once at the
// end of the read (flush): an atomic add per outcome and bucket that the
// read saw, instead of three per call. Loop-owned.
type tally struct {
	outcomes [numOutcomes]uint64
	duration hist.Hist
	n        int
}

// ended is counters.ended, tallied.
func (t *tally) ended(o outcome, start, now int64) {
	t.outcomes[o]++
	if start != 0 {
		t.duration.Observe(now - start)
	}
	t.n++
}

// flush adds the tally to c and zeroes it.
func (t *tally) flush(c *counters) {
	if t.n == 0 {
		return
	}
	for o, n := range t.outcomes {
		if n != 0 {
			c.outcomes[o].Add(n)
		}
	}
	if t.duration.Count() != 0 {
		c.duration.Add(&t.duration)
	}
	*t = tally{}
}

func nowNanos() int64 { return time.Now().UnixNano() }
