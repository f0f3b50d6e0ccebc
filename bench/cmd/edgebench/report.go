package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// report holds the records of a run, indexed for the tables.
type report struct {
	recs []Record
	by   map[string]*Record // workload|variant|peer
}

func key(w, v, p string) string { return w + "|" + v + "|" + p }

func newReport(recs []Record) *report {
	r := &report{recs: recs, by: map[string]*Record{}}
	for i := range recs {
		x := &recs[i]
		r.by[key(x.Workload, x.Variant, x.Peer)] = x
	}
	return r
}

// variants and peers of a workload, in run order.
func (r *report) axes(w string) (variants, peers []string) {
	for _, x := range r.recs {
		if x.Workload != w {
			continue
		}
		if !contains(variants, x.Variant) {
			variants = append(variants, x.Variant)
		}
		if !contains(peers, x.Peer) {
			peers = append(peers, x.Peer)
		}
	}
	return variants, peers
}

func (r *report) get(w, v, p string) *Record { return r.by[key(w, v, p)] }

// extra returns a number from a record's workload-specific results by a
// dotted JSON path (for example "echo_quiet.latency.p99_us").
func extra(x *Record, path string) float64 {
	if x == nil || x.Extra == nil {
		return math.NaN()
	}
	b, _ := json.Marshal(x.Extra)
	var v any
	json.Unmarshal(b, &v)
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return math.NaN()
		}
		v = m[k]
	}
	f, ok := v.(float64)
	if !ok {
		return math.NaN()
	}
	return f
}

type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for range t.head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return compact(v)
}

func ratio(v, base float64) string {
	if math.IsNaN(v) || math.IsNaN(base) || base == 0 || v == 0 {
		return "-"
	}
	return fmt.Sprintf("x%.2f", v/base)
}

func tput(x *Record) float64 {
	if x == nil || !x.OK {
		return math.NaN()
	}
	return x.Throughput
}

func srvCPU(x *Record) float64 {
	if x == nil || !x.OK || x.Server == nil || x.Server.UsPerOp == 0 {
		return math.NaN()
	}
	return x.Server.UsPerOp
}

func cliCPU(x *Record) float64 {
	if x == nil || !x.OK || x.Client == nil || x.Client.UsPerOp == 0 {
		return math.NaN()
	}
	return x.Client.UsPerOp
}

// sysPerOp is the server's system calls per operation over the window
// (perf stat).
func sysPerOp(x *Record) float64 {
	if x == nil || !x.OK || x.Syscalls == nil || x.Syscalls.PerOp == 0 {
		return math.NaN()
	}
	return x.Syscalls.PerOp
}

func util(x *Record) string {
	if x == nil || x.Server == nil {
		return "-"
	}
	sys := 0.0
	if t := x.Server.UserS + x.Server.SysS; t > 0 {
		sys = 100 * x.Server.SysS / t
	}
	return fmt.Sprintf("%.0f%% (%.0f%% sys)", 100*x.Server.Util, sys)
}

func lat(x *Record, q string) float64 {
	if x == nil || !x.OK || x.Latency == nil {
		return math.NaN()
	}
	switch q {
	case "p50":
		return x.Latency.P50
	case "p99":
		return x.Latency.P99
	case "p999":
		return x.Latency.P999
	case "max":
		return x.Latency.Max
	}
	return math.NaN()
}

func failed(x *Record) bool { return x != nil && !x.OK }

// genUtil is the generator's CPU utilisation in the window, with a warning
// mark when it was (nearly) saturated: then the generator, not the server,
// limited the run and latencies include the generator's own queueing.
func genUtil(x *Record) string {
	if x == nil || x.Client == nil {
		return "-"
	}
	s := fmt.Sprintf("%.0f%%", 100*x.Client.Util)
	if x.Client.Util >= 0.9 {
		s += " (bound)"
	}
	return s
}

func failCell(x *Record) string {
	if x == nil {
		return "not run"
	}
	e := firstLine(x.Error)
	if len(e) > 80 {
		e = e[:80] + "..."
	}
	return "FAILED: " + strings.ReplaceAll(e, "|", "/")
}

// machine describes where the report was generated.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	var u unix.Utsname
	unix.Uname(&u)
	rel := strings.TrimRight(string(u.Release[:]), "\x00")
	return fmt.Sprintf("%d CPUs (%s), Linux %s, %s", runtime.NumCPU(), model, rel, runtime.Version())
}

