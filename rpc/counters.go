package rpc

import (
	"errors"
	"slices"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/hist"
)

// Outcome is how a request ended, a label of edge's request metrics
// (CONTRACT.md section 12).
type Outcome uint8

const (
	OutcomeOK          Outcome = iota // answered with a result (a subscription: established)
	OutcomeError                      // answered with an error not listed below
	OutcomeCancelled                  // $/cancelRequest, subscription/cancel while establishing, or the connection closed first
	OutcomeBusy                       // SERVER_BUSY
	OutcomeRateLimited                // rate limited (section 11.4; none yet)
	OutcomeTimeout                    // UPSTREAM_TIMEOUT
	OutcomeUnavailable                // UPSTREAM_UNAVAILABLE
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{"ok", "error", "cancelled", "busy", "rate_limited", "timeout", "unavailable"}

func (o Outcome) String() string { return outcomeNames[o] }

// outcomeOf is the outcome of an answer carrying err (nil: a result).
func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeOK
	case err == errBusy:
		return OutcomeBusy
	case err == errRateLimited:
		return OutcomeRateLimited
	case errors.Is(err, backend.ErrUpstreamTimeout):
		return OutcomeTimeout
	case errors.Is(err, backend.ErrUpstreamUnavailable):
		return OutcomeUnavailable
	}
	return OutcomeError
}

// Counters are the request counters of the sessions of one event loop
// (CONTRACT.md section 12). They are plain integers, not atomics: the loop
// and the sessions it owns are their only writers, so counting costs an
// increment and no synchronisation. A collector reads them on the loop (a
// task it posts there copies them, CopyTo) and never directly.
//
// A loop hands its Counters to its sessions as a CountingPoster; a session
// whose Poster is not one counts into Counters of its own, which nothing reads.
type Counters struct {
	// Now is the loop's clock for the current turn, in Unix nanoseconds:
	// the loop sets it once per turn, and request durations are measured
	// with it, from admission to the answer being queued. Zero: no clock,
	// every duration is 0.
	Now int64
	// Methods holds the counts of each method, by Method.slot: [0] is
	// every method outside the registry, Server.MethodNames names them.
	Methods []MethodCounters
	// EventsDelivered counts subscription events handed to the transport.
	EventsDelivered uint64
	// SlowSubscriptions counts subscriptions ended SLOW_CONSUMER.
	SlowSubscriptions uint64
	// Subscriptions is the number of subscriptions not ended (a gauge).
	Subscriptions int64
}

// MethodCounters are the counts of one method.
type MethodCounters struct {
	// Outcomes counts requests by outcome.
	Outcomes [NumOutcomes]uint64
	// Duration is the time from admission to the answer being queued, of
	// the requests a backend, an upstream or the session answered
	// (refusals before dispatch and cancelled requests are not in it).
	Duration hist.Hist
}

// CountingPoster is implemented by a Poster whose event loop keeps the
// Counters of its sessions.
type CountingPoster interface {
	Poster
	// Counters returns the loop's counters, the same every time, made by
	// Server.NewCounters of the session's server.
	Counters() *Counters
}

// NewCounters returns zeroed Counters sized for srv's registry. Safe for
// concurrent use.
func (srv *Server) NewCounters() *Counters {
	return &Counters{Methods: make([]MethodCounters, len(srv.cfg.Registry.names)+1)}
}

// MethodNames names the entries of Counters.Methods: "other", then the
// registry's methods in name order. Safe for concurrent use.
func (srv *Server) MethodNames() []string {
	return append([]string{"other"}, srv.cfg.Registry.names...)
}

// CopyTo copies c into dst, reusing dst's storage. It is how a collector
// takes a snapshot: called on c's loop.
func (c *Counters) CopyTo(dst *Counters) {
	methods := append(dst.Methods[:0], c.Methods...)
	*dst = *c
	dst.Methods = methods
}

// Add adds o to c (the snapshots of several loops). Methods of o beyond
// c's are ignored unless c has none.
func (c *Counters) Add(o *Counters) {
	if len(c.Methods) == 0 {
		c.Methods = slices.Clone(o.Methods)
	} else {
		for i := range min(len(c.Methods), len(o.Methods)) {
			m, om := &c.Methods[i], &o.Methods[i]
			for j, n := range om.Outcomes {
				m.Outcomes[j] += n
			}
			m.Duration.Add(&om.Duration)
		}
	}
	c.EventsDelivered += o.EventsDelivered
	c.SlowSubscriptions += o.SlowSubscriptions
	c.Subscriptions += o.Subscriptions
}

// count records a request of method m (nil: not found) that ended with o
// before it was dispatched.
func (s *Session) count(m *Method, o Outcome) {
	s.ctr.Methods[m.countSlot()].Outcomes[o]++
}

// countTask records the outcome of the dispatched request t, and unless it
// was cancelled its duration.
func (s *Session) countTask(t *Task, o Outcome) {
	mc := &s.ctr.Methods[t.method.countSlot()]
	mc.Outcomes[o]++
	if o != OutcomeCancelled {
		mc.Duration.Observe(s.ctr.Now - t.start)
	}
}

// countSlot is m's index in Counters.Methods.
func (m *Method) countSlot() int {
	if m == nil {
		return 0
	}
	return m.slot
}
