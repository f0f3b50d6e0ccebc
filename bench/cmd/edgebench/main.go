// Command edgebench is edge's end-to-end benchmark suite. It builds edge and
// the peer servers (bench/peers/<name>), runs each workload against each
// server in turn (a fresh process per measurement, pinned to one CPU with
// GOMAXPROCS=1) with the load generator (bench/load) pinned to the other, and
// writes results.jsonl, report.md and one SVG chart per workload under
// bench/results/<run>/. See bench/README.md.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/openengine/edge/bench/load"
	// A progress bar for a 15-minute run; small, no cgo, and it degrades to
	// nothing when stderr is not a terminal (CI prints one line per phase).
	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "edgebench:", err)
		os.Exit(1)
	}
}

type options struct {
	quick     bool
	workloads []string
	peers     []string
	proxies   []string // P1's proxies (nil: all)
	nginx     string   // P1: the nginx binary ("": look for it)
	variants  []string // substrings: run only the phases whose variant contains one
	run       string
	out       string
	root      string
	edgeSrc   string // build edge from this checkout ("": root)
	baseSrc   string // build edge-base, edge's baseline, from this checkout ("": none)
	goBin     string
	pin       bool
	timeout   time.Duration
	strict    bool
	warmup    time.Duration
	measure   time.Duration
	report    string
	perf      []string
	pprof     bool
	nice      int
	w2Rates   string
	w3Conns   string
	w4Subs    string
	w4Offered string
	perfStat  bool
	edgeArgs  []string // extra flags for every edge server
	cpuprof   string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("edgebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.quick, "quick", false, "every workload briefly with small counts (CI smoke run)")
	wl := fs.String("workloads", "all", "comma-separated workloads: "+strings.Join(allWorkloads, ","))
	pl := fs.String("peers", "all", "comma-separated servers: "+strings.Join(peerNames, ","))
	xl := fs.String("proxies", "all", "P1: comma-separated proxies in front of the upstream edge: "+strings.Join(proxyNames, ","))
	fs.StringVar(&o.nginx, "nginx", "", "P1: the nginx binary (default: nginx on PATH, or /usr/sbin/nginx; missing: P1 skips nginx)")
	vl := fs.String("variants", "", "comma-separated substrings: run only the phases whose variant name contains one (e.g. c4w64-16B; default all)")
	fs.StringVar(&o.run, "run", "", "run name (default: quick-<time> or <time>); results go to <out>")
	fs.StringVar(&o.out, "out", "", "output directory (default: bench/results/<run>)")
	fs.StringVar(&o.root, "root", "", "edge repository root (default: found from the working directory)")
	fs.StringVar(&o.edgeSrc, "edge-src", "", "build edge from this edge checkout instead of -root (e.g. a branch's worktree; the peers, the harness and the results stay -root's)")
	fs.StringVar(&o.baseSrc, "base-src", "", "also run edge built from this checkout (e.g. main's) as the server "+baseEdge+", right after edge in every phase of W1, W3, W4, W6 and W7, and as P1's proxy right after edge's: before and after in one run")
	fs.StringVar(&o.goBin, "go", envOr("GO", "go"), "go command used to build the servers")
	fs.BoolVar(&o.pin, "pin", true, "pin servers to one CPU and the generator to another (sched_setaffinity)")
	fs.DurationVar(&o.timeout, "timeout", 0, "stop the whole run after this long (default 30m, 5m with -quick)")
	fs.BoolVar(&o.strict, "strict", false, "exit non-zero when any phase fails or edge leaks state, peers included")
	fs.DurationVar(&o.warmup, "warmup", 0, "override the warm-up of every measured window")
	fs.DurationVar(&o.measure, "measure", 0, "override the length of every measured window")
	fs.StringVar(&o.report, "report", "", "only regenerate report.md and charts from this results.jsonl")
	fs.StringVar(&o.w2Rates, "w2-rates", "", "W2 total request rates, comma-separated (default 10000,30000,60000)")
	fs.StringVar(&o.w3Conns, "w3-conns", "", "W3 connection counts, comma-separated (default 1000,10000 and the most the open-file limit allows, up to 50000)")
	fs.StringVar(&o.w4Subs, "w4-subs", "", "W4 subscriber counts, comma-separated (default 1000,10000)")
	fs.StringVar(&o.w4Offered, "w4-deliveries", "", "W4 offered deliveries per second, comma-separated, each run for every subscriber count (default 100000,2000000; publish rate = this / subscribers)")
	fs.BoolVar(&o.perfStat, "perfstat", true, "count the servers' system calls over each measured window with `perf stat` (when perf works here)")
	edgeArgs := fs.String("edge-args", "", "extra flags for edge, space-separated (e.g. \"--busy-poll 50us\"); recorded in every edge result")
	fs.BoolVar(&o.pprof, "pprof", false, "fetch a Go CPU profile of edge over each measured window (logs/*.pprof), and in W3 its heap profile after the ramp (logs/W3-*.heap.pprof; edge's --admin-listen --admin-pprof)")
	fs.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of the harness itself (the load generator) to this file")
	fs.IntVar(&o.nice, "nice", 0, "nice value for the generator and the servers (e.g. -10 on a machine shared with other work; needs root)")
	perf := fs.String("perf", "", "comma-separated servers to profile with `perf record` over each measured window (logs/*.perf.data and .txt); P1 also takes nginx and upstream")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.workloads, err = parseList(*wl, allWorkloads); err != nil {
		return nil, fmt.Errorf("-workloads: %w", err)
	}
	if o.peers, err = parseList(*pl, peerNames); err != nil {
		return nil, fmt.Errorf("-peers: %w", err)
	}
	if o.baseSrc != "" {
		i := slices.Index(o.peers, "edge")
		if i < 0 {
			return nil, errors.New("-base-src: edge is not among the -peers")
		}
		o.peers = slices.Insert(o.peers, i+1, baseEdge)
	}
	if *xl != "all" {
		if o.proxies, err = parseList(*xl, proxyNames); err != nil {
			return nil, fmt.Errorf("-proxies: %w", err)
		}
	}
	o.variants = splitList(*vl)
	o.edgeArgs = strings.Fields(*edgeArgs)
	if *perf != "" {
		if o.perf, err = parseList(*perf, append(slices.Clone(peerNames), "nginx", "upstream")); err != nil {
			return nil, fmt.Errorf("-perf: %w", err)
		}
		if _, err := exec.LookPath("perf"); err != nil {
			return nil, fmt.Errorf("-perf: %w (apt-get install linux-perf)", err)
		}
	}
	if o.timeout == 0 {
		o.timeout = 30 * time.Minute
		if o.quick {
			o.timeout = 5 * time.Minute
		}
	}
	return o, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// findRoot walks up from dir to the edge module's go.mod.
func findRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			if strings.HasPrefix(string(b), "module github.com/openengine/edge\n") {
				return d, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", errors.New("cannot find the edge module root (github.com/openengine/edge); use -root")
		}
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.report != "" {
		recs, err := readResults(o.report)
		if err != nil {
			return err
		}
		return writeReport(filepath.Dir(o.report), recs)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "edgebench: "+format+"\n", a...)
	}

	if o.root == "" {
		wd, _ := os.Getwd()
		if o.root, err = findRoot(wd); err != nil {
			return err
		}
	}
	if o.run == "" {
		o.run = time.Now().UTC().Format("20060102-150405")
		if o.quick {
			o.run = "quick-" + o.run
		}
	}
	if o.out == "" {
		o.out = filepath.Join(o.root, "bench", "results", o.run)
		if o.quick {
			// Smoke runs are not kept (bench/results/tmp/ is ignored by git).
			o.out = filepath.Join(o.root, "bench", "results", "tmp", o.run)
		}
	}
	if err := os.MkdirAll(filepath.Join(o.out, "logs"), 0o755); err != nil {
		return err
	}
	noFile := raiseNoFile(logf)

	m := standardMatrix()
	m.w3Counts = w3Counts(noFile)
	if o.quick {
		m = quickMatrix()
	}
	if o.warmup > 0 {
		m.warmup = o.warmup
	}
	if o.measure > 0 {
		m.measure = o.measure
	}
	if err := m.override(o); err != nil {
		return err
	}
	phases := filterVariants(m.phases(o.workloads, o.peers), o.variants)
	if len(phases) == 0 {
		return fmt.Errorf("no phase matches -workloads %s -peers %s -variants %s",
			strings.Join(o.workloads, ","), strings.Join(o.peers, ","), strings.Join(o.variants, ","))
	}

	// Build before pinning: the compiler gets both cores.
	binDir, err := os.MkdirTemp("", "edgebench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	edgeSrc := cmp.Or(o.edgeSrc, o.root)
	bins, buildFailed, err := build(ctx, o.goBin, o.root, map[string]string{"edge": edgeSrc, baseEdge: o.baseSrc},
		binDir, serversOf(phases, o.peers), logf)
	if err != nil {
		return err
	}
	var certs *certFiles
	if slices.ContainsFunc(phases, func(p phase) bool { return p.tls }) {
		if certs, err = writeCert(binDir); err != nil {
			return err
		}
	}
	edgePprof, edgeTLS := false, false
	if bin, ok := bins["edge"]; ok {
		help, _ := exec.Command(bin, "--help").CombinedOutput()
		edgeTLS = strings.Contains(string(help), "-tls-cert")
		edgePprofArgs = pprofFlags(string(help))
		edgePprof = edgePprofArgs != nil
		if o.pprof && !edgePprof {
			logf("WARNING: -pprof: this edge serves no pprof (--admin-pprof)")
		}
		if certs != nil && !edgeTLS {
			logf("WARNING: %s", edgeNoTLS)
		}
	}
	if bin, ok := bins[baseEdge]; ok {
		help, _ := exec.Command(bin, "--help").CombinedOutput()
		baseEdgePprofArgs = pprofFlags(string(help))
	}

	po := proxiedOpts{edgeBin: bins["edge"], baseBin: bins[baseEdge], edgePprof: edgePprof, cpuPprof: o.pprof, perf: o.perf}
	if slices.ContainsFunc(phases, func(p phase) bool { return p.proxied && p.peer == "nginx" }) {
		if po.nginxBin, po.nginxErr = findNginx(o.nginx); po.nginxErr != nil {
			logf("WARNING: %v: P1 runs without it", po.nginxErr)
		} else {
			logf("P1: nginx %s at %s", nginxVersion(po.nginxBin), po.nginxBin)
		}
	}

	co := clusterOpts{edgePprof: edgePprof && o.pprof}
	if slices.ContainsFunc(phases, func(p phase) bool { return p.cluster && p.peer != "direct" && p.peer != "1-edge" }) {
		co.natsdBin, co.natsdErr = buildNatsd(ctx, o.goBin, o.root, binDir)
		if co.natsdErr != nil {
			logf("WARNING: %v: C1 runs without NATS", co.natsdErr)
		}
	}

	if o.nice != 0 {
		if err := reniceSelf(o.nice); err != nil {
			logf("WARNING: cannot renice: %v", err)
		} else {
			logf("running at nice %d", o.nice)
		}
	}
	pin := choosePinning(o.pin)
	if pin.on {
		if err := pinSelf(pin.client); err != nil {
			logf("WARNING: cannot pin the generator (%v); running unpinned", err)
			pin = pinning{why: err.Error()}
		}
	}
	if pin.on {
		logf("servers on CPU %d (GOMAXPROCS=1), load generator on CPU %d", pin.server, pin.client)
	} else {
		logf("WARNING: no CPU pinning (%s); server and generator share the CPUs and figures are noisier", pin.why)
	}

	if o.cpuprof != "" {
		f, err := os.Create(o.cpuprof)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	resf, err := os.Create(filepath.Join(o.out, "results.jsonl"))
	if err != nil {
		return err
	}
	defer resf.Close()
	enc := json.NewEncoder(resf)

	statEvents, statOff := perfStatEvents(o.perfStat, logf)
	var total time.Duration
	for _, p := range phases {
		total += p.budget
	}
	logf("%d phases, about %s; results in %s", len(phases), total.Round(time.Second), o.out)
	prog := newProgress(stderr, len(phases))

	var recs []Record
	var edgeFailures, failures, leaks, skipped int
	for i, p := range phases {
		if ctx.Err() != nil {
			break
		}
		prog.begin(i, p)
		rec := Record{Run: o.run, Workload: p.workload, Variant: p.variant, Peer: p.peer, Params: p.params,
			Started: time.Now().UTC(), Pinned: pin.on, SyscallsOff: statOff}
		if (p.peer == "edge" || p.proxied) && len(o.edgeArgs) > 0 {
			rec.Notes = append(rec.Notes, "edge flags: "+strings.Join(o.edgeArgs, " "))
		}
		if (p.peer == "edge" || p.proxied) && o.edgeSrc != "" {
			rec.Notes = append(rec.Notes, "edge built from "+o.edgeSrc)
		}
		if p.peer == baseEdge {
			rec.Notes = append(rec.Notes, baseEdge+" built from "+o.baseSrc)
			if len(o.edgeArgs) > 0 {
				rec.Notes = append(rec.Notes, "edge flags: "+strings.Join(o.edgeArgs, " "))
			}
		}
		if p.cluster {
			if _, ok := bins["edge"]; ok {
				co.edgeBin = bins["edge"]
				run := runCluster
				if p.workload == "C2" {
					run = runFanout2
				}
				run(ctx, p, co, pin, o.out, phaseOpts{perf: slices.Contains(o.perf, "edge"), statEvents: statEvents,
					edgeArgs: o.edgeArgs}, &rec, logf)
			} else {
				rec.Error = fmt.Sprintf("not built: %v", buildFailed["edge"])
			}
		} else if p.proxied {
			if _, ok := bins["edge"]; ok {
				runProxied(ctx, p, po, pin, o.out, phaseOpts{statEvents: statEvents, edgeArgs: o.edgeArgs}, &rec, logf)
			} else {
				rec.Error = fmt.Sprintf("not built: %v", buildFailed["edge"])
			}
		} else if p.tls && p.peer == "edge" && !edgeTLS && bins["edge"] != "" {
			rec.Skipped, rec.Error = true, edgeNoTLS
		} else if bin, ok := bins[p.peer]; ok {
			po := phaseOpts{perf: slices.Contains(o.perf, p.peer),
				pprof: (p.peer == "edge" && edgePprof || p.peer == baseEdge && baseEdgePprofArgs != nil) && (o.pprof || p.gctrace), statEvents: statEvents,
				edgeArgs: o.edgeArgs}
			po.heapProfile = po.pprof && o.pprof
			if p.tls {
				po.certs = certs
			}
			runPhase(ctx, p, bin, pin, o.out, po, &rec, logf)
		} else {
			rec.Error = fmt.Sprintf("not built: %v", buildFailed[p.peer])
		}
		if ctx.Err() != nil && rec.OK {
			// An interrupted window is not a measurement.
			rec.OK, rec.Error = false, "interrupted: "+ctx.Err().Error()
		}
		switch {
		case rec.Skipped:
			skipped++
		case !rec.OK:
			failures++
			if p.peer == "edge" || p.peer == "direct" {
				edgeFailures++
			}
		}
		for _, n := range rec.Notes {
			if strings.HasPrefix(n, "LEAK") {
				leaks++
			}
		}
		recs = append(recs, rec)
		if err := enc.Encode(rec); err != nil {
			return err
		}
		prog.end(rec)
	}
	prog.finish()
	if err := writeReport(o.out, recs); err != nil {
		return err
	}
	sk := ""
	if skipped > 0 {
		sk = fmt.Sprintf(", %d skipped", skipped)
	}
	fmt.Fprintf(stdout, "edgebench: %d of %d phases ok%s; report: %s\n", len(recs)-failures-skipped, len(phases), sk,
		filepath.Join(o.out, "report.md"))
	for _, r := range recs {
		switch {
		case r.Skipped:
			fmt.Fprintf(stdout, "  SKIPPED %s %s %s: %s\n", r.Workload, r.Variant, r.Peer, firstLine(r.Error))
		case !r.OK:
			fmt.Fprintf(stdout, "  FAILED %s %s %s: %s\n", r.Workload, r.Variant, r.Peer, firstLine(r.Error))
		}
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("stopped early: %w", ctx.Err())
	case len(recs) < len(phases):
		return fmt.Errorf("only %d of %d phases ran", len(recs), len(phases))
	case edgeFailures > 0:
		return fmt.Errorf("%d edge phases failed", edgeFailures)
	case o.strict && (failures > 0 || leaks > 0):
		return fmt.Errorf("%d phases failed, %d leaked state", failures, leaks)
	}
	return nil
}

// runPhase starts a fresh server, runs one phase against it, stops it, and
// fills rec.
// phaseOpts are the per-phase instrumentation switches.
type phaseOpts struct {
	perf        bool       // perf record the server over the window
	pprof       bool       // edge: serve pprof (CPU profile over the window, heap in W3)
	heapProfile bool       // -pprof: W3 also saves edge's heap profile at the end of the hold
	statEvents  []string   // perf stat these events over the window (nil: no syscall count)
	edgeArgs    []string   // extra flags for edge
	certs       *certFiles // wss://: the run's certificate (nil: ws://)
}

func runPhase(ctx context.Context, p phase, bin string, pin pinning, out string, opts phaseOpts, rec *Record, logf func(string, ...any)) {
	pctx, cancel := context.WithTimeout(ctx, 2*p.budget+30*time.Second)
	defer cancel()
	d, err := load.DialectFor(dialectOf(p.peer))
	if err != nil {
		rec.Error = err.Error()
		return
	}
	pc := &phaseCtx{rec: rec, logf: logf}
	logName := fmt.Sprintf("%s-%s-%s.log", p.workload, safeName(p.variant), p.peer)
	if opts.heapProfile {
		pc.heapProfile = filepath.Join(out, "logs", strings.TrimSuffix(logName, ".log")+".heap.pprof")
	}
	srv, err := startServer(pctx, serverSpec{peer: p.peer, bin: bin, logPath: filepath.Join(out, "logs", logName),
		pin: pin, gctrace: p.gctrace, gcConns: pc.conns.Load, pprof: opts.pprof, extra: opts.edgeArgs, tls: opts.certs})
	if err != nil {
		rec.Error = err.Error()
		return
	}
	rec.ServerCPUs = srv.cpus
	pc.srv = srv
	pc.target = load.Target{Addr: srv.addr, Dialect: d}
	if opts.certs != nil {
		pc.target.TLS = load.ClientTLS()
	}
	pc.samp = &sampler{pids: []int{srv.pid}}
	pprofAddr := ""
	if opts.pprof && !p.gctrace {
		pprofAddr = srv.pprof()
	}
	pc.samp.instrument(out, strings.TrimSuffix(logName, ".log"), p.window, pprofAddr, opts.perf, opts.statEvents, rec, "")
	err = p.run(pctx, pc)
	rec.Syscalls = pc.samp.finish(rec, "")
	if opts.certs != nil && err == nil && !srv.exited() {
		rec.Notes = append(rec.Notes, tlsNote(pctx, pc.target))
	}
	if err == nil && srv.exited() {
		err = fmt.Errorf("server exited during the run: %v", srv.waitErr)
	}
	if serr := srv.stop(10 * time.Second); serr != nil {
		rec.Notes = append(rec.Notes, "stop: "+serr.Error())
	}
	if err != nil {
		rec.Error = err.Error()
		if srv.exited() {
			rec.Error += "\n" + tailFile(filepath.Join(out, "logs", logName), 1000)
		}
		return
	}
	rec.OK = true
}

// serversOf lists the servers to build for phases, in the order of peers:
// those the phases run, and edge for P1 (its upstream and its proxy) and C1.
func serversOf(phases []phase, peers []string) []string {
	var out []string
	for _, name := range peers {
		if slices.ContainsFunc(phases, func(p phase) bool {
			return p.peer == name && !p.proxied && !p.cluster || name == "edge" && (p.proxied || p.cluster) ||
				name == baseEdge && p.proxied && p.peer == baseEdge
		}) {
			out = append(out, name)
		}
	}
	return out
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '_'
	}, s)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// raiseNoFile raises RLIMIT_NOFILE to its hard limit (W3 holds up to
// 50,000 connections; servers inherit the limit) and returns it.
func raiseNoFile(logf func(string, ...any)) uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			logf("WARNING: cannot raise the open-file limit: %v", err)
			_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
		}
	}
	if rl.Cur < 16000 {
		logf("WARNING: open-file limit %d is below W3's 15,000 connections plus headroom", rl.Cur)
	}
	return rl.Cur
}

