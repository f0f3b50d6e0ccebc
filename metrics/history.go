package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/openengine/edge/internal/hist"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
)

// The history behind /api/history: the dashboard's charts of the last five
// minutes, from the server, so that a page opened now draws what happened
// before it was opened. One goroutine (Start, Close) reads the counters once
// a second into a fixed ring of HistoryLen compact samples; nothing is
// allocated per sample once the ring is full.
//
// Each reading calls loop.Server.Stats, which has every event loop copy its
// counters once (loopTimeout bounds the wait): a small copy that is fine at
// 1 Hz, and the sampler never reads more often than that, however many pages
// are open. A page's own polls of /api/stats read the loops as before.
//
// Memory: sampleBytes (184) bytes per sample plus 8 per upstream, so
// HistoryLen*184 = 55,200 bytes for the ring and 2,400 more per upstream,
// allocated once by New; the latency marks add at most maxMarks*176 bytes.

// The history's shape: one sample a second for five minutes.
const (
	HistoryLen      = 300
	HistoryInterval = time.Second
)

// sampleBytes is the size of a sample (TestSampleSize keeps it true).
const sampleBytes = 184

// sample is one reading of the counters /api/stats reports, compact: the
// totals as counted, the gauges narrowed to 32 bits (clamped), and the
// latency quantiles of the requests answered in the latencyWindow before it.
type sample struct {
	at       int64                      // Unix milliseconds
	outcomes [rpc.NumOutcomes]uint64    // requests by outcome, totals
	closes   [loop.NumCloseCodes]uint64 // connections ended by close code, totals
	slow     uint64                     // slow consumers, total
	subs     int64                      // live subscriptions
	conns    [loop.NumTransports]int32  // open connections by transport
	inFlight int32                      // requests owed an answer
	p50, p99 float32                    // seconds
}

// upSample is one upstream's connections in a sample.
type upSample struct{ up, total int32 }

// clamp32 narrows a gauge to 32 bits.
func clamp32[T int | int64](v T) int32 {
	return int32(min(max(int64(v), -1<<31), 1<<31-1))
}

// fill sets smp and ups (one entry per upstream of s, in order) from the
// snapshot s read at now, with the latency quantiles of win.
func fill(smp *sample, ups []upSample, s *snapshot, now time.Time, win *hist.Hist) {
	c := &s.loop.RPC
	*smp = sample{
		at:       now.UnixMilli(),
		slow:     c.SlowSubscriptions + s.loop.SlowConsumers,
		subs:     c.Subscriptions,
		inFlight: clamp32(s.inFlight),
		p50:      float32(win.Quantile(.5)),
		p99:      float32(win.Quantile(.99)),
		closes:   s.loop.Closes,
	}
	for i := range c.Methods {
		for o, n := range c.Methods[i].Outcomes {
			smp.outcomes[o] += n
		}
	}
	for i, n := range s.loop.Conns {
		smp.conns[i] = clamp32(n)
	}
	for i := range min(len(ups), len(s.upstreams)) {
		ups[i] = upSample{up: clamp32(s.upstreams[i].st.Up), total: clamp32(s.upstreams[i].st.Total)}
	}
}

// history is the ring of the last HistoryLen samples.
type history struct {
	names []string // immutable after newHistory: the upstreams, in snapshot order

	mu    sync.Mutex
	ring  [HistoryLen]sample // guarded by mu
	ups   []upSample         // guarded by mu: HistoryLen rows of len(names), row i for ring[i]
	next  int                // guarded by mu: where the next sample goes
	n     int                // guarded by mu: samples held, at most HistoryLen
	marks marks              // guarded by mu: the request histogram at past samples
}

func newHistory(names []string) *history {
	return &history{names: names, ups: make([]upSample, HistoryLen*len(names))}
}

// row returns the upstreams of ring[i]. Must be called with mu held.
func (h *history) row(i int) []upSample {
	n := len(h.names)
	return h.ups[i*n : (i+1)*n : (i+1)*n]
}

// record adds the snapshot s, read at now, as the newest sample, over the
// oldest once the ring is full. Safe for concurrent use.
func (h *history) record(now time.Time, s *snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	win := h.marks.since(now, requestHist(&s.loop.RPC))
	fill(&h.ring[h.next], h.row(h.next), s, now, &win)
	h.next = (h.next + 1) % HistoryLen
	h.n = min(h.n+1, HistoryLen)
}

// copyOut returns the samples held, oldest first, and their upstreams (rows
// of len(names)). Safe for concurrent use.
func (h *history) copyOut() ([]sample, []upSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]sample, 0, h.n)
	ups := make([]upSample, 0, h.n*len(h.names))
	for k := range h.n {
		i := (h.next - h.n + k + HistoryLen) % HistoryLen
		out = append(out, h.ring[i])
		ups = append(ups, h.row(i)...)
	}
	return out, ups
}

// historyJSON is the body of /api/history: the samples of the last five
// minutes, oldest first, each in the form of an /api/stats body (without
// the instance, given once).
type historyJSON struct {
	Instance Instance    `json:"instance"`
	Interval int64       `json:"interval"` // milliseconds between two samples
	Samples  []statsJSON `json:"samples"`
}

// HistoryHandler serves /api/history, the samples the dashboard draws on
// first load. The samples are taken between Start and Close.
func (m *Metrics) HistoryHandler() http.Handler { return http.HandlerFunc(m.serveHistory) }

func (m *Metrics) serveHistory(w http.ResponseWriter, _ *http.Request) {
	samples, ups := m.history.copyOut()
	n := len(m.history.names)
	js := historyJSON{Instance: m.Instance(), Interval: HistoryInterval.Milliseconds(), Samples: make([]statsJSON, len(samples))}
	for i := range samples {
		js.Samples[i] = statsOf(&samples[i], m.history.names, ups[i*n:(i+1)*n])
	}
	writeJSON(w, &js)
}

// Start starts the sampler: a goroutine that adds a sample to the history
// at once and then every HistoryInterval until Close. Edge runs it for as
// long as the admin listener serves. A second Start, or a Start after
// Close, does nothing. Safe for concurrent use.
func (m *Metrics) Start() {
	m.run.Lock()
	defer m.run.Unlock()
	if m.run.started || m.run.closed {
		return
	}
	m.run.started = true
	m.run.stop, m.run.done = make(chan struct{}), make(chan struct{})
	go m.sampler(m.run.stop, m.run.done)
}

// Close stops the sampler and waits for its goroutine to return (at most a
// reading of the loops, loopTimeout). The history it took stays served.
// Safe for concurrent use, to call more than once and without Start.
func (m *Metrics) Close() {
	m.run.Lock()
	defer m.run.Unlock()
	if m.run.closed {
		return
	}
	m.run.closed = true
	if m.run.started {
		close(m.run.stop)
		<-m.run.done
	}
}

// sampler is the goroutine of Start.
func (m *Metrics) sampler(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(HistoryInterval)
	defer tick.Stop()
	for {
		s := m.read()
		m.history.record(time.Now(), &s)
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}
