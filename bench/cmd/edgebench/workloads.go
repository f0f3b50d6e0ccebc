package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openengine/edge/bench/load"
)

// matrix sizes every workload. standardMatrix is `make bench-suite`;
// quickMatrix is `make bench-quick` (every workload briefly, small counts).
type matrix struct {
	warmup, measure time.Duration

	w1 []w1Variant

	w2Conns int
	w2Rates []float64
	w2Peers []string

	w3Counts         []int
	w3Settle, w3Hold time.Duration

	w4Subs       []int
	w4Deliveries []float64 // offered deliveries per second, each run for every subscriber count: publish rate = this / subscribers
	w4MaxRate    float64   // cap on publishes per second
	w4EventSize  int

	w5 load.StormConfig

	w6Workers int

	w7 []w7Variant

	wss1     []w1Variant // W1-wss: W1's variants run over wss://
	wss3     []int       // W3-wss: W3's connection counts over wss://
	wssPeers []string    // the servers of W1-wss and W3-wss (edge and gorilla + crypto/tls)

	p1            []w1Variant // P1's closed-loop variants, each run for every proxy
	p1Proxies     []string    // which of proxyNames run
	p1HoldConns   int         // P1's in-flight phase: connections x calls each (0: none)
	p1HoldPerConn int
	p1HoldSettle  time.Duration

	c1         []w1Variant // C1's closed-loop variants, each run for every X
	c1Clusters []string    // which of clusterNames run

	c2Subs       []int     // C2: subscribers over the edges
	c2Deliveries []float64 // C2: offered deliveries per second (as W4)
}

type w1Variant struct{ conns, window, size int }

func (v w1Variant) name() string {
	return fmt.Sprintf("c%dw%d-%s", v.conns, v.window, sizeName(v.size))
}

type w7Variant struct {
	size, frag int
}

func (v w7Variant) name() string {
	n := sizeName(v.size)
	if v.frag > 0 {
		n += fmt.Sprintf("-frag%s", sizeName(v.frag))
	}
	return n
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func standardMatrix() matrix {
	return matrix{
		warmup: time.Second, measure: 4 * time.Second,
		w1:      []w1Variant{{50, 1, 16}, {50, 1, 1024}, {4, 64, 16}, {4, 64, 1024}},
		w2Conns: 1000, w2Rates: []float64{10000, 30000, 60000}, w2Peers: []string{"edge", "raw", "gorilla", "nbio"},
		w3Counts: []int{1000, 10000, 15000}, w3Settle: time.Second, w3Hold: 2 * time.Second,
		w4Subs: []int{1000, 10000}, w4Deliveries: []float64{100000, 2000000}, w4MaxRate: 1000, w4EventSize: 128,
		w5: load.StormConfig{StormConns: 1000, Rate: 10000, SleepMs: 50, CancelFraction: 0.9,
			CancelWithin: 5 * time.Millisecond, EchoConns: 50, EchoRate: 5000, Quiet: 3 * time.Second, Storm: 4 * time.Second},
		w6Workers: 32,
		w7:        []w7Variant{{16 << 10, 0}, {1 << 20, 64 << 10}},
		// W1's variants but c50w1-1KiB, W3's counts but 15k: the suite stays
		// within its 15 minutes.
		wss1: []w1Variant{{50, 1, 16}, {4, 64, 16}, {4, 64, 1024}},
		// W3-wss at 1k only: 10k full handshakes (a few hundred a second
		// through the generator's bounded dials) would take the suite past
		// its 15 minutes; -w3-conns runs them on demand.
		wss3: []int{1000}, wssPeers: wssPeers,
		// 256 x 256 = 65,536 calls in flight: 256 task slots per connection
		// is edge's default --max-conn-tasks.
		p1: []w1Variant{{4, 64, 16}, {50, 1, 16}}, p1Proxies: proxyNames,
		p1HoldConns: 256, p1HoldPerConn: 256, p1HoldSettle: time.Second,
		c1: []w1Variant{{4, 64, 16}, {50, 1, 16}}, c1Clusters: clusterNames,
		c2Subs: []int{1000}, c2Deliveries: []float64{100000},
	}
}

func quickMatrix() matrix {
	return matrix{
		warmup: 200 * time.Millisecond, measure: time.Second,
		w1:      []w1Variant{{50, 1, 16}, {50, 1, 1024}, {4, 64, 16}, {4, 64, 1024}},
		w2Conns: 100, w2Rates: []float64{5000}, w2Peers: []string{"edge", "raw", "gorilla", "nbio"},
		w3Counts: []int{500}, w3Settle: 200 * time.Millisecond, w3Hold: 500 * time.Millisecond,
		w4Subs: []int{100}, w4Deliveries: []float64{20000}, w4MaxRate: 1000, w4EventSize: 128,
		w5: load.StormConfig{StormConns: 100, Rate: 2000, SleepMs: 50, CancelFraction: 0.9,
			CancelWithin: 5 * time.Millisecond, EchoConns: 10, EchoRate: 1000, Quiet: time.Second, Storm: time.Second},
		w6Workers: 32,
		w7:        []w7Variant{{16 << 10, 0}, {1 << 20, 64 << 10}},
		// One brief wss:// phase of each: the smoke run's check that the
		// generator's TLS path, the run's certificate and both servers'
		// --tls-cert work end to end (a few seconds).
		wss1: []w1Variant{{50, 1, 16}}, wss3: []int{200}, wssPeers: wssPeers,
		p1: []w1Variant{{4, 64, 16}, {50, 1, 16}}, p1Proxies: proxyNames,
		p1HoldConns: 64, p1HoldPerConn: 64, p1HoldSettle: 200 * time.Millisecond,
		// One short phase: the cluster starts and carries the load.
		c1: []w1Variant{{4, 64, 16}}, c1Clusters: []string{"nats-2w"},
		c2Subs: []int{100}, c2Deliveries: []float64{20000},
	}
}

// parseNums parses a comma-separated list of positive numbers (a matrix
// flag's value).
func parseNums(flagName, s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 || math.IsInf(v, 0) {
			return nil, fmt.Errorf("-%s: bad value %q", flagName, f)
		}
		out = append(out, v)
	}
	return out, nil
}

