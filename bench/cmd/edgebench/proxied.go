package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/openengine/edge/bench/load"
)

// P1 ("proxied") puts something between the clients and an upstream edge
// (memory backend, WebSocket listener plus --ndjson-listen) and measures the
// three side by side in one run:
//
//   - direct: the clients talk to the upstream's WebSocket listener;
//   - edge:   clients -> edge --upstream up=tcp://<upstream's NDJSON> -> upstream;
//   - nginx:  clients -> nginx (WebSocket reverse proxy, one worker) -> the
//     upstream's WebSocket listener.
//
// The proxy and the upstream are each a fresh process per measurement, both
// pinned to the server CPU (GOMAXPROCS=1, edge with --loops 1), so that every
// X gets the same placement: one CPU for everything server-side, the
// generator on the other. Their CPU is measured separately.

// proxyNames are P1's X, in run order.
var proxyNames = []string{"direct", "edge", "nginx"}

// upstreamGate is the edge/gate name of P1's in-flight phase.
const upstreamGate = "p1-hold"

// proxiedOpts are what runProxied needs beyond phaseOpts.
type proxiedOpts struct {
	edgeBin   string
	baseBin   string // edge-base, the proxy of P1's edge-base phases (-base-src)
	nginxBin  string // "" when nginx is missing
	nginxErr  error  // why
	edgePprof bool   // this edge serves --pprof-listen
	cpuPprof  bool   // -pprof: CPU profiles of the proxy and the upstream
	perf      []string
}

// runProxied runs one P1 phase: it starts the upstream edge, then the proxy
// p.peer in front of it (none for direct), waits until a call goes through,
// runs the phase with both measured, and stops them.
func runProxied(ctx context.Context, p phase, po proxiedOpts, pin pinning, out string, opts phaseOpts, rec *Record, logf func(string, ...any)) {
	if p.peer == "nginx" && po.nginxBin == "" {
		rec.Skipped, rec.Error = true, po.nginxErr.Error()
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 2*p.budget+30*time.Second)
	defer cancel()
	base := fmt.Sprintf("%s-%s-%s", p.workload, safeName(p.variant), p.peer)
	logPath := func(suffix string) string { return filepath.Join(out, "logs", base+suffix+".log") }
	pc := &phaseCtx{rec: rec, logf: logf}

	// The upstream: its two NDJSON connections from the edge proxy carry
	// every client's calls, so its per-connection and global task limits
	// are raised above the most calls P1 holds in flight.
	limit := strconv.Itoa(max(p.holdCalls, 1) + 1024)
	upArgs := append([]string{"--ndjson-listen", "127.0.0.1:0", "--max-conn-tasks", limit, "--max-tasks", limit}, opts.edgeArgs...)
	up, err := startServer(pctx, serverSpec{peer: "edge", bin: po.edgeBin, logPath: logPath("-upstream"), pin: pin,
		pprof: po.edgePprof && (po.cpuPprof || p.holdCalls > 0), extra: upArgs})
	if err != nil {
		rec.Error = "upstream: " + err.Error()
		return
	}
	defer func() {
		if serr := up.stop(10 * time.Second); serr != nil {
			rec.Notes = append(rec.Notes, "upstream stop: "+serr.Error())
		}
	}()
	if up.ndjson == "" {
		rec.Error = "the upstream edge reported no --ndjson-listen address"
		return
	}
	pc.up = up
	target := up.addr
	var px *server
	switch p.peer {
	case "edge", baseEdge:
		args := []string{"--upstream", "up=tcp://" + up.ndjson}
		if p.holdPerConn > 0 {
			// edge/stats takes a task slot too (CONTRACT.md section 3):
			// one more than the held calls.
			args = append(args, "--max-conn-tasks", strconv.Itoa(p.holdPerConn+1))
		}
		args = append(args, opts.edgeArgs...)
		bin, pprof := po.edgeBin, po.edgePprof && (po.cpuPprof || p.holdCalls > 0)
		if p.peer == baseEdge {
			// The upstream stays this edge, so that the two proxies are
			// measured in front of the same server.
			bin, pprof = po.baseBin, false
		}
		px, err = startServer(pctx, serverSpec{peer: "edge", bin: bin, logPath: logPath(""), pin: pin,
			pprof: pprof, extra: args})
	case "nginx":
		px, err = startNginx(pctx, po.nginxBin, up.addr, logPath(""), pin)
		if err == nil {
			rec.Notes = append(rec.Notes, "nginx "+nginxVersion(po.nginxBin)+": one worker, the configuration is logs/"+base+".conf")
		}
	}
	if err != nil {
		rec.Error = err.Error()
		return
	}
	if px != nil {
		defer func() {
			if serr := px.stop(10 * time.Second); serr != nil {
				rec.Notes = append(rec.Notes, "stop: "+serr.Error())
			}
		}()
		target = px.addr
		rec.ServerCPUs = px.cpus
	} else {
		rec.ServerCPUs = up.cpus
	}
	pc.srv = px
	pc.target = load.Target{Addr: target, Dialect: load.JSONRPC{}}
	if err := waitReady(pctx, pc.target, 10*time.Second); err != nil {
		rec.Error = fmt.Sprintf("no call went through %s in 10 s: %v", p.peer, err)
		return
	}

	pc.upSamp = &sampler{pids: []int{up.pid}}
	upAddr := ""
	if po.cpuPprof {
		upAddr = up.pprof()
	}
	pc.upSamp.instrument(out, base+"-upstream", p.window, upAddr, contains(po.perf, "upstream"), opts.statEvents, rec, "upstream: ")
	if px != nil {
		pc.samp = &sampler{pids: px.pids()}
		pxAddr := ""
		if po.cpuPprof && p.peer == "edge" {
			pxAddr = px.pprof()
		}
		pc.samp.instrument(out, base, p.window, pxAddr, contains(po.perf, p.peer), opts.statEvents, rec, "")
	}
	err = p.run(pctx, pc)
	if pc.samp != nil {
		rec.Syscalls = pc.samp.finish(rec, "")
	}
	rec.UpstreamSyscalls = pc.upSamp.finish(rec, "upstream: ")
	if err == nil && up.exited() {
		err = fmt.Errorf("the upstream exited during the run: %v\n%s", up.waitErr, tailFile(logPath("-upstream"), 1000))
	}
	if err == nil && px != nil && px.exited() {
		err = fmt.Errorf("%s exited during the run: %v\n%s", p.peer, px.waitErr, tailFile(logPath(""), 1000))
	}
	if err != nil {
		rec.Error = err.Error()
		return
	}
	rec.OK = true
}