// writeReport writes report.md and one SVG per workload into dir.
func writeReport(dir string, recs []Record) error {
	r := newReport(recs)
	var b strings.Builder
	run := ""
	pinned := false
	cpus := ""
	if len(recs) > 0 {
		run, pinned = recs[0].Run, recs[0].Pinned
		for _, x := range recs {
			if x.ServerCPUs != "" {
				cpus = x.ServerCPUs
				break
			}
		}
	}
	fmt.Fprintf(&b, "# edge benchmark report: %s\n\n", run)
	fmt.Fprintf(&b, "Machine: %s. ", machine())
	if pinned {
		fmt.Fprintf(&b, "Each server ran alone on CPU %s with GOMAXPROCS=1 (edge with --loops 1); the load generator ran on another CPU.\n\n", cpus)
	} else {
		b.WriteString("**Not pinned**: server and generator shared the CPUs, so figures are noisier.\n\n")
	}
	b.WriteString("How to read: every measurement used a fresh server process. *vs edge* is the peer's figure divided by edge's " +
		"(throughput x0.50 = half of edge's; CPU x2.00 = twice edge's CPU per operation). *Server CPU us/op* is the server " +
		"process's user+system CPU time over the measured window (/proc/PID/stat) divided by the operations completed in it: " +
		"it is the figure that compares servers fairly even when the generator, not the server, limits throughput. " +
		"*Generator us/op* is the harness's own CPU per operation; when it is close to a full core (util) the run was " +
		"generator-bound. Latencies are HDR percentiles in microseconds. bench/README.md explains each workload.\n\n")
	b.WriteString(syscallNote(recs))

	sections := []struct {
		w     string
		title string
		fn    func(*report, *strings.Builder) []panel
	}{
		{"W1", "W1: unary echo, closed loop", w1Section},
		{"W2", "W2: fixed rate, 1,000 connections (latency from the scheduled send time)", w2Section},
		{"W3", "W3: idle connections", w3Section},
		{"W4", "W4: subscription fan-out (one topic, one publisher)", w4Section},
		{"W5", "W5: cancellation storm (edge only)", w5Section},
		{"W6", "W6: connection churn (connect, upgrade, one echo, close)", w6Section},
		{"W7", "W7: large and fragmented messages", w7Section},
		{"W1-wss", "W1-wss: unary echo over wss:// (TLS)", w1wssSection},
		{"W3-wss", "W3-wss: idle connections over wss:// (TLS)", w3wssSection},
		{"P1", "P1: proxied (clients -> X -> upstream edge)", p1Section},
		{"C1", "C1: cluster (clients -> edge -> NATS -> workers)", c1Section},
		{"C2", "C2: fan-out across edges over NATS", c2Section},
	}
	for _, s := range sections {
		if v, _ := r.axes(s.w); len(v) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n", s.title)
		panels := s.fn(r, &b)
		if len(panels) > 0 {
			name := s.w + ".svg"
			if err := os.WriteFile(filepath.Join(dir, name), svgChart(s.title, panels), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(&b, "\n![%s](%s)\n\n", s.w, name)
		}
		var notes []string
		for _, x := range recs {
			if x.Workload == s.w {
				for _, n := range x.Notes {
					notes = append(notes, fmt.Sprintf("%s %s: %s", x.Variant, x.Peer, n))
				}
			}
		}
		if len(notes) > 0 {
			b.WriteString("Notes:\n")
			for _, n := range notes {
				fmt.Fprintf(&b, "- %s\n", n)
			}
			b.WriteString("\n")
		}
	}
	var fails []string
	for _, x := range recs {
		if !x.OK && !x.Skipped {
			fails = append(fails, fmt.Sprintf("- %s %s %s: %s", x.Workload, x.Variant, x.Peer, strings.ReplaceAll(x.Error, "\n", " / ")))
		}
	}
	if len(fails) > 0 {
		b.WriteString("## Failed phases\n\n" + strings.Join(fails, "\n") + "\n")
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

// syscallNote explains the syscalls/op columns, or says why they are empty.
func syscallNote(recs []Record) string {
	var off []string
	counted := false
	for _, x := range recs {
		counted = counted || x.Syscalls != nil
		if x.SyscallsOff != "" && !contains(off, x.SyscallsOff) {
			off = append(off, x.SyscallsOff)
		}
	}
	var b strings.Builder
	if counted {
		b.WriteString("*Syscalls/op* is the server's system calls in the measured window (`perf stat` on the " +
			"raw_syscalls:sys_enter tracepoint, attached before the window and enabled only during it) divided by the " +
			"operations completed in it; results.jsonl has the reads and writes (/proc/PID/io) and the epoll waits per operation. " +
			"Counting charges the server a little kernel time per call (see bench/README.md).")
	}
	if len(off) > 0 {
		if counted {
			b.WriteString(" ")
		}
		b.WriteString("System calls were not counted (syscalls/op shows -): " + strings.Join(off, "; ") + ".")
	}
	if b.Len() > 0 {
		b.WriteString("\n\n")
	}
	return b.String()
}

func grid(r *report, w string, f func(*Record) float64) ([]string, []string, [][]float64) {
	variants, peers := r.axes(w)
	vals := make([][]float64, len(variants))
	for i, v := range variants {
		vals[i] = make([]float64, len(peers))
		for j, p := range peers {
			x := r.get(w, v, p)
			if x == nil || !x.OK {
				vals[i][j] = math.NaN()
				continue
			}
			vals[i][j] = f(x)
		}
	}
	return variants, peers, vals
}

func w1Section(r *report, b *strings.Builder) []panel { return w1Table(r, b, "W1") }

// w1Table is W1's table and charts for workload w (W1, or W1-wss).
func w1Table(r *report, b *strings.Builder, w string) []panel {
	variants, peers := r.axes(w)
	t := table{head: []string{"variant", "server", "req/s", "vs edge", "server CPU us/req", "vs edge", "server util", "syscalls/req", "generator us/req", "generator util", "p50 us", "p99 us", "p99.9 us"}}
	for _, v := range variants {
		e := r.get(w, v, "edge")
		for _, p := range peers {
			x := r.get(w, v, p)
			if failed(x) || x == nil {
				t.add(v, p, skipCell(x), "", "", "", "", "", "", "", "", "", "")
				continue
			}
			t.add(v, p, num(tput(x)), ratio(tput(x), tput(e)), num(srvCPU(x)), ratio(srvCPU(x), srvCPU(e)), util(x),
				num(sysPerOp(x)), num(cliCPU(x)), genUtil(x), num(lat(x, "p50")), num(lat(x, "p99")), num(lat(x, "p999")))
		}
	}
	b.WriteString("Closed loop: `cN wW` is N connections each with W requests in flight; params of 16 B or 1 KiB echoed back. " +
		"The generator polls its sockets instead of sleeping while every connection waits for the server (an idle vCPU of " +
		"this VM wakes late, which would turn the loop into a latency-bound ping-pong); its util and CPU figures leave out " +
		"the polling that found nothing to do.\n\n")
	b.WriteString(t.String())
	g, s, tv := grid(r, w, tput)
	_, _, cv := grid(r, w, srvCPU)
	return []panel{{title: "throughput", unit: "req/s", groups: g, series: s, vals: tv},
		{title: "server CPU per request (lower is better)", unit: "us/req", groups: g, series: s, vals: cv}}
}

func w2Section(r *report, b *strings.Builder) []panel {
	variants, peers := r.axes("W2")
	t := table{head: []string{"offered", "server", "achieved req/s", "p50 us", "p99 us", "p99.9 us", "max us", "generator lag p99 us", "generator util", "server CPU us/req", "server util", "syscalls/req"}}
	for _, v := range variants {
		for _, p := range peers {
			x := r.get("W2", v, p)
			if failed(x) || x == nil {
				t.add(v, p, failCell(x), "", "", "", "", "", "", "", "", "")
				continue
			}
			lag := math.NaN()
			if x.SendLag != nil {
				lag = x.SendLag.P99
			}
			t.add(v, p, num(tput(x)), num(lat(x, "p50")), num(lat(x, "p99")), num(lat(x, "p999")), num(lat(x, "max")),
				num(lag), genUtil(x), num(srvCPU(x)), util(x), num(sysPerOp(x)))
		}
	}
	b.WriteString("Open loop: requests are scheduled at a fixed total rate over 1,000 connections and each latency runs from the " +
		"request's scheduled send time, so a stalled server is charged for every request that should have been sent meanwhile. " +
		"*Generator lag* is how late the generator itself sent (it is included in the latencies); a row whose generator " +
		"util is marked *(bound)* measured the generator's limit, not the server's: compare the server CPU per request " +
		"there, not the latencies. The generator polls its sockets instead of sleeping (an idle vCPU of this VM wakes " +
		"tens of microseconds to milliseconds late); its util and CPU figures leave out the polling that found nothing " +
		"to do.\n\n")
	b.WriteString(t.String())
	g, s, v99 := grid(r, "W2", func(x *Record) float64 { return lat(x, "p99") })
	_, _, v999 := grid(r, "W2", func(x *Record) float64 { return lat(x, "p999") })
	return []panel{{title: "p99 latency (lower is better)", unit: "us", groups: g, series: s, vals: v99},
		{title: "p99.9 latency (lower is better)", unit: "us", groups: g, series: s, vals: v999}}
}

func w3Section(r *report, b *strings.Builder) []panel { return w3Table(r, b, "W3") }

// rssPerConn is a W3 record's RSS per connection (NaN when not measured).
func rssPerConn(x *Record) float64 {
	if x == nil || !x.OK || x.RSSPerConnKiB == 0 {
		return math.NaN()
	}
	return x.RSSPerConnKiB
}

// heapPerConn is a W3 record's live heap per connection (NaN when not
// measured).
func heapPerConn(x *Record) float64 {
	if x == nil || !x.OK || x.HeapPerConnKiB <= 0 {
		return math.NaN()
	}
	return x.HeapPerConnKiB
}

// w3Table is W3's table and chart for workload w (W3, or W3-wss).
func w3Table(r *report, b *strings.Builder, w string) []panel {
	variants, peers := r.axes(w)
	t := table{head: []string{"connections", "server", "established", "RSS MiB", "RSS/conn KiB", "vs edge", "heap/conn KiB", "ramp conns/s"}}
	for _, v := range variants {
		e := r.get(w, v, "edge")
		for _, p := range peers {
			x := r.get(w, v, p)
			if failed(x) || x == nil {
				t.add(v, p, skipCell(x), "", "", "", "", "")
				continue
			}
			t.add(v, p, fmt.Sprint(x.Conns), num(float64(x.RSSKiB)/1024), num(rssPerConn(x)), ratio(rssPerConn(x), rssPerConn(e)),
				num(heapPerConn(x)), num(x.Throughput))
		}
	}
	b.WriteString("Connections are opened (centrifuge: and connected), then held without traffic. RSS/conn is (VmRSS after the " +
		"ramp - VmRSS before) / connections. Heap/conn: for edge, the live heap after a forced GC (pprof) after the ramp minus " +
		"before, per connection; for the peers, the live heap of the last GC during the ramp (GODEBUG=gctrace=1, MB resolution) " +
		"over the connections open then, left out when too coarse.\n\n")
	b.WriteString(t.String())
	g, s, v := grid(r, w, rssPerConn)
	return []panel{{title: "resident memory per idle connection (lower is better)", unit: "KiB/conn", groups: g, series: s, vals: v}}
}

func w4Section(r *report, b *strings.Builder) []panel {
	variants, peers := r.axes("W4")
	t := table{head: []string{"variant", "server", "offered deliveries/s", "deliveries/s", "vs edge", "p50 us", "p99 us", "p99.9 us",
		"lost", "publish RTT p99 us", "generator lag p99 us", "generator util", "server CPU us/delivery", "server util", "syscalls/delivery"}}
	for _, v := range variants {
		e := r.get("W4", v, "edge")
		for _, p := range peers {
			x := r.get("W4", v, p)
			if failed(x) || x == nil {
				t.add(v, p, failCell(x), "", "", "", "", "", "", "", "", "", "", "", "")
				continue
			}
			off := "-"
			if f, ok := x.Params["offered_deliveries"].(float64); ok {
				off = num(f)
			}
			t.add(v, p, off, num(tput(x)), ratio(tput(x), tput(e)), num(lat(x, "p50")), num(lat(x, "p99")), num(lat(x, "p999")),
				num(extra(x, "lost")), num(extra(x, "publish_rtt.p99_us")), num(extra(x, "send_lag.p99_us")), genUtil(x), num(srvCPU(x)), util(x),
				num(sysPerOp(x)))
		}
	}
	b.WriteString("`N subs R/s`: N subscriber connections, R offered deliveries per second. " +
		"Every subscriber connection subscribes to one topic; one publisher connection publishes 128 B events on a " +
		"fixed schedule (offered deliveries = publish rate x subscribers). Deliveries/s counts events received in the window. " +
		"Latency runs from the moment the publisher sent the event (carried in it) to its receipt. *Lost*: deliveries of " +
		"events published in the window still missing 2 s after it. *Publish RTT*: the publisher's request round trip. " +
		"*Generator lag*: how late the publisher sent against its schedule (a busy generator; not charged to the server).\n\n")
	b.WriteString(t.String())
	g, s, v := grid(r, "W4", tput)
	_, _, l := grid(r, "W4", func(x *Record) float64 { return lat(x, "p99") })
	return []panel{{title: "deliveries per second", unit: "deliveries/s", groups: g, series: s, vals: v},
		{title: "publish-to-receive p99 (lower is better)", unit: "us", groups: g, series: s, vals: l}}
}

func w5Section(r *report, b *strings.Builder) []panel {
	variants, _ := r.axes("W5")
	var panels []panel
	for _, v := range variants {
		x := r.get("W5", v, "edge")
		if failed(x) || x == nil {
			fmt.Fprintf(b, "%s: %s\n\n", v, failCell(x))
			continue
		}
		t := table{head: []string{"storm", "value"}}
		row := func(name, path string) { t.add(name, num(extra(x, path))) }
		row("edge/sleep requests sent", "sleeps")
		row("$/cancelRequest sent", "cancels")
		row("uncancelled sleeps answered", "answered")
		row("cancels sent after the sleep, p99 us (promised: within 5 ms)", "cancel_delay.p99_us")
		row("cancelled sleeps answered after the cancel was sent (completion won the race)", "answered_cancelled")
		row("cancelled sleeps whose answer had already arrived when the cancel was sent (generator late)", "crossed_cancel")
		row("uncancelled sleeps never answered", "unanswered")
		row("error replies", "errors")
		row("connections asked edge/stats", "stats_conns")
		row("connections that answered edge/stats", "stats_answered")
		row("**leaked state after settling** (inFlightIds + tasks + subscriptions)", "leaked")
		if x.Server != nil {
			t.add("server util during the storm", util(x))
		}
		e := table{head: []string{"echo probe (fixed rate)", "quiet", "during the storm"}}
		erow := func(name, path string) {
			e.add(name, num(extra(x, "echo_quiet."+path)), num(extra(x, "echo_storm."+path)))
		}
		erow("req/s", "rate")
		erow("p50 us", "latency.p50_us")
		erow("p99 us", "latency.p99_us")
		erow("p99.9 us", "latency.p999_us")
		erow("max us", "latency.max_us")
		fmt.Fprintf(b, "%s: storm connections send edge/sleep (50 ms) at a fixed rate and cancel most within 5 ms while other "+
			"connections carry echo requests at a fixed rate (latency from the scheduled send), first quiet, then during the "+
			"storm; after settling every connection is asked edge/stats, whose in-flight ids and tasks must be 0. The storm "+
			"also loads the generator: check its util in results.jsonl before blaming edge for the echo tail.\n\n", v)
		b.WriteString(t.String() + "\n" + e.String())
		q := func(p string) float64 { return extra(x, "echo_quiet.latency."+p) }
		s := func(p string) float64 { return extra(x, "echo_storm.latency."+p) }
		panels = append(panels, panel{title: "echo latency, quiet vs during the storm (" + v + ")", unit: "us",
			groups: []string{"p50", "p99", "p99.9"}, series: []string{"quiet", "storm"},
			vals: [][]float64{{q("p50_us"), s("p50_us")}, {q("p99_us"), s("p99_us")}, {q("p999_us"), s("p999_us")}}})
	}
	return panels
}

func w6Section(r *report, b *strings.Builder) []panel {
	variants, peers := r.axes("W6")
	t := table{head: []string{"workers", "server", "upgrades/s", "vs edge", "server CPU us/upgrade", "vs edge", "syscalls/upgrade", "cycle p50 us", "cycle p99 us", "errors", "close timeouts"}}
	for _, v := range variants {
		e := r.get("W6", v, "edge")
		for _, p := range peers {
			x := r.get("W6", v, p)
			if failed(x) || x == nil {
				t.add(v, p, failCell(x), "", "", "", "", "", "", "", "")
				continue
			}
			t.add(v, p, num(tput(x)), ratio(tput(x), tput(e)), num(srvCPU(x)), ratio(srvCPU(x), srvCPU(e)),
				num(sysPerOp(x)), num(lat(x, "p50")), num(lat(x, "p99")), fmt.Sprint(x.Errors), num(extra(x, "close_timeouts")))
		}
	}
	b.WriteString("Each worker repeats: TCP connect, WebSocket upgrade (centrifuge: and connect), one echo, closing handshake.\n\n")
	b.WriteString(t.String())
	g, s, v := grid(r, "W6", tput)
	_, _, c := grid(r, "W6", srvCPU)
	return []panel{{title: "upgrades per second", unit: "upgrades/s", groups: g, series: s, vals: v},
		{title: "server CPU per connection cycle (lower is better)", unit: "us", groups: g, series: s, vals: c}}
}

func w7Section(r *report, b *strings.Builder) []panel {
	variants, peers := r.axes("W7")
	t := table{head: []string{"message", "server", "msgs/s", "MB/s", "vs edge", "server CPU us/msg", "small p99 alone us", "small p50 during us", "small p99 during us", "small max during us"}}
	for _, v := range variants {
		e := r.get("W7", v, "edge")
		for _, p := range peers {
			x := r.get("W7", v, p)
			if failed(x) || x == nil {
				t.add(v, p, failCell(x), "", "", "", "", "", "", "")
				continue
			}
			t.add(v, p, num(tput(x)), num(extra(x, "mb_per_s")), ratio(tput(x), tput(e)), num(srvCPU(x)),
				num(extra(x, "small_alone.latency.p99_us")), num(extra(x, "small_during.latency.p50_us")),
				num(extra(x, "small_during.latency.p99_us")), num(extra(x, "small_during.latency.max_us")))
		}
	}
	b.WriteString("One connection echoes large messages (window 1; `-fragN` = sent as fragments of N bytes) while a second " +
		"connection runs 16 B echo (window 1): its latency during the large transfers shows how long the server's loop stalls.\n\n")
	b.WriteString(t.String())
	g, s, v := grid(r, "W7", func(x *Record) float64 { return extra(x, "mb_per_s") })
	_, _, l := grid(r, "W7", func(x *Record) float64 { return extra(x, "small_during.latency.p99_us") })
	return []panel{{title: "large-message echo throughput", unit: "MB/s", groups: g, series: s, vals: v},
		{title: "small-request p99 during the large transfers (lower is better)", unit: "us", groups: g, series: s, vals: l}}
}

// wssIntro opens the wss:// sections.
const wssIntro = "The workload above it over `wss://`: edge with `--tls-cert`/`--tls-key`, gorilla behind " +
	"`http.Server.ServeTLS`, both Go's crypto/tls with its defaults and the run's self-signed ECDSA P-256 " +
	"certificate. The generator is a crypto/tls client (TLS 1.2 and later, Go's default suites and key " +
	"exchanges, no certificate verification, no session cache and no tickets: every connection makes a full " +
	"handshake; 16 KiB records); under TLS it also encrypts and decrypts, so check its util for a " +
	"generator-bound row. What was negotiated is in the notes. A *skipped* edge row: that edge does not " +
	"take --tls-cert.\n\n"

func w1wssSection(r *report, b *strings.Builder) []panel {
	b.WriteString(wssIntro)
	panels := w1Table(r, b, "W1-wss")
	wsVsWss(r, b, "W1", "req/s", tput, "server CPU us/req", srvCPU)
	return panels
}

func w3wssSection(r *report, b *strings.Builder) []panel {
	b.WriteString(wssIntro)
	panels := w3Table(r, b, "W3-wss")
	wsVsWss(r, b, "W3", "RSS/conn KiB", rssPerConn, "heap/conn KiB", heapPerConn)
	return panels
}

// wsVsWss adds, for every server and variant run both ways in the run, the
// plaintext workload w beside w-wss: figures a and c (named an and cn), the
// ratios wss / ws and c's difference (what TLS costs per operation or per
// connection).
func wsVsWss(r *report, b *strings.Builder, w, an string, a func(*Record) float64, cn string, c func(*Record) float64) {
	variants, peers := r.axes(w + "-wss")
	t := table{head: []string{"variant", "server", an + " ws", an + " wss", "wss / ws", cn + " ws", cn + " wss", "wss / ws", "wss - ws"}}
	for _, v := range variants {
		for _, p := range peers {
			x, y := r.get(w, v, p), r.get(w+"-wss", v, p)
			if x == nil || y == nil || !x.OK || !y.OK {
				continue
			}
			t.add(v, p, num(a(x)), num(a(y)), ratio(a(y), a(x)), num(c(x)), num(c(y)), ratio(c(y), c(x)), num(c(y)-c(x)))
		}
	}
	if len(t.rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s vs %s-wss, each server against itself (same run, separate processes):\n\n", w, w)
	b.WriteString(t.String())
}