// override applies the matrix flags.
func (m *matrix) override(o *options) error {
	ints := func(vs []float64) []int {
		out := make([]int, len(vs))
		for i, v := range vs {
			out[i] = int(v)
		}
		return out
	}
	if o.w2Rates != "" {
		v, err := parseNums("w2-rates", o.w2Rates)
		if err != nil {
			return err
		}
		m.w2Rates = v
	}
	if o.w3Conns != "" {
		v, err := parseNums("w3-conns", o.w3Conns)
		if err != nil {
			return err
		}
		m.w3Counts, m.wss3 = ints(v), ints(v)
	}
	if o.w4Subs != "" {
		v, err := parseNums("w4-subs", o.w4Subs)
		if err != nil {
			return err
		}
		m.w4Subs = ints(v)
	}
	if o.proxies != nil {
		m.p1Proxies = o.proxies
	}
	if o.w4Offered != "" {
		v, err := parseNums("w4-deliveries", o.w4Offered)
		if err != nil {
			return err
		}
		m.w4Deliveries = v
	}
	return nil
}

// phase is one workload x variant x peer, run against a fresh server.
type phase struct {
	workload, variant, peer string
	params                  map[string]any
	gctrace                 bool
	tls                     bool          // wss://: the server gets the run's certificate (--tls-cert, --tls-key), the generator ClientTLS
	budget                  time.Duration // expected duration, for the progress bar and the timeout
	window                  time.Duration // length of the measured window (for profiles)
	run                     func(ctx context.Context, pc *phaseCtx) error
	// proxied (P1): peer is the proxy in front of an upstream edge (direct,
	// edge or nginx); runProxied starts both. holdCalls is how many calls
	// the phase holds in flight, holdPerConn on each connection (the
	// upstream's task limits are raised above them, the edge proxy's
	// --max-conn-tasks to holdPerConn+1, and it serves pprof).
	proxied     bool
	holdCalls   int
	holdPerConn int
	// cluster (C1): peer is X (direct, nats-1w, nats-2w); runCluster starts
	// edge and, for nats-*, natsd and the workers.
	cluster bool
}