// waitReady calls edge/echo through t until it is answered: the proxy is up
// and connected to the upstream (the edge proxy answers UPSTREAM_UNAVAILABLE
// until its upstream connections are established).
func waitReady(ctx context.Context, t load.Target, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		c, err := load.Dial(ctx, t, 0)
		if err == nil {
			_, err = load.Call(c, "edge/echo", []byte(`{"ready":true}`), time.Second)
			c.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// proxiedHooks sample the proxy (if any) and the upstream at the window's
// edges.
func (pc *phaseCtx) proxiedHooks() load.Hooks {
	h := pc.upSamp.hooks()
	if pc.samp == nil {
		return h
	}
	ph := pc.samp.hooks()
	return load.Hooks{
		OnStart: func() { ph.OnStart(); h.OnStart() },
		OnEnd:   func() { ph.OnEnd(); h.OnEnd() },
	}
}

// fillProxied copies a closed-loop result into the record: the proxy's use
// is Server (none for direct), the upstream's Upstream.
func (pc *phaseCtx) fillProxied(res load.Result) {
	r := pc.rec
	r.Ops, r.Seconds, r.Errors = res.Requests, res.Seconds, res.Errors
	r.Throughput, r.Unit = res.Rate, "req/s"
	if res.Latency.Count > 0 {
		l := res.Latency
		r.Latency = &l
	}
	r.Extra = res
	r.Upstream, r.Client = pc.upSamp.usage(res.Requests)
	if pc.samp != nil {
		r.Server, _ = pc.samp.usage(res.Requests)
	}
	if res.Unmatched > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d replies matched no request in flight", res.Unmatched))
	}
	if res.Errors > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d error replies", res.Errors))
	}
}

// p1Phase is one P1 throughput phase: echo in a closed loop through proxy,
// as W1 runs it.
func (m matrix) p1Phase(v w1Variant, proxy string) phase {
	return phase{workload: "P1", variant: v.name(), peer: proxy, proxied: true, window: m.measure,
		params: map[string]any{"conns": v.conns, "window": v.window, "params_bytes": v.size},
		budget: m.warmup + m.measure + 2*time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			res, err := closedEcho(ctx, pc, v, m, pc.proxiedHooks())
			pc.fillProxied(res)
			pc.spinIdle(res)
			if err == nil && res.Errors > 0 {
				err = fmt.Errorf("%d error replies through %s", res.Errors, pc.rec.Peer)
			}
			return err
		}}
}

