package load

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// epoch is the generator's time origin; immutable after package init.
var epoch = time.Now()

// Now is the generator's clock: monotonic nanoseconds since its epoch.
// Timestamps in published events use it, so publisher and subscribers of one
// process agree. Safe for concurrent use.
func Now() int64 { return int64(time.Since(epoch)) }

// maxLatency is the largest latency a Recorder tracks; larger values are
// clamped (and still counted).
const maxLatency = int64(60 * time.Second)

// Recorder is an HDR latency histogram in nanoseconds (3 significant
// digits) shared by many connections, each of which records through its own
// LatBuf. Safe for concurrent use.
type Recorder struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram // guarded by mu
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{h: hdrhistogram.New(1, maxLatency, 3)}
}

func (r *Recorder) add(vs []int64) {
	r.mu.Lock()
	for _, v := range vs {
		r.h.RecordValue(min(max(v, 1), maxLatency))
	}
	r.mu.Unlock()
}

// Latency summarises the recorded values in microseconds.
func (r *Recorder) Latency() Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	us := func(v int64) float64 { return float64(v) / 1e3 }
	return Latency{
		Count: r.h.TotalCount(),
		P50:   us(r.h.ValueAtQuantile(50)),
		P90:   us(r.h.ValueAtQuantile(90)),
		P99:   us(r.h.ValueAtQuantile(99)),
		P999:  us(r.h.ValueAtQuantile(99.9)),
		Max:   us(r.h.Max()),
		Mean:  r.h.Mean() / 1e3,
	}
}

// Latency is a latency distribution in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
	Mean  float64 `json:"mean_us"`
}

// LatBuf batches one goroutine's samples into a Recorder so that the hot
// path takes no lock. The zero value with R set is ready. Not safe for
// concurrent use.
type LatBuf struct {
	R   *Recorder
	n   int
	buf [256]int64
}

// Add records one latency in nanoseconds. It does not allocate.
func (b *LatBuf) Add(ns int64) {
	b.buf[b.n] = ns
	b.n++
	if b.n == len(b.buf) {
		b.Flush()
	}
}

// Flush hands the batched samples to the recorder.
func (b *LatBuf) Flush() {
	if b.n > 0 && b.R != nil {
		b.R.add(b.buf[:b.n])
	}
	b.n = 0
}