// phaseCtx is what a phase's run gets: the running server and the record
// to fill.
type phaseCtx struct {
	srv    *server
	target load.Target
	rec    *Record
	samp   *sampler
	conns  atomic.Int64 // client connections open (for gctrace attribution)
	logf   func(string, ...any)
	// heapProfile is where W3 saves edge's heap profile after the ramp
	// (-pprof), "" for none.
	heapProfile string
	// P1: the upstream edge and its sampler (srv and samp are then the
	// proxy's, nil for direct).
	up     *server
	upSamp *sampler
	// C1: natsd and the workers, and their samplers (nil for direct).
	nats        *server
	natsSamp    *sampler
	workers     []*server
	workerSamps []*sampler
	// C2: where the subscribers connect.
	subTargets []load.Target
}

// allWorkloads lists the workload names in order.
var allWorkloads = []string{"W1", "W2", "W3", "W4", "W5", "W6", "W7", "W1-wss", "W3-wss", "P1", "C1", "C2"}

// wssPeers are the servers of the wss:// workloads: edge, and gorilla
// behind Go's crypto/tls (http.Server.ServeTLS).
var wssPeers = []string{"edge", "gorilla"}

// wssHandshake is the time a W3-wss phase budgets per connection for its
// TLS handshake (on top of W3's per-connection time).
const wssHandshake = 500 * time.Microsecond

// phases builds the run's phase list for the chosen workloads and peers.
func (m matrix) phases(workloads, peers []string) []phase {
	var ps []phase
	has := func(w string) bool { return slices.Contains(workloads, w) }
	peersOf := func(only []string) []string {
		var out []string
		for _, p := range peers {
			if only == nil || slices.Contains(only, p) {
				out = append(out, p)
			}
		}
		return out
	}
	if has("W1") {
		for _, v := range m.w1 {
			for _, p := range peersOf(nil) {
				ps = append(ps, m.w1Phase(v, p))
			}
		}
	}
	if has("W2") {
		for _, r := range m.w2Rates {
			for _, p := range peersOf(m.w2Peers) {
				ps = append(ps, m.w2Phase(r, p))
			}
		}
	}
	if has("W3") {
		for _, n := range m.w3Counts {
			for _, p := range peersOf(nil) {
				ps = append(ps, m.w3Phase(n, p))
			}
		}
	}
	if has("W4") {
		seen := map[string]bool{} // offered rates capped to the same publish rate run once
		for _, n := range m.w4Subs {
			for _, d := range m.w4Deliveries {
				for _, p := range peersOf(nil) {
					if ph := m.w4Phase(n, d, p); p != "raw" && !seen[ph.variant+"|"+p] {
						seen[ph.variant+"|"+p] = true
						ps = append(ps, ph)
					}
				}
			}
		}
	}
	if has("W5") && slices.Contains(peers, "edge") {
		ps = append(ps, m.w5Phase())
	}
	if has("W6") {
		for _, p := range peersOf(nil) {
			ps = append(ps, m.w6Phase(p))
		}
	}
	if has("W7") {
		for _, v := range m.w7 {
			for _, p := range peersOf(nil) {
				ps = append(ps, m.w7Phase(v, p))
			}
		}
	}
	if has("W1-wss") {
		for _, v := range m.wss1 {
			for _, p := range peersOf(m.wssPeers) {
				ps = append(ps, wss(m.w1Phase(v, p), 0))
			}
		}
	}
	if has("W3-wss") {
		for _, n := range m.wss3 {
			for _, p := range peersOf(m.wssPeers) {
				ps = append(ps, wss(m.w3Phase(n, p), time.Duration(n)*wssHandshake))
			}
		}
	}
	// P1's upstream is edge: it runs when edge is among the servers.
	if has("P1") && slices.Contains(peers, "edge") {
		for _, v := range m.p1 {
			for _, x := range m.p1Proxies {
				ps = append(ps, m.p1Phase(v, x))
				if x == "edge" && slices.Contains(peers, baseEdge) {
					ps = append(ps, m.p1Phase(v, baseEdge)) // -base-src: right after edge
				}
			}
		}
		if m.p1HoldConns > 0 && slices.Contains(m.p1Proxies, "edge") {
			ps = append(ps, m.p1HoldPhase(m.p1HoldConns, m.p1HoldPerConn))
		}
	}
	// C1 is edge's (with NATS and workers): it runs when edge is among the
	// servers.
	if has("C1") && slices.Contains(peers, "edge") {
		for _, v := range m.c1 {
			for _, x := range m.c1Clusters {
				ps = append(ps, m.c1Phase(v, x))
			}
		}
	}
	if has("C2") && slices.Contains(peers, "edge") {
		for _, n := range m.c2Subs {
			for _, d := range m.c2Deliveries {
				for _, x := range fanoutNames {
					ps = append(ps, m.c2Phase(n, d, x))
				}
			}
		}
	}
	return ps
}