// holdResult is the in-flight phase's extra: the load generator's view and
// the edge proxy's memory with the calls in flight.
type holdResult struct {
	load.HoldResult
	RSSBeforeKiB       int64   `json:"rss_before_kib"`
	RSSHeldKiB         int64   `json:"rss_held_kib"`
	RSSPerCallBytes    float64 `json:"rss_per_call_bytes"`
	HeapBefore         int64   `json:"heap_before_bytes"` // live heap after a forced GC (pprof), -1: unknown
	HeapHeld           int64   `json:"heap_held_bytes"`
	HeapPerCallBytes   float64 `json:"heap_per_call_bytes,omitempty"`
	GoroutinesBefore   int64   `json:"goroutines_before"` // -1: unknown
	GoroutinesHeld     int64   `json:"goroutines_held"`
	UpstreamRSSHeldKiB int64   `json:"upstream_rss_held_kib"`
}

// p1HoldPhase measures the edge proxy's memory per in-flight proxied call:
// conns connections each send perConn edge/gate calls, which the upstream
// holds; the proxy's RSS (and live heap, after a forced GC) is read before
// the calls and with all of them in flight; then the gate is opened on the
// upstream directly (the proxy's task limits are full) and every call must
// come back answered.
func (m matrix) p1HoldPhase(conns, perConn int) phase {
	calls := conns * perConn
	return phase{workload: "P1", variant: fmt.Sprintf("hold-%dx%d", conns, perConn), peer: "edge", proxied: true,
		holdCalls: calls, holdPerConn: perConn,
		params: map[string]any{"conns": conns, "calls_per_conn": perConn, "calls": calls},
		budget: 2*m.p1HoldSettle + time.Duration(conns)*2*time.Millisecond + time.Duration(calls)*20*time.Microsecond + 3*time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			out := holdResult{HeapBefore: -1, HeapHeld: -1, GoroutinesBefore: -1, GoroutinesHeld: -1}
			pid, paddr := pc.srv.pid, pc.srv.pprof()
			var rerr error
			idle := func() {
				// The pprof requests come before the RSS reading, so that
				// their own memory is in the baseline (as W3 does).
				if paddr != "" {
					out.HeapBefore, _, _ = heapStatsOr(paddr)
					out.GoroutinesBefore = goroutines(paddr)
				}
				out.RSSBeforeKiB, rerr = rssKiB(pid)
			}
			held := func() {
				var err error
				if out.RSSHeldKiB, err = rssKiB(pid); err != nil && rerr == nil {
					rerr = err
				}
				out.UpstreamRSSHeldKiB, _ = rssKiB(pc.up.pid)
				if paddr != "" {
					out.HeapHeld, _, _ = heapStatsOr(paddr)
					out.GoroutinesHeld = goroutines(paddr)
				}
			}
			release := func() (int64, error) {
				c, err := load.Dial(ctx, load.Target{Addr: pc.up.addr, Dialect: load.JSONRPC{}}, 0)
				if err != nil {
					return -1, err
				}
				defer c.Close()
				msg, err := load.Call(c, "edge/open", []byte(`{"name":"`+upstreamGate+`"}`), 10*time.Second)
				if err != nil {
					return -1, err
				}
				n, ok := load.FindUint(msg, `"released":`)
				if !ok {
					return -1, fmt.Errorf("edge/open: %.200s", msg)
				}
				return int64(n), nil
			}
			// edge/stats says the proxy holds every call; the upstream's
			// goroutines blocked in the memory backend's gate say they all
			// got there (the upstream takes a while to read and dispatch
			// 64k calls on a core it shares with the proxy). One opened
			// before would never be answered.
			upPprof := pc.up.pprof()
			if upPprof == "" {
				return errors.New("the upstream edge serves no pprof: cannot tell when the calls reached it")
			}
			arrived := func(ctx context.Context) error {
				deadline := time.Now().Add(30 * time.Second)
				for {
					n, err := gatedGoroutines(upPprof)
					if err == nil && n >= int64(calls) {
						return nil
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("%d of %d calls reached the upstream's gate in 30 s (%v)", n, calls, err)
					}
					if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
						return err
					}
				}
			}
			req, off := load.JSONRPC{}.Call("edge/gate", []byte(`{"name":"`+upstreamGate+`"}`))
			res, err := load.RunHold(ctx, load.HoldConfig{Target: pc.target, Conns: conns, PerConn: perConn,
				Request: req, IDOff: off, Settle: m.p1HoldSettle, Idle: idle, Arrived: arrived, Held: held, Release: release})
			out.HoldResult = res
			r := pc.rec
			r.Conns = res.Conns
			if out.RSSHeldKiB > 0 && res.Held > 0 {
				out.RSSPerCallBytes = float64(out.RSSHeldKiB-out.RSSBeforeKiB) * 1024 / float64(res.Held)
				r.RSSBaseKiB, r.RSSKiB = out.RSSBeforeKiB, out.RSSHeldKiB
			}
			if out.HeapBefore >= 0 && out.HeapHeld >= 0 && res.Held > 0 {
				out.HeapPerCallBytes = float64(out.HeapHeld-out.HeapBefore) / float64(res.Held)
			}
			r.Extra = out
			if err == nil && rerr != nil {
				err = fmt.Errorf("proxy RSS: %w", rerr)
			}
			if err == nil && out.RSSHeldKiB == 0 {
				err = errors.New("the calls were never all held: nothing measured")
			}
			return err
		}}
}

