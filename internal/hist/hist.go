// Package hist is the request-duration histogram that edge's counters share
// (CONTRACT.md section 12): fixed buckets in base units (seconds), counted as
// plain integers by their owner (an event loop) or atomically by goroutines
// off the loops (the upstream readers). Either is read into a Hist and
// exposed as a Prometheus histogram at scrape time.
package hist

import (
	"sync/atomic"
	"time"
)

// Bounds are the upper bounds of the buckets in seconds (Prometheus "le"),
// from 100 us, below which a loop-turn clock cannot tell durations apart, to
// the default upstream timeout. A last bucket, +Inf, holds the rest.
var Bounds = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// N is the number of buckets, +Inf included.
const N = len(Bounds) + 1

// boundNanos is Bounds in nanoseconds.
var boundNanos = func() (b [len(Bounds)]int64) {
	for i, s := range Bounds {
		b[i] = int64(s * float64(time.Second))
	}
	return b
}()

// Index returns the bucket of a duration of d nanoseconds.
func Index(d int64) int {
	for i, b := range boundNanos {
		if d <= b {
			return i
		}
	}
	return len(boundNanos)
}

// Hist is a histogram of durations: per-bucket counts (not cumulative) and
// the sum. Its owner writes it without synchronisation.
type Hist struct {
	Counts   [N]uint64
	SumNanos int64
}

// Observe records one duration of d nanoseconds (negative counts as 0).
func (h *Hist) Observe(d int64) {
	d = max(d, 0)
	h.Counts[Index(d)]++
	h.SumNanos += d
}

// Add adds o to h.
func (h *Hist) Add(o *Hist) {
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.SumNanos += o.SumNanos
}

// Count is the number of observations.
func (h *Hist) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Sub returns h - o bucket by bucket: the observations made between two
// readings of the same histogram.
func (h *Hist) Sub(o *Hist) Hist {
	d := *h
	for i, c := range o.Counts {
		d.Counts[i] -= c
	}
	d.SumNanos -= o.SumNanos
	return d
}

// Quantile estimates the q-quantile (0 < q < 1) in seconds the way
// Prometheus' histogram_quantile does: linear interpolation inside the
// bucket that holds it; in the +Inf bucket it is the largest finite bound.
// It returns 0 for an empty histogram.
func (h *Hist) Quantile(q float64) float64 {
	total := h.Count()
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	for i, c := range h.Counts {
		if c == 0 || seen+float64(c) < rank {
			seen += float64(c)
			continue
		}
		if i == len(Bounds) {
			return Bounds[len(Bounds)-1]
		}
		lo := 0.0
		if i > 0 {
			lo = Bounds[i-1]
		}
		return lo + (Bounds[i]-lo)*(rank-seen)/float64(c)
	}
	return Bounds[len(Bounds)-1]
}

// Atomic is a Hist that many goroutines observe into. Safe for concurrent use.
type Atomic struct {
	counts [N]atomic.Uint64
	sum    atomic.Int64
}

// Observe records one duration of d nanoseconds. Safe for concurrent use.
func (a *Atomic) Observe(d int64) {
	d = max(d, 0)
	a.counts[Index(d)].Add(1)
	a.sum.Add(d)
}

// Add adds h, a batch of observations, with one atomic add per bucket
// that holds any. Safe for concurrent use.
func (a *Atomic) Add(h *Hist) {
	for i, c := range h.Counts {
		if c != 0 {
			a.counts[i].Add(c)
		}
	}
	a.sum.Add(h.SumNanos)
}

// Load reads the histogram. The buckets are read one by one, so a reading
// taken while observations go on may be off by those few. Safe for
// concurrent use.
func (a *Atomic) Load() Hist {
	var h Hist
	for i := range a.counts {
		h.Counts[i] = a.counts[i].Load()
	}
	h.SumNanos = a.sum.Load()
	return h
}