// wss makes p its workload over wss:// ("W1" becomes "W1-wss"): the same
// variant, server and measurement, with more budget for the handshakes.
func wss(p phase, handshakes time.Duration) phase {
	p.workload += "-wss"
	p.tls = true
	p.budget += handshakes
	return p
}

func (m matrix) w1Phase(v w1Variant, peer string) phase {
	return phase{workload: "W1", variant: v.name(), peer: peer, window: m.measure,
		params: map[string]any{"conns": v.conns, "window": v.window, "params_bytes": v.size},
		budget: m.warmup + m.measure + time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			req, off := pc.target.Dialect.Echo(load.Params(v.size))
			// Spin: parked whenever every connection waits for the server,
			// the generator's vCPU halts, and waking it is slow on this kind
			// of VM: against a slower server the closed loop then becomes a
			// latency-bound ping-pong that never loads the server fully.
			// The idle polling is taken out of the generator's CPU figures.
			res, err := load.RunClosed(ctx, load.ClosedConfig{Target: pc.target, Conns: v.conns, Window: v.window,
				Request: req, IDOff: off, Warmup: m.warmup, Measure: m.measure, Hooks: pc.samp.hooks(), Spin: true})
			pc.fill(res, "req/s")
			pc.spinIdle(res)
			return err
		}}
}

func (m matrix) w2Phase(rate float64, peer string) phase {
	return phase{workload: "W2", variant: fmt.Sprintf("%gk/s", rate/1000), peer: peer, window: m.measure,
		params: map[string]any{"conns": m.w2Conns, "rate": rate, "params_bytes": 16},
		budget: m.warmup + m.measure + 2*time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			req, off := pc.target.Dialect.Echo(load.Params(16))
			// Spin: an idle generator's vCPU wakes late on this kind of VM
			// (tens of microseconds, sometimes milliseconds), which would be
			// charged to the server as latency; polling keeps every send on
			// time. The polling that found nothing to do is not the
			// generator's work, so it is taken out of its CPU figures.
			res, err := load.RunOpen(ctx, load.OpenConfig{Target: pc.target, Conns: m.w2Conns, Rate: rate,
				Request: req, IDOff: off, Warmup: m.warmup, Measure: m.measure, Hooks: pc.samp.hooks(), Spin: true})
			pc.fill(res, "req/s")
			pc.spinIdle(res)
			pc.rec.SendLag = res.SendLag
			if res.Skipped > 0 {
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("%d requests skipped: a connection had 1024 outstanding", res.Skipped))
			}
			return err
		}}
}

