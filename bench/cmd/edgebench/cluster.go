package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/openengine/edge/bench/load"
)

// C1 ("cluster") puts NATS between edge and its backend (CONTRACT.md section
// 13) and measures it beside edge alone in one run:
//
//   - direct:  clients -> edge (memory backend), as W1;
//   - nats-1w: clients -> edge --upstream work=nats://<natsd>/bench -> natsd
//     -> one `edge worker --nats ... --prefix bench` (memory backend);
//   - nats-2w: the same with two workers (one queue group).
//
// Every server-side process (edge, natsd, the workers) is a fresh process
// per measurement on the server CPU with GOMAXPROCS=1 (edge with --loops 1),
// as P1: the cluster's throughput is what one core does for all of them, and
// each one's CPU per request is measured separately.

// clusterNames are C1's X, in run order.
var clusterNames = []string{"direct", "nats-1w", "nats-2w"}

// clusterPrefix is the workers' subject prefix and queue group.
const clusterPrefix = "bench"

// clusterWorkers is the number of workers of X (0 for direct).
func clusterWorkers(x string) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(x, "nats-"), "w"))
	return n
}

// clusterOpts are what runCluster needs beyond phaseOpts.
type clusterOpts struct {
	edgeBin   string
	natsdBin  string // "" when it did not build
	natsdErr  error
	edgePprof bool // -pprof: a CPU profile of edge over the window
}

// runCluster runs one C1 phase: natsd, the workers and edge (for nats-*),
// or edge alone (direct); it waits until a call goes through, runs the
// phase with each process measured, and stops them by pid.
func runCluster(ctx context.Context, p phase, co clusterOpts, pin pinning, out string, opts phaseOpts, rec *Record, logf func(string, ...any)) {
	pctx, cancel := context.WithTimeout(ctx, 2*p.budget+30*time.Second)
	defer cancel()
	base := fmt.Sprintf("%s-%s-%s", p.workload, safeName(p.variant), p.peer)
	logPath := func(suffix string) string { return filepath.Join(out, "logs", base+suffix+".log") }
	pc := &phaseCtx{rec: rec, logf: logf}
	var procs []*server // stopped in reverse order: edge, workers, natsd
	defer stopAll(&procs, rec)
	var extra []string
	if n := clusterWorkers(p.peer); n > 0 {
		ns, err := startNatsd(pctx, co, logPath("-nats"), pin)
		if err != nil {
			rec.Error = err.Error()
			return
		}
		procs = append(procs, ns)
		pc.nats = ns
		for i := range n {
			id := fmt.Sprintf("w%d", i+1)
			cmd := exec.Command(co.edgeBin, "worker", "--nats", "nats://"+ns.addr, "--prefix", clusterPrefix, "--id", id)
			cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
			w, err := launch(pctx, "worker "+id, cmd, logPath("-"+id), pin, nil, func(line string) string {
				if strings.Contains(line, `msg="worker serving"`) {
					return "serving"
				}
				return ""
			})
			if err != nil {
				rec.Error = err.Error()
				return
			}
			procs = append(procs, w)
			pc.workers = append(pc.workers, w)
		}
		extra = []string{"--upstream", "work=nats://" + ns.addr + "/" + clusterPrefix}
	}
	edge, err := startServer(pctx, serverSpec{peer: "edge", bin: co.edgeBin, logPath: logPath(""), pin: pin,
		pprof: co.edgePprof, extra: append(extra, opts.edgeArgs...)})
	if err != nil {
		rec.Error = err.Error()
		return
	}
	procs = append(procs, edge)
	rec.ServerCPUs = edge.cpus
	pc.srv = edge
	pc.target = load.Target{Addr: edge.addr, Dialect: load.JSONRPC{}}
	if err := waitReady(pctx, pc.target, 10*time.Second); err != nil {
		rec.Error = fmt.Sprintf("no call went through %s in 10 s: %v", p.peer, err)
		return
	}

	pc.samp = &sampler{pids: []int{edge.pid}}
	pprofAddr := ""
	if co.edgePprof {
		pprofAddr = edge.pprof()
	}
	pc.samp.instrument(out, base, p.window, pprofAddr, opts.perf, opts.statEvents, rec, "")
	if pc.nats != nil {
		pc.natsSamp = &sampler{pids: []int{pc.nats.pid}}
		for _, w := range pc.workers {
			pc.workerSamps = append(pc.workerSamps, &sampler{pids: []int{w.pid}})
		}
	}
	runMeasured(pctx, p, pc, procs)
}

