package hist

import (
	"math"
	"testing"
)

func TestIndex(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nanos int64
		want  int
	}{
		{"zero", 0, 0},
		{"at the first bound", 100e3, 0},
		{"just above it", 100e3 + 1, 1},
		{"1 ms", 1e6, 3},
		{"at the last bound", 30e9, len(Bounds) - 1},
		{"above every bound", 31e9, len(Bounds)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Index(tc.nanos); got != tc.want {
				t.Errorf("Index(%d) = %d, want %d", tc.nanos, got, tc.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	var h Hist
	if q := h.Quantile(.5); q != 0 {
		t.Errorf("empty: %v, want 0", q)
	}
	for range 99 {
		h.Observe(2e6) // bucket (0.001, 0.0025]
	}
	h.Observe(60e9) // +Inf
	for _, tc := range []struct {
		name string
		q    float64
		want float64
	}{
		{"p50 interpolated in its bucket", .5, .001 + .0015*50/99},
		{"p99 at the bucket's top", .99, .0025},
		{"p100 in +Inf is the last bound", 1, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	d := h.Sub(&Hist{})
	if d != h || d.Count() != 100 || d.SumNanos != 99*2e6+60e9 {
		t.Errorf("Sub of nothing changed the histogram: %+v", d)
	}
}

func TestAtomic(t *testing.T) {
	var a Atomic
	a.Observe(-5) // counts as 0
	a.Observe(2e6)
	h := a.Load()
	if h.Counts[0] != 1 || h.Counts[Index(2e6)] != 1 || h.SumNanos != 2e6 {
		t.Errorf("Load: %+v", h)
	}
}