func (m matrix) w3Phase(n int, peer string) phase {
	return phase{workload: "W3", variant: fmt.Sprintf("%d", n), peer: peer, gctrace: true,
		params: map[string]any{"conns": n},
		budget: m.w3Settle + m.w3Hold + time.Duration(n)*200*time.Microsecond + time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			// edge serves pprof: exact live heap (after a forced GC) before
			// and after; the peers: gctrace, coarser. The first pprof request
			// comes before the RSS baseline so that its own memory is not
			// counted against the connections.
			paddr := pc.srv.pprof()
			var heap0, heap1 int64 = -1, -1
			if paddr != "" {
				if h, _, err := heapStats(paddr); err == nil {
					heap0 = h
				}
			}
			base, err := rssKiB(pc.srv.pid)
			if err != nil {
				return err
			}
			pc.rec.RSSBaseKiB = base
			hooks := pc.samp.hooks()
			end := hooks.OnEnd
			hooks.OnEnd = func() {
				end() // RSS first: the forced GC below must not disturb it
				if paddr != "" && heap0 >= 0 {
					if h, _, err := heapStats(paddr); err == nil {
						heap1 = h
					}
				}
				if paddr != "" && pc.heapProfile != "" {
					// After heapStats' forced GC: the profile's in-use
					// figures are the idle connections'.
					if err := heapProfile(paddr, pc.heapProfile); err != nil {
						pc.rec.Notes = append(pc.rec.Notes, "heap profile: "+err.Error())
					}
				}
			}
			res, err := load.RunIdle(ctx, load.IdleConfig{Target: pc.target, Conns: n, Settle: m.w3Settle, Hold: m.w3Hold,
				Hooks: hooks, Progress: func(d int) { pc.conns.Store(int64(d)) }})
			pc.conns.Store(int64(res.Conns))
			pc.rec.Extra = res
			pc.rec.Conns = res.Conns
			if res.RampSeconds > 0 {
				pc.rec.Throughput, pc.rec.Unit = float64(res.Conns)/res.RampSeconds, "conns/s (ramp)"
			}
			pc.rec.Server, pc.rec.Client = pc.samp.usage(0)
			if pc.rec.Server != nil && res.Conns > 0 {
				pc.rec.RSSKiB = pc.rec.Server.RSSKiB
				pc.rec.RSSPerConnKiB = float64(pc.rec.RSSKiB-base) / float64(res.Conns)
			}
			switch heap, at := pc.srv.gcHeapMB.Load(), pc.srv.gcAtConn.Load(); {
			case heap1 >= 0 && res.Conns > 0:
				pc.rec.HeapPerConnKiB = float64(heap1-heap0) / 1024 / float64(res.Conns)
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("heap: %.1f MiB live before, %.1f MiB after (pprof, forced GC)",
					float64(heap0)/(1<<20), float64(heap1)/(1<<20)))
			case pc.srv.gcCount.Load() > 0 && at >= int64(n)/2 && heap >= 2:
				pc.rec.HeapPerConnKiB = float64(heap) * 1024 / float64(at)
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("heap: %d MB live at the last GC with %d connections open (gctrace)", heap, at))
			}
			if res.Failed > 0 || res.ClosedByPeer > 0 {
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("%d connections failed, %d closed by the server", res.Failed, res.ClosedByPeer))
			}
			if err == nil && res.Conns < n {
				err = fmt.Errorf("%d of %d connections established", res.Conns, n)
			}
			return err
		}}
}

// w4Phase is one fan-out phase: subs subscribers, offered deliveries per
// second in total (capped at w4MaxRate publishes per second). The variant
// names the offered rate actually run, so that two rates never share a row.
func (m matrix) w4Phase(subs int, offered float64, peer string) phase {
	rate := min(offered/float64(subs), m.w4MaxRate)
	return phase{workload: "W4", variant: fmt.Sprintf("%d subs %s", subs, rateName(rate*float64(subs))), peer: peer, window: m.measure,
		params: map[string]any{"subscribers": subs, "publish_rate": rate, "event_bytes": m.w4EventSize,
			"offered_deliveries": rate * float64(subs)},
		budget: m.warmup + m.measure + time.Duration(subs)*200*time.Microsecond + 2*time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			res, err := load.RunFanout(ctx, load.FanoutConfig{Target: pc.target, Subscribers: subs, Topic: "bench",
				Rate: rate, EventSize: m.w4EventSize, Warmup: m.warmup, Measure: m.measure, Hooks: pc.samp.hooks()})
			pc.fill(res, "deliveries/s")
			pc.rec.SendLag = res.SendLag
			if res.Lost > 0 {
				exp := float64(res.Published) * float64(res.Subscribers)
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("%d publishes in the window; %d of their %.0f deliveries (%.1f%%) never arrived",
					res.Published, res.Lost, exp, 100*float64(res.Lost)/exp))
			}
			if res.ClosedByPeer > 0 {
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("%d subscriptions closed by the server (slow consumer)", res.ClosedByPeer))
			}
			return err
		}}
}

