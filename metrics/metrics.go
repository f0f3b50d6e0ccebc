// Package metrics exposes edge's counters (CONTRACT.md section 12): the
// Prometheus text format for /metrics and a JSON snapshot for the
// dashboard's /api/stats. It only reads: the event loops count into plain
// fields that they alone write (loop.Server.Stats collects them on the
// loops), the upstreams count atomically off the loops, and everything is
// turned into metrics at scrape time. Nothing here runs per request.
//
// /api/history serves the last five minutes of /api/stats, one sample a
// second, taken by the one goroutine of Start (history.go) while the admin
// listener serves. Both name the instance (SetInstance).
//
// The metrics of /metrics:
//
//	edge_connections{transport}                      gauge      open client connections (ws, ndjson)
//	edge_connections_accepted_total{transport}       counter    accepted
//	edge_connections_rejected_total{reason}          counter    refused before JSON-RPC: bad_request, not_found,
//	                                                            header_too_large, upgrade_required, handshake_timeout,
//	                                                            handshake_aborted, origin, limit, unauthorized,
//	                                                            draining, accept_paused, tls_handshake,
//	                                                            handshake_pool_full, proxy_header
//	edge_connections_closed_total{code}              counter    ended, by close code: 1000 1001 1002 1003 1006 1007
//	                                                            1008 1009 4401 other
//	edge_connections_paused                          gauge      reads paused for backpressure
//	edge_outbound_pending_bytes                      gauge      output not yet taken by the kernel
//	edge_requests_total{method,outcome}              counter    outcome: ok error cancelled busy rate_limited
//	                                                            timeout unavailable; method: registry name or other
//	edge_request_duration_seconds{method}            histogram  admission to answer queued
//	edge_requests_in_flight                          gauge      admitted, answer owed
//	edge_subscriptions                               gauge      not ended
//	edge_events_delivered_total                      counter    subscription events handed to connections
//	edge_slow_consumers_total{kind}                  counter    subscription (SLOW_CONSUMER), connection (1008)
//	edge_upstream_connections_up{upstream}           gauge      upstream connections taking calls
//	edge_upstream_connections{upstream}              gauge      upstream connections configured
//	edge_upstream_requests_total{upstream,outcome}   counter    outcome: ok error cancelled timeout unavailable busy
//	edge_upstream_request_duration_seconds{upstream} histogram  forwarded to answered
//	edge_upstream_messages_dropped_total{upstream}   counter    upstream messages dropped
//	edge_upstream_late_answers_total{upstream}      counter    answers to calls that had timed out
//	edge_upstream_notifications_dropped_total{upstream} counter notifications over --upstream-http-conns
//	edge_upstream_slow_closed_total{upstream}        counter    connections closed: output over --upstream-max-pending-bytes or stalled
//	edge_metrics_stale_loops                         gauge      loops that missed the last scrape's deadline
//	edge_log_dropped_total                           counter    log lines dropped: stderr did not keep up
//
// and the Go runtime's (go_*) and the process's (process_*).
package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openengine/edge/internal/hist"
	"github.com/openengine/edge/internal/redact"
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
	gw      *loop.Server    // immutable
	rpc     *rpc.Server     // immutable
	ups     *upstream.Set   // immutable; nil: no upstreams
	methods []string        // immutable: rpc.Server.MethodNames
	read    func() snapshot // immutable: snapshot, or a test's
	history *history        // immutable pointer; the ring guards itself

	instance atomic.Pointer[Instance] // SetInstance's; nil before

	mu     sync.Mutex
	recent marks // guarded by mu: the request histogram at past /api/stats requests

	run struct { // the sampler's lifetime (Start, Close)
		sync.Mutex
		started, closed bool          // guarded by the Mutex
		stop, done      chan struct{} // immutable after Start
	}
}

// New returns the metrics of a gateway: its loop server, its rpc server
// and its upstreams (nil or empty for none).
func New(gw *loop.Server, srv *rpc.Server, ups *upstream.Set) *Metrics {
	m := &Metrics{gw: gw, rpc: srv, ups: ups, methods: srv.MethodNames()}
	var names []string
	if ups != nil {
		for _, u := range ups.Upstreams() {
			names = append(names, u.Name())
		}
	}
	m.read = m.snapshot
	m.history = newHistory(names)
	return m
}

// Instance names the edge a dashboard shows, in its header, its title and
// /api/stats, so that the tabs of several edges are told apart. It holds no
// credential: addresses and the version only.
type Instance struct {
	// Listen are the data listeners: ws://HOST:PORT/PATH (wss:// with
	// TLS), and tcp://HOST:PORT for NDJSON.
	Listen []string `json:"listen"`
	// Admin is the admin listener's HOST:PORT.
	Admin string `json:"admin"`
	// Version is edge's version line (edge version).
	Version string `json:"version"`
}

// SetInstance sets what /api/stats and /api/history name the instance: edge
// sets it before the listeners start and again with the addresses they
// took. Any userinfo in a URL is masked all the same. Safe for concurrent
// use.
func (m *Metrics) SetInstance(in Instance) {
	out := Instance{Listen: make([]string, len(in.Listen)), Admin: redact.URLs(in.Admin), Version: redact.URLs(in.Version)}
	for i, l := range in.Listen {
		out.Listen[i] = redact.URLs(l)
	}
	m.instance.Store(&out)
}

// Instance returns what SetInstance set, the zero Instance (with an empty
// Listen) before. Safe for concurrent use.
func (m *Metrics) Instance() Instance {
	if in := m.instance.Load(); in != nil {
		return *in
	}
	return Instance{Listen: []string{}}
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
	late    int64
}

// snapshot reads every counter.
func (m *Metrics) snapshot() snapshot {
	s := snapshot{loop: m.gw.Stats(loopTimeout), inFlight: m.rpc.InFlight()}
	if m.ups != nil {
		for _, u := range m.ups.Upstreams() {
			s.upstreams = append(s.upstreams, upstreamStats{name: u.Name(), st: u.Stats(), dropped: u.Dropped(), late: u.Late()})
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