// heapStatsOr is heapStats's live heap, -1 on failure.
func heapStatsOr(addr string) (int64, int64, error) {
	h, s, err := heapStats(addr)
	if err != nil {
		return -1, -1, err
	}
	return h, s, nil
}

// gateFrame is the memory backend's edge/gate in a goroutine's stack.
const gateFrame = "backend.(*Memory).gate"

// gatedGoroutines counts the goroutines of an edge serving pprof at addr
// that wait in edge/gate (the goroutine profile, debug=1: one block per
// distinct stack, headed by its count).
func gatedGoroutines(addr string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/debug/pprof/goroutine?debug=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return countGated(bufio.NewScanner(resp.Body))
}

// countGated sums the counts of the goroutine profile's blocks whose stack
// has gateFrame.
func countGated(sc *bufio.Scanner) (int64, error) {
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var total, block int64
	counted := false
	for sc.Scan() {
		line := sc.Text()
		if n, rest, ok := strings.Cut(line, " @ "); ok && rest != "" {
			if v, err := strconv.ParseInt(n, 10, 64); err == nil {
				block, counted = v, false
				continue
			}
		}
		if !counted && strings.Contains(line, gateFrame) {
			total += block
			counted = true
		}
	}
	return total, sc.Err()
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// goroutines is the number of goroutines of a Go server serving pprof at
// addr (-1 when unknown).
func goroutines(addr string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/debug/pprof/goroutine?debug=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "goroutine profile: total "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// whole is a number without the k/M shortening (bytes compared with 1 KiB).
func whole(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// isHold reports whether a P1 variant is the in-flight phase.
func isHold(variant string) bool { return strings.HasPrefix(variant, "hold-") }

// pipelined reports whether a P1 record had more than one request in
// flight per connection.
func pipelined(x *Record) bool {
	switch w := x.Params["window"].(type) {
	case int:
		return w > 1
	case float64: // read back from results.jsonl
		return w > 1
	}
	return false
}

func usPerOp(u *Usage) float64 {
	if u == nil || u.UsPerOp == 0 {
		return math.NaN()
	}
	return u.UsPerOp
}

func utilOf(u *Usage) string {
	if u == nil {
		return "-"
	}
	sys := 0.0
	if t := u.UserS + u.SysS; t > 0 {
		sys = 100 * u.SysS / t
	}
	return fmt.Sprintf("%.0f%% (%.0f%% sys)", 100*u.Util, sys)
}

func perOp(s *Syscalls) float64 {
	if s == nil || s.PerOp == 0 {
		return math.NaN()
	}
	return s.PerOp
}

// proxyCPU and upstreamCPU are P1's CPU microseconds per request; total is
// their sum (the upstream alone for direct).
func proxyCPU(x *Record) float64 {
	if x == nil || !x.OK {
		return math.NaN()
	}
	return usPerOp(x.Server)
}

// cpuSplit divides x's proxy CPU per request into its user and kernel
// shares, in proportion to the process's user and system time over the
// window (NaN when unmeasured).
func cpuSplit(x *Record) (user, kernel float64) {
	c := proxyCPU(x)
	if math.IsNaN(c) || x.Server == nil || x.Server.UserS+x.Server.SysS <= 0 {
		return math.NaN(), math.NaN()
	}
	u := c * x.Server.UserS / (x.Server.UserS + x.Server.SysS)
	return u, c - u
}

func upstreamCPU(x *Record) float64 {
	if x == nil || !x.OK {
		return math.NaN()
	}
	return usPerOp(x.Upstream)
}

func totalCPU(x *Record) float64 {
	u := upstreamCPU(x)
	if x != nil && x.Peer == "direct" {
		return u
	}
	return proxyCPU(x) + u
}

func skipCell(x *Record) string {
	if x != nil && x.Skipped {
		return "skipped: " + strings.ReplaceAll(firstLine(x.Error), "|", "/")
	}
	return failCell(x)
}

func yesNo(ok bool) string {
	if ok {
		return "**yes**"
	}
	return "**no**"
}

// p1Section writes P1's throughput table, the targets of issue 11, and the
// in-flight memory table.
func p1Section(r *report, b *strings.Builder) []panel {
	variants, proxies := r.axes("P1")
	var tputVariants, holds []string
	for _, v := range variants {
		if isHold(v) {
			holds = append(holds, v)
		} else {
			tputVariants = append(tputVariants, v)
		}
	}
	b.WriteString("Clients -> X -> an upstream edge (memory backend). *direct*: the clients talk to the upstream's WebSocket " +
		"listener; *edge*: an edge proxy (`--upstream up=tcp://...`, NDJSON to the upstream's `--ndjson-listen`, 2 " +
		"connections); *nginx*: nginx as a WebSocket reverse proxy (one worker) to the upstream's WebSocket listener. " +
		"The proxy and the upstream are fresh processes per row, **both on the server CPU** (GOMAXPROCS=1, edge with " +
		"--loops 1) and the generator on the other, the same placement for every X, so they share one core: the proxied " +
		"throughput is what one core does for proxy + upstream. Closed loop as W1. *Proxy CPU us/req* is the proxy " +
		"process's CPU (nginx: master + worker) over the window per request, *upstream CPU us/req* the upstream's; " +
		"*syscalls/req* are the proxy's and the upstream's.\n\n")
	t := table{head: []string{"variant", "X", "req/s", "vs direct", "proxy CPU us/req", "upstream CPU us/req", "total CPU us/req",
		"proxy util", "upstream util", "proxy syscalls/req", "upstream syscalls/req", "generator util", "p50 us", "p99 us", "p99.9 us"}}
	for _, v := range tputVariants {
		d := r.get("P1", v, "direct")
		for _, p := range proxies {
			x := r.get("P1", v, p)
			if x == nil {
				continue
			}
			if !x.OK {
				t.add(v, p, skipCell(x), "", "", "", "", "", "", "", "", "", "", "", "")
				continue
			}
			pu, psys := "-", math.NaN()
			if p != "direct" {
				pu, psys = utilOf(x.Server), perOp(x.Syscalls)
			}
			t.add(v, p, num(tput(x)), ratio(tput(x), tput(d)), num(proxyCPU(x)), num(upstreamCPU(x)), num(totalCPU(x)),
				pu, utilOf(x.Upstream), num(psys), num(perOp(x.UpstreamSyscalls)), genUtil(x),
				num(lat(x, "p50")), num(lat(x, "p99")), num(lat(x, "p999")))
		}
	}
	if len(tputVariants) > 0 {
		b.WriteString(t.String() + "\n")
	}

	// The targets of issue 11.
	g := table{head: []string{"target", "variant", "measured", "goal", "met"}}
	for _, v := range tputVariants {
		e, n := r.get("P1", v, "edge"), r.get("P1", v, "nginx")
		if ev, nv := proxyCPU(e), proxyCPU(n); !math.IsNaN(ev) && !math.IsNaN(nv) && nv > 0 {
			g.add("edge proxy CPU per proxied request / nginx CPU per proxied message", v,
				fmt.Sprintf("%s / %s us = x%.2f", num(ev), num(nv), ev/nv), "<= x1.00", yesNo(ev <= nv))
		} else if !math.IsNaN(ev) {
			g.add("edge proxy CPU per proxied request / nginx CPU per proxied message", v, num(ev)+" us / nginx not measured", "<= x1.00", "-")
		}
		// Where each proxy's CPU goes: nginx relays an upgraded connection's
		// bytes without reading them, so its user share is small; the rest
		// of either is the kernel moving the same bytes.
		for _, p := range []string{"edge", "nginx"} {
			if u, k := cpuSplit(r.get("P1", v, p)); !math.IsNaN(u) {
				g.add("(split) "+p+" proxy CPU per request, user + kernel", v,
					fmt.Sprintf("%s + %s us", num(u), num(k)), "-", "(reference)")
			}
		}
	}
	for _, v := range tputVariants {
		d := r.get("P1", v, "direct")
		for _, p := range []string{"edge", "nginx"} {
			x := r.get("P1", v, p)
			if x == nil || !x.OK || !pipelined(x) {
				continue
			}
			if dv, xv := tput(d), tput(x); !math.IsNaN(dv) && dv > 0 {
				met := yesNo(xv >= dv/2)
				if p != "edge" {
					met = "(reference)"
				}
				g.add("proxied pipelined throughput / direct ("+p+")", v,
					fmt.Sprintf("%s / %s req/s = %.0f%%", num(xv), num(dv), 100*xv/dv), ">= 50%", met)
				// What the proxy would carry on a core of its own, from its
				// CPU per request: a derived figure, not a measurement.
				if pu := proxyCPU(x); !math.IsNaN(pu) && pu > 0 {
					g.add("(derived) the proxy alone on a core, 1e6 / proxy CPU us/req, / direct ("+p+")", v,
						fmt.Sprintf("%s / %s req/s = %.0f%%", num(1e6/pu), num(dv), 100*1e6/pu/dv), "-", "(reference)")
				}
			}
		}
	}
	for _, v := range holds {
		x := r.get("P1", v, "edge")
		if x == nil || !x.OK {
			continue
		}
		per := extra(x, "rss_per_call_bytes")
		g.add("memory per in-flight proxied call (edge proxy RSS)", v, whole(per)+" B", "< 1024 B", yesNo(per < 1024))
	}
	if len(g.rows) > 0 {
		b.WriteString("Targets (issue 11):\n\n" + g.String() + "\n")
	}

	if len(holds) > 0 {
		h := table{head: []string{"variant", "calls held", "connections", "proxy RSS before MiB", "proxy RSS held MiB",
			"RSS per call B", "live heap per call B", "proxy goroutines before / held", "upstream RSS held MiB",
			"answered", "released by the gate", "drain s", "left in flight after"}}
		for _, v := range holds {
			x := r.get("P1", v, "edge")
			if x == nil || !x.OK {
				h.add(v, skipCell(x), "", "", "", "", "", "", "", "", "", "", "")
				continue
			}
			gor := fmt.Sprintf("%s / %s", num(extra(x, "goroutines_before")), num(extra(x, "goroutines_held")))
			h.add(v, whole(extra(x, "held")), num(extra(x, "conns")), num(extra(x, "rss_before_kib")/1024),
				num(extra(x, "rss_held_kib")/1024), whole(extra(x, "rss_per_call_bytes")), whole(extra(x, "heap_per_call_bytes")),
				gor, num(extra(x, "upstream_rss_held_kib")/1024), whole(extra(x, "answered")), whole(extra(x, "released")),
				num(extra(x, "drain_seconds")), num(extra(x, "leaked")))
		}
		b.WriteString("In-flight memory: N connections to the edge proxy each send M `edge/gate` calls, which the upstream " +
			"holds. The proxy's VmRSS is read with the connections open and idle, then with every call in flight " +
			"(edge/stats on every connection counts them, then a settle); *RSS per call* is the difference over the " +
			"calls. *Live heap per call*: the same with the live heap after a forced GC (pprof). Then `edge/open` on " +
			"the upstream releases them: every call must come back answered once, and edge/stats must show nothing " +
			"left in flight.\n\n")
		b.WriteString(h.String())
	}

	var tv, pc, uc [][]float64
	for _, v := range tputVariants {
		var a, c, u []float64
		for _, p := range proxies {
			x := r.get("P1", v, p)
			a, c, u = append(a, tput(x)), append(c, proxyCPU(x)), append(u, upstreamCPU(x))
		}
		tv, pc, uc = append(tv, a), append(pc, c), append(uc, u)
	}
	if len(tputVariants) == 0 {
		return nil
	}
	return []panel{{title: "throughput through X", unit: "req/s", groups: tputVariants, series: proxies, vals: tv},
		{title: "proxy CPU per request (lower is better)", unit: "us/req", groups: tputVariants, series: proxies, vals: pc},
		{title: "upstream CPU per request (lower is better)", unit: "us/req", groups: tputVariants, series: proxies, vals: uc}}
}