func (m matrix) w5Phase() phase {
	cfg := m.w5
	return phase{workload: "W5", variant: fmt.Sprintf("%d conns", cfg.StormConns), peer: "edge", window: cfg.Storm,
		params: map[string]any{"storm_conns": cfg.StormConns, "sleep_rate": cfg.Rate, "sleep_ms": cfg.SleepMs,
			"cancel_fraction": cfg.CancelFraction, "cancel_within_ms": cfg.CancelWithin.Milliseconds(), "echo_conns": cfg.EchoConns,
			"echo_rate": cfg.EchoRate},
		budget: 2*m.warmup + cfg.Quiet + cfg.Storm + 3*time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			c := cfg
			c.Target, c.EchoParams, c.Warmup, c.Hooks = pc.target, load.Params(16), m.warmup, pc.samp.hooks()
			res, err := load.RunStorm(ctx, c)
			pc.rec.Extra = res
			pc.rec.Ops, pc.rec.Seconds = res.EchoStorm.Requests, res.EchoStorm.Seconds
			pc.rec.Throughput, pc.rec.Unit = res.EchoStorm.Rate, "echo req/s (during storm)"
			l := res.EchoStorm.Latency
			pc.rec.Latency = &l
			pc.rec.Errors = res.Errors + res.EchoStorm.Errors
			pc.rec.Server, pc.rec.Client = pc.samp.usage(0)
			if err == nil && res.Leaked != 0 {
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("LEAK: %d in-flight ids, %d tasks, %d subscriptions left after settling",
					res.InFlightIDs, res.Tasks, res.Subscriptions))
			}
			if err == nil && res.StatsAnswered < res.StatsConns {
				err = fmt.Errorf("edge/stats answered on %d of %d connections", res.StatsAnswered, res.StatsConns)
			}
			return err
		}}
}

func (m matrix) w6Phase(peer string) phase {
	return phase{workload: "W6", variant: fmt.Sprintf("%d workers", m.w6Workers), peer: peer, window: m.measure,
		params: map[string]any{"workers": m.w6Workers},
		budget: m.warmup + m.measure + 2*time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			res, err := load.RunChurn(ctx, load.ChurnConfig{Target: pc.target, Workers: m.w6Workers, Params: load.Params(16),
				Warmup: m.warmup, Measure: m.measure, Hooks: pc.samp.hooks()})
			pc.fill(res.Result, "upgrades/s")
			pc.rec.Extra = res
			if res.CloseTimeouts > 0 {
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("%d closing handshakes not completed by the server within 1 s", res.CloseTimeouts))
			}
			return err
		}}
}

// w7Result is W7's extra: the large-message connection and the small-request
// probe beside it (and alone, before).
type w7Result struct {
	Large      load.Result `json:"large"`
	Small      load.Result `json:"small_during"`
	SmallAlone load.Result `json:"small_alone"`
	MBPerS     float64     `json:"mb_per_s"`
}

