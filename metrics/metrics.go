// Package metrics exposes edge's counters (CONTRACT.md section 12): the
// Prometheus text format for /metrics and a JSON snapshot for the
// dashboard's /api/stats. It only reads: the event loops count into plain
// fields that they alone write (loop.Server.Stats collects them on the
// loops), the upstreams count atomically off the loops, and everything is
// turned into metrics at scrape time. Nothing here runs per request.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/openengine/edge/internal/hist"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
)

// loopTimeout bounds the wait for the event loops' snapshots: a loop busy
// for longer contributes its previous one (loop.Stats.Stale).
const loopTimeout = 250 * time.Millisecond

// Metrics reads the gateway's counters for the handlers. Safe for
// concurrent use.
type Metrics struct {
	gw      *loop.Server  // immutable
	rpc     *rpc.Server   // immutable
	ups     *upstream.Set // immutable; nil: no upstreams
	methods []string      // immutable: rpc.Server.MethodNames

	mu     sync.Mutex
	recent []latencyMark // guarded by mu: the request histogram at past /api/stats requests
}

// New returns the metrics of a gateway: its loop server, its rpc server
// and its upstreams (nil or empty for none).
func New(gw *loop.Server, srv *rpc.Server, ups *upstream.Set) *Metrics {
	return &Metrics{gw: gw, rpc: srv, ups: ups, methods: srv.MethodNames()}
}

// snapshot is everything a scrape reports.
type snapshot struct {
	loop      loop.Stats
	inFlight  int
	upstreams []upstreamStats
}

type upstreamStats struct {
	name    string
	st      upstream.Stats
	dropped int64
}

// snapshot reads every counter.
func (m *Metrics) snapshot() snapshot {
	s := snapshot{loop: m.gw.Stats(loopTimeout), inFlight: m.rpc.InFlight()}
	if m.ups != nil {
		for _, u := range m.ups.Upstreams() {
			s.upstreams = append(s.upstreams, upstreamStats{name: u.Name(), st: u.Stats(), dropped: u.Dropped()})
		}
	}
	return s
}

// Handler serves /metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return http.HandlerFunc(m.serveMetrics) }

// StatsHandler serves /api/stats, the dashboard's JSON snapshot.
func (m *Metrics) StatsHandler() http.Handler { return http.HandlerFunc(m.serveStats) }

// requestHist is the request-duration histogram over every method.
func requestHist(c *rpc.Counters) hist.Hist {
	var h hist.Hist
	for i := range c.Methods {
		h.Add(&c.Methods[i].Duration)
	}
	return h
}