// w3Max is W3's largest connection count (issue 21).
const w3Max = 50000

// w3Counts is W3's connection counts in the standard matrix: 1k, 10k and
// the largest the open-file limit allows, up to w3Max: the limit less
// 1,000 descriptors of headroom (the generator's own, perf's, the
// server's), in whole thousands (19,000 under a limit of 20,000). Below
// 16,000 it is the standard 15,000, which the limit warning is about.
func w3Counts(noFile uint64) []int {
	n := min(w3Max, int(min(noFile, 1<<30))-1000) / 1000 * 1000
	if n < 15000 {
		n = 15000
	}
	return []int{1000, 10000, n}
}

func readResults(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}

// progress shows a bar on a terminal, or one line per phase otherwise.
type progress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	total int
	start time.Time
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total, start: time.Now()}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)
	}
	return p
}

func (p *progress) begin(i int, ph phase) {
	desc := fmt.Sprintf("%s %s %s", ph.workload, ph.variant, ph.peer)
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%-28s", desc))
		return
	}
	fmt.Fprintf(p.w, "[%d/%d %4.0fs] %s ...\n", i+1, p.total, time.Since(p.start).Seconds(), desc)
}

func (p *progress) end(r Record) {
	if p.bar != nil {
		p.bar.Add(1)
		if !r.OK {
			p.bar.Clear()
			what := "FAILED"
			if r.Skipped {
				what = "SKIPPED"
			}
			fmt.Fprintf(p.w, "\n  %s %s %s %s: %s\n", r.Workload, r.Variant, r.Peer, what, firstLine(r.Error))
		}
		return
	}
	switch {
	case r.Skipped:
		fmt.Fprintf(p.w, "    skipped: %s\n", firstLine(r.Error))
	case r.Workload == "P1" && r.RSSKiB > 0:
		fmt.Fprintf(p.w, "    %.0f calls held: %.0f B of RSS and %.0f B of live heap per call\n",
			extra(&r, "held"), extra(&r, "rss_per_call_bytes"), extra(&r, "heap_per_call_bytes"))
	case !r.OK:
		fmt.Fprintf(p.w, "    FAILED: %s\n", firstLine(r.Error))
	case r.Throughput > 0:
		cpu := ""
		if r.Server != nil && r.Server.UsPerOp > 0 {
			cpu = fmt.Sprintf(", server %.2f us/op", r.Server.UsPerOp)
		}
		if r.Upstream != nil && r.Upstream.UsPerOp > 0 {
			cpu += fmt.Sprintf(", upstream %.2f us/op", r.Upstream.UsPerOp)
		}
		if r.Syscalls != nil && r.Syscalls.PerOp > 0 {
			cpu += fmt.Sprintf(", %.2f syscalls/op", r.Syscalls.PerOp)
		}
		fmt.Fprintf(p.w, "    %.0f %s%s\n", r.Throughput, r.Unit, cpu)
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

// perfStatEvents decides whether the run counts the servers' system calls:
// the events to count, or nil and the reason why not.
func perfStatEvents(want bool, logf func(string, ...any)) ([]string, string) {
	if !want {
		return nil, "turned off with -perfstat=false"
	}
	events, err := probePerfStat()
	if err != nil {
		logf("WARNING: not counting system calls: %v", err)
		return nil, err.Error()
	}
	if len(events) < len(syscallEvents) {
		logf("WARNING: perf stat refuses the epoll tracepoints: counting only the total of system calls")
	} else {
		logf("counting the servers' system calls with perf stat (-perfstat=false turns it off)")
	}
	return events, ""
}

// edgePprofArgs are the flags that make the edge under test serve pprof
// (--admin-listen with --admin-pprof, or an older edge's --pprof-listen),
// chosen from its --help; baseEdgePprofArgs edge-base's. Set once in main
// before any server starts.
var edgePprofArgs, baseEdgePprofArgs []string

// pprofFlags returns the flags that make an edge serve pprof, from its
// --help, or nil when it serves none.
func pprofFlags(help string) []string {
	switch {
	case strings.Contains(help, "-admin-pprof"):
		return []string{"--admin-listen", "127.0.0.1:0", "--admin-pprof"}
	case strings.Contains(help, "-pprof-listen"): // edges before the admin listener
		return []string{"--pprof-listen", "127.0.0.1:0"}
	}
	return nil
}