func (m matrix) w7Phase(v w7Variant, peer string) phase {
	return phase{workload: "W7", variant: v.name(), peer: peer, window: m.measure,
		params: map[string]any{"message_bytes": v.size, "fragment_bytes": v.frag, "conns": 1, "window": 1},
		budget: 2*(m.warmup+m.measure) + 3*time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			d := pc.target.Dialect
			sreq, soff := d.Echo(load.Params(16))
			// Both closed loops park (no Spin): they run side by side on the
			// generator's one P, and a spinning loop would hand it to the
			// other only every millisecond, which the probe would measure.
			small := load.ClosedConfig{Target: pc.target, Conns: 1, Window: 1, Request: sreq, IDOff: soff,
				Warmup: m.warmup, Measure: m.measure / 2}
			var out w7Result
			var err error
			if out.SmallAlone, err = load.RunClosed(ctx, small); err != nil {
				return fmt.Errorf("small alone: %w", err)
			}
			lreq, loff := load.EchoOfSize(d, v.size)
			large := load.ClosedConfig{Target: pc.target, Conns: 1, Window: 1, Request: lreq, IDOff: loff, Frag: v.frag,
				ReadBuf: 64 << 10, Warmup: m.warmup, Measure: m.measure, Hooks: pc.samp.hooks()}
			small.Measure = m.measure
			smallc := make(chan error, 1)
			go func() {
				var err error
				out.Small, err = load.RunClosed(ctx, small)
				smallc <- err
			}()
			out.Large, err = load.RunClosed(ctx, large)
			serr := <-smallc
			out.MBPerS = out.Large.Rate * float64(v.size) / (1 << 20)
			pc.fill(out.Large, "msgs/s")
			pc.rec.Extra = out
			sl := out.Small.Latency
			pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("small-request probe: p99 %.0f us, max %.0f us during; p99 %.0f us alone",
				sl.P99, sl.Max, out.SmallAlone.Latency.P99))
			if err == nil {
				err = serr
			}
			return err
		}}
}

// spinIdle takes the polling a spinning generator did with nothing to do
// (res.SpinIdle) out of its CPU figures, and notes it. SpinIdle is wall
// time: on a busy machine the generator also waited for its CPU meanwhile,
// which is not CPU time, so the time it waited (Usage.RunWaitS, the whole
// window's: an upper bound of what fell into the polling) is not taken out.
func (pc *phaseCtx) spinIdle(res load.Result) {
	if c := pc.rec.Client; c != nil && res.SpinIdle > 0 && res.Requests > 0 && res.Seconds > 0 {
		idle := max(res.SpinIdle-c.RunWaitS, 0)
		c.Util -= idle / res.Seconds
		c.UsPerOp -= idle * 1e6 / float64(res.Requests)
		note := fmt.Sprintf("generator polled idle for %.2f s of the window (taken out of its CPU)", res.SpinIdle)
		if c.RunWaitS > 0.01*res.Seconds {
			note = fmt.Sprintf("generator polled idle for %.2f s of the window and waited %.2f s for its CPU (machine busy): %.2f s taken out of its CPU",
				res.SpinIdle, c.RunWaitS, idle)
		}
		pc.rec.Notes = append(pc.rec.Notes, note)
	}
}

// fill copies a load.Result and the window's resource use into the record.
func (pc *phaseCtx) fill(res load.Result, unit string) {
	r := pc.rec
	r.Ops, r.Seconds, r.Errors = res.Requests, res.Seconds, res.Errors
	r.Throughput, r.Unit = res.Rate, unit
	if res.Latency.Count > 0 {
		l := res.Latency
		r.Latency = &l
	}
	if r.Extra == nil {
		r.Extra = res
	}
	r.Server, r.Client = pc.samp.usage(res.Requests)
	if res.Unmatched > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d replies matched no request in flight", res.Unmatched))
	}
	if res.Errors > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d error replies", res.Errors))
	}
}

// rateName is a rate for a variant name: 500/s, 20k/s, 1.5M/s.
func rateName(r float64) string {
	switch {
	case r >= 1e6:
		return strconv.FormatFloat(r/1e6, 'g', 4, 64) + "M/s"
	case r >= 1e3:
		return strconv.FormatFloat(r/1e3, 'g', 4, 64) + "k/s"
	}
	return strconv.FormatFloat(r, 'g', 4, 64) + "/s"
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// filterVariants keeps the phases whose variant name contains one of subs
// (-variants); no subs keeps them all.
func filterVariants(ps []phase, subs []string) []phase {
	if len(subs) == 0 {
		return ps
	}
	var out []phase
	for _, p := range ps {
		if slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(p.variant, s) }) {
			out = append(out, p)
		}
	}
	return out
}

// parseList splits a comma-separated flag value; "all" or "" gives all.
func parseList(s string, all []string) ([]string, error) {
	if s == "" || s == "all" {
		return all, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(all, f) {
			return nil, fmt.Errorf("unknown %q (want some of %s)", f, strings.Join(all, ","))
		}
		out = append(out, f)
	}
	return out, nil
}
