package metrics

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/openengine/edge/internal/hist"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
)

// statsJSON is the body of /api/stats, the dashboard's snapshot, and a
// sample of /api/history. Every count is a total since start; the page
// computes rates from successive snapshots.
type statsJSON struct {
	Instance      *Instance         `json:"instance,omitempty"` // /api/stats only
	Time          int64             `json:"time"`               // Unix milliseconds
	Connections   map[string]int    `json:"connections"`
	Requests      uint64            `json:"requests"` // answered: every outcome but cancelled
	Outcomes      map[string]uint64 `json:"outcomes"`
	Latency       latencyJSON       `json:"latency"`
	InFlight      int               `json:"inFlight"`
	Subscriptions int64             `json:"subscriptions"`
	SlowConsumers uint64            `json:"slowConsumers"`
	Closes        map[string]uint64 `json:"closes"`
	Upstreams     []upstreamJSON    `json:"upstreams"`
}

type latencyJSON struct {
	P50 float32 `json:"p50"` // seconds; float32 writes the sample's precision, 0.0042 rather than 0.004199999850988388
	P99 float32 `json:"p99"`
}

type upstreamJSON struct {
	Name  string `json:"name"`
	Up    int    `json:"up"`
	Total int    `json:"total"`
}

// latencyWindow is how far back /api/stats looks for its latency
// quantiles: they are estimated from the histogram of the requests answered
// since the newest earlier /api/stats request at least this old (about 5 s
// ago for a page polling every second), else since the oldest one kept,
// else since start. The history's samples use the same window over the
// samples before them.
const latencyWindow = 5 * time.Second

// latencyMark is the request histogram as of one reading.
type latencyMark struct {
	at time.Time
	h  hist.Hist
}

// marks are the request histograms of past readings, for latency windows.
type marks []latencyMark

// window returns the histogram of the requests answered since about
// latencyWindow ago and records h as of now for later requests.
func (m *Metrics) window(now time.Time, h hist.Hist) hist.Hist {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recent.since(now, h)
}

// since returns the histogram of the requests answered since about
// latencyWindow before now, given h as of now, and records h. Its caller
// serialises calls.
func (mk *marks) since(now time.Time, h hist.Hist) hist.Hist {
	recent := *mk
	var base hist.Hist
	keep := 0
	if len(recent) > 0 {
		base = recent[0].h
	}
	for i, m := range recent {
		if now.Sub(m.at) >= latencyWindow {
			base, keep = m.h, i
		}
	}
	// Marks older than the base are no longer needed.
	recent = append(recent[:0], recent[keep:]...)
	if len(recent) >= maxMarks {
		recent = recent[1:]
	}
	*mk = append(recent, latencyMark{at: now, h: h})
	return h.Sub(&base)
}

// maxMarks bounds the marks kept, however often /api/stats is asked.
const maxMarks = 64

func (m *Metrics) serveStats(w http.ResponseWriter, _ *http.Request) {
	s := m.read()
	now := time.Now()
	win := m.window(now, requestHist(&s.loop.RPC))
	var smp sample
	ups := make([]upSample, len(s.upstreams))
	names := make([]string, len(s.upstreams))
	for i, u := range s.upstreams {
		names[i] = u.name
	}
	fill(&smp, ups, &s, now, &win)
	js := statsOf(&smp, names, ups)
	in := m.Instance()
	js.Instance = &in
	writeJSON(w, &js)
}

// statsOf is the JSON form of a sample whose upstreams, ups, are named
// names.
func statsOf(smp *sample, names []string, ups []upSample) statsJSON {
	js := statsJSON{
		Time:          smp.at,
		Connections:   make(map[string]int, loop.NumTransports),
		Outcomes:      make(map[string]uint64, rpc.NumOutcomes),
		Latency:       latencyJSON{P50: smp.p50, P99: smp.p99},
		InFlight:      int(smp.inFlight),
		Subscriptions: smp.subs,
		SlowConsumers: smp.slow,
		Closes:        make(map[string]uint64, loop.NumCloseCodes),
		Upstreams:     make([]upstreamJSON, 0, len(ups)),
	}
	for i, n := range smp.conns {
		js.Connections[loop.TransportLabel(i)] = int(n)
	}
	for o, n := range smp.outcomes {
		js.Outcomes[rpc.Outcome(o).String()] = n
		if rpc.Outcome(o) != rpc.OutcomeCancelled {
			js.Requests += n
		}
	}
	for i, n := range smp.closes {
		js.Closes[loop.CloseCodeLabel(i)] = n
	}
	for i, u := range ups {
		js.Upstreams = append(js.Upstreams, upstreamJSON{Name: names[i], Up: int(u.up), Total: int(u.total)})
	}
	return js
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
