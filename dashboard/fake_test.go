package dashboard

import (
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// stats is the document the admin listener serves at api/stats (the schema
// of issue 13), as the page reads it.
type stats struct {
	Instance      *instance        `json:"instance,omitempty"`
	Time          int64            `json:"time"` // unix milliseconds
	Connections   connections      `json:"connections"`
	Requests      int64            `json:"requests"` // answered, in total
	Outcomes      map[string]int64 `json:"outcomes"`
	Latency       latency          `json:"latency"` // seconds
	InFlight      int64            `json:"inFlight"`
	Subscriptions int64            `json:"subscriptions"`
	SlowConsumers int64            `json:"slowConsumers"` // in total
	Closes        map[string]int64 `json:"closes"`        // by close code, in total
	Upstreams     []upstream       `json:"upstreams"`
}

// instance names the edge (metrics.Instance).
type instance struct {
	Listen  []string `json:"listen"`
	Admin   string   `json:"admin"`
	Version string   `json:"version"`
}

// fakeInstance is the instance the fake names.
var fakeInstance = instance{
	Listen:  []string{"ws://127.0.0.1:8080/", "tcp://127.0.0.1:9000"},
	Admin:   "127.0.0.1:9090",
	Version: "edge v1.2.3 (commit 0123456789ab, 2026-12-01T10:00:00Z) go1.26.8",
}

// historyDoc is the document the admin listener serves at api/history.
type historyDoc struct {
	Instance instance `json:"instance"`
	Interval int64    `json:"interval"` // milliseconds
	Samples  []stats  `json:"samples"`  // oldest first, without an instance each
}

type connections struct {
	WS     int64 `json:"ws"`
	NDJSON int64 `json:"ndjson"`
}

type latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

type upstream struct {
	Name  string `json:"name"`
	Up    int    `json:"up"`
	Total int    `json:"total"`
}

// fakeStats serves api/stats for the page under test: a gateway under a
// steady, slightly noisy load of about 9k requests/s, whose totals grow with
// the time between two calls (so rates are never zero), and which can be taken down to test the page's disconnected
// state.
type fakeStats struct {
	steady bool // connections stay at exactly 40 ws + 2 ndjson
	pastN  int  // samples api/history serves; set before serving

	mu    sync.Mutex
	past  []stats    // guarded by mu: what api/history serves, made by its first request
	calls int        // guarded by mu
	down  bool       // guarded by mu: answer 503
	rng   *rand.Rand // guarded by mu
	last  stats      // guarded by mu: the totals so far
}

func newFakeStats(steady bool) *fakeStats {
	return &fakeStats{
		steady: steady,
		rng:    rand.New(rand.NewPCG(13, 42)),
		last: stats{
			Requests:      1_283_000,
			Outcomes:      map[string]int64{"ok": 1_270_000, "error": 9_000, "cancelled": 2_000, "busy": 500, "rate_limited": 1_200, "timeout": 250, "unavailable": 50},
			SlowConsumers: 12,
			Closes:        map[string]int64{"1000": 5_800, "1001": 0, "1008": 31, "1009": 2},
		},
	}
}

// setDown makes the fake answer 503 (true) or serve again (false).
func (f *fakeStats) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *fakeStats) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if f.down {
		f.mu.Unlock()
		http.Error(w, "admin listener unavailable", http.StatusServiceUnavailable)
		return
	}
	s := f.next(time.Now())
	f.mu.Unlock()
	s.Instance = &fakeInstance
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s)
}

// history serves api/history with pastN samples, a second apart, that the fake
// took before its first api/stats: made by the first request, when nothing
// has been served yet, and the same for later requests.
func (f *fakeStats) history() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		if f.past == nil && f.calls == 0 {
			now := time.Now()
			for i := range f.pastN {
				f.past = append(f.past, f.next(now.Add(time.Duration(i-f.pastN)*time.Second)))
			}
		}
		doc := historyDoc{Instance: fakeInstance, Interval: 1000, Samples: append([]stats{}, f.past...)}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	})
}

// next advances the load to now by the time since the previous call (a
// second the first time) and returns the document. Must be called with mu
// held.
func (f *fakeStats) next(now time.Time) stats {
	f.calls++
	dt := 1.0
	if f.last.Time != 0 {
		dt = min(max(float64(now.UnixMilli()-f.last.Time)/1e3, 0.001), 5)
	}
	i := float64(f.calls)
	noise := func(scale float64) float64 { return (f.rng.Float64()*2 - 1) * scale }
	wave := func(period, amp float64) float64 { return amp * math.Sin(2*math.Pi*i/period) }
	count := func(perSecond float64) int64 { return int64(math.Round(max(0, perSecond) * dt)) }
	s := &f.last
	s.Time = now.UnixMilli()

	s.Connections = connections{WS: int64(1180 + wave(40, 60) + noise(8)), NDJSON: int64(64 + wave(25, 6) + noise(2))}
	if f.steady {
		s.Connections = connections{WS: 40, NDJSON: 2}
	}
	outage := f.calls%30 > 14 && f.calls%30 < 19 // a replica of ledger restarts now and then
	answered := count(9200 + wave(30, 1100) + noise(150))
	failed := map[string]int64{
		"error":        count(30 + noise(6)),
		"cancelled":    count(8 + noise(3)),
		"busy":         count(wave(20, 12) + noise(2)),
		"rate_limited": count(noise(30) - 20),
		"timeout":      count(noise(3)),
		"unavailable":  0,
	}
	if outage {
		failed["unavailable"] = count(40 + noise(10))
	}
	ok := answered
	for k, n := range failed {
		s.Outcomes[k] += n
		ok -= n
	}
	s.Outcomes["ok"] += ok
	s.Requests += answered
	s.Latency = latency{P50: (1.8 + wave(30, 0.3) + noise(0.1)) / 1e3, P99: (9 + wave(30, 2) + noise(1.5)) / 1e3}
	if outage {
		s.Latency.P99 *= 2.4
	}
	s.InFlight = int64(max(0, 42+wave(30, 12)+noise(6)))
	s.Subscriptions = int64(2300 + 4*i + wave(50, 40))
	if f.rng.IntN(6) == 0 { // a slow consumer now and then, closed with 1008
		s.SlowConsumers++
		s.Closes["1008"]++
	}
	s.Closes["1000"] += count(3 + noise(2.5))
	s.Closes["1008"] += count(noise(1.2))
	ledger := 2
	if outage {
		ledger = 1
	}
	s.Upstreams = []upstream{{"accounts", 3, 3}, {"ledger", ledger, 2}, {"search", 0, 1}}
	out := *s
	out.Outcomes = maps.Clone(s.Outcomes)
	out.Closes = maps.Clone(s.Closes)
	return out
}
