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
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			if serr := procs[i].stop(10 * time.Second); serr != nil {
				rec.Notes = append(rec.Notes, "stop: "+serr.Error())
			}
		}
	}()
	exited := func() error {
		for _, s := range procs {
			if s.exited() {
				return fmt.Errorf("%s exited during the run: %v", s.peer, s.waitErr)
			}
		}
		return nil
	}
	var extra []string
	if n := clusterWorkers(p.peer); n > 0 {
		if co.natsdBin == "" {
			rec.Error = fmt.Sprintf("natsd not built: %v", co.natsdErr)
			return
		}
		cmd := exec.Command(co.natsdBin, "--listen", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		ns, err := launch(pctx, "natsd", cmd, logPath("-nats"), pin, nil, listeningLine)
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
	err = p.run(pctx, pc)
	rec.Syscalls = pc.samp.finish(rec, "")
	if err == nil {
		err = exited()
	}
	if err != nil {
		rec.Error = err.Error()
		return
	}
	rec.OK = true
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

	var tv, tc [][]float64
	for _, v := range variants {
		var a, c []float64
		for _, x := range xs {
			rec := r.get("C1", v, x)
			a, c = append(a, tput(rec)), append(c, clusterCPU(rec))
		}
		tv, tc = append(tv, a), append(tc, c)
	}
	return []panel{{title: "throughput", unit: "req/s", groups: variants, series: xs, vals: tv},
		{title: "total server CPU per request (lower is better)", unit: "us/req", groups: variants, series: xs, vals: tc}}
}