// runMeasured runs the phase against the started procs and fills the
// record: OK, or the error (the run's, or a process that exited).
func runMeasured(ctx context.Context, p phase, pc *phaseCtx, procs []*server) {
	err := p.run(ctx, pc)
	pc.rec.Syscalls = pc.samp.finish(pc.rec, "")
	if err == nil {
		err = exitedAny(procs)
	}
	if err != nil {
		pc.rec.Error = err.Error()
		return
	}
	pc.rec.OK = true
}

// startNatsd starts C1's and C2's NATS server on a free loopback port,
// pinned as the other servers (GOMAXPROCS=1).
func startNatsd(ctx context.Context, co clusterOpts, logPath string, pin pinning) (*server, error) {
	if co.natsdBin == "" {
		return nil, fmt.Errorf("natsd not built: %v", co.natsdErr)
	}
	cmd := exec.Command(co.natsdBin, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	return launch(ctx, "natsd", cmd, logPath, pin, nil, listeningLine)
}

// stopAll stops the processes of a phase by pid, the last started first,
// noting problems in rec.
func stopAll(procs *[]*server, rec *Record) {
	for i := len(*procs) - 1; i >= 0; i-- {
		if serr := (*procs)[i].stop(10 * time.Second); serr != nil {
			rec.Notes = append(rec.Notes, "stop: "+serr.Error())
		}
	}
}

// exitedAny says which of procs exited during the run, if any.
func exitedAny(procs []*server) error {
	for _, s := range procs {
		if s.exited() {
			return fmt.Errorf("%s exited during the run: %v", s.peer, s.waitErr)
		}
	}
	return nil
}

// clusterHooks sample edge, natsd and every worker at the window's edges.
func (pc *phaseCtx) clusterHooks() load.Hooks {
	samps := append([]*sampler{pc.samp}, pc.workerSamps...)
	if pc.natsSamp != nil {
		samps = append(samps, pc.natsSamp)
	}
	return load.Hooks{
		OnStart: func() {
			for _, s := range samps {
				s.start()
			}
		},
		OnEnd: func() {
			for _, s := range samps {
				s.end()
			}
		},
	}
}

// clusterResult is C1's extra: the load generator's result and each
// worker's CPU.
type clusterResult struct {
	load.Result
	Workers []*Usage `json:"workers,omitempty"` // each worker's CPU over the window
}

// fillCluster copies a closed-loop result into the record: edge's use is
// Server, natsd's NATS, the workers' (summed) Workers.
func (pc *phaseCtx) fillCluster(res load.Result) {
	pc.fill(res, "req/s")
	r := pc.rec
	cr := clusterResult{Result: res}
	if pc.natsSamp != nil {
		r.NATS, _ = pc.natsSamp.usage(res.Requests)
		sum := &Usage{}
		for _, s := range pc.workerSamps {
			u, _ := s.usage(res.Requests)
			if u == nil {
				sum = nil
				break
			}
			cr.Workers = append(cr.Workers, u)
			sum.UserS, sum.SysS, sum.Util, sum.UsPerOp = sum.UserS+u.UserS, sum.SysS+u.SysS, sum.Util+u.Util, sum.UsPerOp+u.UsPerOp
			if u.UsPerOp == 0 {
				r.Notes = append(r.Notes, "a worker took no calls in the window")
			}
		}
		r.Workers = sum
	}
	r.Extra = cr
}

// c1Phase is one C1 phase: echo in a closed loop through X, as W1 runs it.
func (m matrix) c1Phase(v w1Variant, x string) phase {
	return phase{workload: "C1", variant: v.name(), peer: x, cluster: true, window: m.measure,
		params: map[string]any{"conns": v.conns, "window": v.window, "params_bytes": v.size, "workers": clusterWorkers(x)},
		budget: m.warmup + m.measure + 2*time.Second, // the processes start in about a second
		run: func(ctx context.Context, pc *phaseCtx) error {
			res, err := closedEcho(ctx, pc, v, m, pc.clusterHooks())
			pc.fillCluster(res)
			pc.spinIdle(res)
			if err == nil && res.Errors > 0 {
				err = fmt.Errorf("%d error replies through %s", res.Errors, pc.rec.Peer)
			}
			return err
		}}
}

// closedEcho runs W1's closed loop of echo requests of variant v against
// pc.target, sampled by hooks.
func closedEcho(ctx context.Context, pc *phaseCtx, v w1Variant, m matrix, hooks load.Hooks) (load.Result, error) {
	req, off := pc.target.Dialect.Echo(load.Params(v.size))
	// Spin, as W1: a parked generator wakes late on this VM.
	return load.RunClosed(ctx, load.ClosedConfig{Target: pc.target, Conns: v.conns, Window: v.window,
		Request: req, IDOff: off, Warmup: m.warmup, Measure: m.measure, Hooks: hooks, Spin: true})
}

// C1's CPU microseconds per request: edge's, natsd's, the workers' and
// their sum.
func edgeCPU(x *Record) float64 {
	if x == nil || !x.OK {
		return math.NaN()
	}
	return usPerOp(x.Server)
}

func natsCPU(x *Record) float64 {
	if x == nil || !x.OK || x.Peer == "direct" {
		return math.NaN()
	}
	return usPerOp(x.NATS)
}

func workersCPU(x *Record) float64 {
	if x == nil || !x.OK || x.Peer == "direct" {
		return math.NaN()
	}
	return usPerOp(x.Workers)
}

func clusterCPU(x *Record) float64 {
	if x != nil && x.Peer == "direct" {
		return edgeCPU(x)
	}
	return edgeCPU(x) + natsCPU(x) + workersCPU(x)
}

// c1Section writes C1's table and the cost of the NATS hop.
func c1Section(r *report, b *strings.Builder) []panel {
	variants, xs := r.axes("C1")
	b.WriteString("Clients -> edge -> X. *direct*: edge alone on its memory backend (as W1); *nats-Nw*: edge with " +
		"`--upstream work=nats://<natsd>/" + clusterPrefix + "`, a NATS server (`natsd`, the nats-server module) and N " +
		"`edge worker`s (memory backend, one queue group). Every server-side process is fresh per row and **on the " +
		"server CPU** (GOMAXPROCS=1, edge with --loops 1), the generator on the other, as P1: the throughput is what " +
		"one core does for all of them. *CPU us/req* is each process's CPU over the window per request (workers " +
		"summed), *total* their sum; *syscalls/req* are edge's. Closed loop as W1.\n\n")
	t := table{head: []string{"variant", "X", "req/s", "vs direct", "edge CPU us/req", "NATS CPU us/req", "workers CPU us/req",
		"total CPU us/req", "total vs direct", "edge util", "NATS util", "workers util", "edge syscalls/req", "generator util",
		"p50 us", "p99 us", "p99.9 us"}}
	for _, v := range variants {
		d := r.get("C1", v, "direct")
		for _, x := range xs {
			c := r.get("C1", v, x)
			if c == nil {
				continue
			}
			if !c.OK {
				t.add(v, x, skipCell(c), "", "", "", "", "", "", "", "", "", "", "", "", "", "")
				continue
			}
			nu, wu := "-", "-"
			if x != "direct" {
				nu, wu = utilOf(c.NATS), utilOf(c.Workers)
			}
			t.add(v, x, num(tput(c)), ratio(tput(c), tput(d)), num(edgeCPU(c)), num(natsCPU(c)), num(workersCPU(c)),
				num(clusterCPU(c)), ratio(clusterCPU(c), clusterCPU(d)), utilOf(c.Server), nu, wu, num(perOp(c.Syscalls)),
				genUtil(c), num(lat(c, "p50")), num(lat(c, "p99")), num(lat(c, "p999")))
		}
	}
	b.WriteString(t.String() + "\n")

	// The NATS hop: what each request costs more than direct.
	h := table{head: []string{"variant", "X", "added CPU us/req (total - direct)", "of which edge", "NATS", "workers",
		"added p50 us", "added p99 us"}}
	for _, v := range variants {
		d := r.get("C1", v, "direct")
		if d == nil || !d.OK {
			continue
		}
		for _, x := range xs {
			c := r.get("C1", v, x)
			if x == "direct" || c == nil || !c.OK {
				continue
			}
			h.add(v, x, num(clusterCPU(c)-clusterCPU(d)), num(edgeCPU(c)-edgeCPU(d)), num(natsCPU(c)),
				num(workersCPU(c)-edgeCPU(d)), num(lat(c, "p50")-lat(d, "p50")), num(lat(c, "p99")-lat(d, "p99")))
		}
	}
	if len(h.rows) > 0 {
		b.WriteString("The NATS hop per request, against direct in the same run. *Workers* is the workers' CPU minus " +
			"direct edge's (the backend work moved to the workers, with their NATS client); *edge* is what edge spends " +
			"more forwarding over NATS than serving from memory. Latency differences are of one-core figures: with " +
			"every process on one core, a request waits for the others' turns.\n\n" + h.String() + "\n")
	}

	return tputCPUPanels(r, "C1", variants, xs, clusterCPU, "throughput", "req/s",
		"total server CPU per request (lower is better)", "us/req")
}

// tputCPUPanels are a chart's two panels: the throughput of every variant x
// X of workload w, and their total CPU per operation by cpu.
func tputCPUPanels(r *report, w string, variants, xs []string, cpu func(*Record) float64, tTitle, tUnit, cTitle, cUnit string) []panel {
	var tv, tc [][]float64
	for _, v := range variants {
		var a, c []float64
		for _, x := range xs {
			rec := r.get(w, v, x)
			a, c = append(a, tput(rec)), append(c, cpu(rec))
		}
		tv, tc = append(tv, a), append(tc, c)
	}
	return []panel{{title: tTitle, unit: tUnit, groups: variants, series: xs, vals: tv},
		{title: cTitle, unit: cUnit, groups: variants, series: xs, vals: tc}}
}

// C2 ("cluster fan-out"): one topic's subscribers spread over edges, one
// publisher on the first, against one edge holding them all in the same
// run:
//
//   - 1-edge:  every subscriber and the publisher on one edge (as W4);
//   - 2-edges: edges A and B, both `--nats nats://<natsd> --nats-prefix
//     bench` (CONTRACT.md section 13), half the subscribers on each, the
//     publisher on A: every event goes to NATS and back to A and to B.
//
// Placement as C1: every server-side process on the server CPU.

// fanoutNames are C2's X, in run order.
var fanoutNames = []string{"1-edge", "2-edges"}

// runFanout2 runs one C2 phase: natsd and two edges for 2-edges, one edge
// for 1-edge; measures each process over the window and stops them by pid.
func runFanout2(ctx context.Context, p phase, co clusterOpts, pin pinning, out string, opts phaseOpts, rec *Record, logf func(string, ...any)) {
	pctx, cancel := context.WithTimeout(ctx, 2*p.budget+30*time.Second)
	defer cancel()
	base := fmt.Sprintf("%s-%s-%s", p.workload, safeName(p.variant), p.peer)
	logPath := func(suffix string) string { return filepath.Join(out, "logs", base+suffix+".log") }
	pc := &phaseCtx{rec: rec, logf: logf}
	var procs []*server
	defer stopAll(&procs, rec)
	var natsArgs []string
	if p.peer == "2-edges" {
		ns, err := startNatsd(pctx, co, logPath("-nats"), pin)
		if err != nil {
			rec.Error = err.Error()
			return
		}
		procs = append(procs, ns)
		pc.nats = ns
		natsArgs = []string{"--nats", "nats://" + ns.addr, "--nats-prefix", clusterPrefix}
	}
	edges := 1
	if p.peer == "2-edges" {
		edges = 2
	}
	var targets []load.Target
	for i := range edges {
		suffix := ""
		if i > 0 {
			suffix = "-b"
		}
		e, err := startServer(pctx, serverSpec{peer: "edge", bin: co.edgeBin, logPath: logPath(suffix), pin: pin,
			extra: append(append([]string{}, natsArgs...), opts.edgeArgs...)})
		if err != nil {
			rec.Error = err.Error()
			return
		}
		procs = append(procs, e)
		t := load.Target{Addr: e.addr, Dialect: load.JSONRPC{}}
		if err := waitReady(pctx, t, 10*time.Second); err != nil {
			rec.Error = fmt.Sprintf("edge %d does not answer: %v", i+1, err)
			return
		}
		targets = append(targets, t)
		if i == 0 {
			pc.srv, pc.target = e, t
			rec.ServerCPUs = e.cpus
			pc.samp = &sampler{pids: []int{e.pid}}
			pc.samp.instrument(out, base, p.window, "", opts.perf, opts.statEvents, rec, "")
		} else {
			pc.workers = append(pc.workers, e) // edge B: measured like a worker
			pc.workerSamps = append(pc.workerSamps, &sampler{pids: []int{e.pid}})
		}
	}
	if pc.nats != nil {
		pc.natsSamp = &sampler{pids: []int{pc.nats.pid}}
	}
	pc.subTargets = targets
	runMeasured(pctx, p, pc, procs)
}

// c2Phase is one C2 phase: subs subscribers of one topic spread over the
// edges of X, one publisher on the first at offered/subs publishes per
// second.
func (m matrix) c2Phase(subs int, offered float64, x string) phase {
	rate := min(offered/float64(subs), m.w4MaxRate)
	return phase{workload: "C2", variant: fmt.Sprintf("%d subs %s", subs, rateName(rate*float64(subs))), peer: x, cluster: true,
		window: m.measure,
		params: map[string]any{"subscribers": subs, "publish_rate": rate, "event_bytes": m.w4EventSize,
			"offered_deliveries": rate * float64(subs)},
		budget: m.warmup + m.measure + time.Duration(subs)*200*time.Microsecond + 2*time.Second,
		run: func(ctx context.Context, pc *phaseCtx) error {
			res, err := load.RunFanout(ctx, load.FanoutConfig{Target: pc.target, SubTargets: pc.subTargets, Subscribers: subs,
				Topic: "bench", Rate: rate, EventSize: m.w4EventSize, Warmup: m.warmup, Measure: m.measure, Hooks: pc.clusterHooks()})
			pc.fillCluster(res)
			pc.rec.Unit = "deliveries/s"
			pc.rec.SendLag = res.SendLag
			if res.Lost > 0 {
				exp := float64(res.Published) * float64(res.Subscribers)
				pc.rec.Notes = append(pc.rec.Notes, fmt.Sprintf("%d publishes in the window; %d of their %.0f deliveries (%.1f%%) never arrived",
					res.Published, res.Lost, exp, 100*float64(res.Lost)/exp))
			}
			return err
		}}
}

// c2Section writes C2's table: deliveries and CPU per delivered event.
func c2Section(r *report, b *strings.Builder) []panel {
	variants, xs := r.axes("C2")
	b.WriteString("One topic, its subscribers spread over X, one publisher on the first edge (128 B events). *1-edge*: " +
		"every subscriber on one edge, no NATS (as W4); *2-edges*: edges A and B with `--nats nats://<natsd> " +
		"--nats-prefix " + clusterPrefix + "`, half the subscribers on each: every event goes to NATS and comes back to A and to B. Every " +
		"process on the server CPU as C1. *CPU us/delivery* is each process's CPU over the window per delivered event; " +
		"*lost*: deliveries of events published in the window that never arrived.\n\n")
	t := table{head: []string{"variant", "X", "deliveries/s", "vs 1-edge", "edge A CPU us/delivery", "edge B", "NATS",
		"total", "total vs 1-edge", "lost", "p50 us", "p99 us"}}
	for _, v := range variants {
		d := r.get("C2", v, "1-edge")
		for _, x := range xs {
			c := r.get("C2", v, x)
			if c == nil {
				continue
			}
			if !c.OK {
				t.add(v, x, skipCell(c), "", "", "", "", "", "", "", "", "")
				continue
			}
			t.add(v, x, num(tput(c)), ratio(tput(c), tput(d)), num(edgeCPU(c)), num(workersCPU(c)), num(natsCPU(c)),
				num(fanoutCPU(c)), ratio(fanoutCPU(c), fanoutCPU(d)), whole(lostOf(c)), num(lat(c, "p50")), num(lat(c, "p99")))
		}
	}
	b.WriteString(t.String() + "\n")
	return tputCPUPanels(r, "C2", variants, xs, fanoutCPU, "deliveries", "deliveries/s",
		"total server CPU per delivery (lower is better)", "us/delivery")
}

// fanoutCPU is C2's total CPU per delivery: edge A alone for 1-edge.
func fanoutCPU(x *Record) float64 {
	if x != nil && x.Peer == "1-edge" {
		return edgeCPU(x)
	}
	return edgeCPU(x) + workersCPU(x) + natsCPU(x)
}

// lostOf is C2's lost deliveries (0 when none was recorded).
func lostOf(x *Record) float64 {
	if v := extra(x, "lost"); !math.IsNaN(v) {
		return v
	}
	return 0
}
