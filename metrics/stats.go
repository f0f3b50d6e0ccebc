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

// statsJSON is the body of /api/stats, the dashboard's snapshot. Every
// count is a total since start; the page computes rates from successive
// snapshots.
type statsJSON struct {
	Time          int64             `json:"time"` // Unix milliseconds
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
	P50 float64 `json:"p50"` // seconds
	P99 float64 `json:"p99"`
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
// else since start.
const latencyWindow = 5 * time.Second

// latencyMark is the request histogram as of one /api/stats request.
type latencyMark struct {
	at time.Time
	h  hist.Hist
}

// window returns the histogram of the requests answered since about
// latencyWindow ago and records h as of now for later requests.
func (m *Metrics) window(now time.Time, h hist.Hist) hist.Hist {
	m.mu.Lock()
	defer m.mu.Unlock()
	var base hist.Hist
	keep := 0
	if len(m.recent) > 0 {
		base = m.recent[0].h
	}
	for i, mk := range m.recent {
		if now.Sub(mk.at) >= latencyWindow {
			base, keep = mk.h, i
		}
	}
	// Marks older than the base are no longer needed.
	m.recent = append(m.recent[:0], m.recent[keep:]...)
	if len(m.recent) >= maxMarks {
		m.recent = m.recent[1:]
	}
	m.recent = append(m.recent, latencyMark{at: now, h: h})
	return h.Sub(&base)
}

// maxMarks bounds the marks kept, however often /api/stats is asked.
const maxMarks = 64

func (m *Metrics) serveStats(w http.ResponseWriter, _ *http.Request) {
	s := m.snapshot()
	now := time.Now()
	c := &s.loop.RPC
	var outcomes [rpc.NumOutcomes]uint64
	for i := range c.Methods {
		for o, n := range c.Methods[i].Outcomes {
			outcomes[o] += n
		}
	}
	win := m.window(now, requestHist(c))
	js := statsJSON{
		Time:          now.UnixMilli(),
		Connections:   make(map[string]int, loop.NumTransports),
		Outcomes:      make(map[string]uint64, rpc.NumOutcomes),
		Latency:       latencyJSON{P50: win.Quantile(.5), P99: win.Quantile(.99)},
		InFlight:      s.inFlight,
		Subscriptions: c.Subscriptions,
		SlowConsumers: c.SlowSubscriptions + s.loop.SlowConsumers,
		Closes:        make(map[string]uint64, loop.NumCloseCodes),
		Upstreams:     []upstreamJSON{},
	}
	for i, n := range s.loop.Conns {
		js.Connections[loop.TransportLabel(i)] = n
	}
	for o, n := range outcomes {
		js.Outcomes[rpc.Outcome(o).String()] = n
		if rpc.Outcome(o) != rpc.OutcomeCancelled {
			js.Requests += n
		}
	}
	for i, n := range s.loop.Closes {
		js.Closes[loop.CloseCodeLabel(i)] = n
	}
	for _, u := range s.upstreams {
		js.Upstreams = append(js.Upstreams, upstreamJSON{Name: u.name, Up: u.st.Up, Total: u.st.Total})
	}
	b, err := json.Marshal(&js)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
