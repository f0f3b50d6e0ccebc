package main

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/bench/load"
)

func TestListenAddr(t *testing.T) {
	tests := []struct{ name, line, want string }{
		{"edge slog", `time=2026-11-30T00:15:58.604Z level=INFO msg=listening addr=127.0.0.1:35561 url=ws://127.0.0.1:35561/ backend=memory`, "127.0.0.1:35561"},
		{"edge pprof", `time=x level=INFO msg=pprof addr=127.0.0.1:33647`, "127.0.0.1:33647"},
		{"edge admin", `time=x level=INFO msg="admin listening" addr=127.0.0.1:9091 url=http://127.0.0.1:9091/ endpoints="GET /healthz"`, "127.0.0.1:9091"},
		{"peer", `listening 127.0.0.1:41234`, "127.0.0.1:41234"},
		{"other", `starting up`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := listenAddr(tt.line); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestGCLine(t *testing.T) {
	line := "gc 7 @1.234s 2%: 0.010+0.26+0.003 ms clock, 0.010+0.11/0.16/0+0.003 ms cpu, 12->13->9 MB, 14 MB goal, 1 MB stacks, 0 MB globals, 1 P"
	m := gcLine.FindStringSubmatch(line)
	if m == nil || m[3] != "9" || m[4] != "1" {
		t.Fatalf("match %q", m)
	}
}

func TestProc(t *testing.T) {
	pid := os.Getpid()
	start, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
	}
	end, _ := procCPU(pid)
	if d := end.sub(start); d.user+d.sys <= 0 {
		t.Fatalf("no CPU time accounted for a busy loop: %+v", d)
	}
	if rss, err := rssKiB(pid); err != nil || rss <= 0 {
		t.Fatalf("rss %d %v", rss, err)
	}
	if selfCPU().user <= 0 {
		t.Fatal("getrusage")
	}
}

func TestParseList(t *testing.T) {
	if got, err := parseList("", peerNames); err != nil || len(got) != len(peerNames) {
		t.Fatalf("empty: %v %v", got, err)
	}
	if got, err := parseList("edge, raw", peerNames); err != nil || strings.Join(got, ",") != "edge,raw" {
		t.Fatalf("got %v %v", got, err)
	}
	if _, err := parseList("edge,nginx", peerNames); err == nil {
		t.Fatal("unknown peer accepted")
	}
}

func TestMatrixPhases(t *testing.T) {
	for name, m := range map[string]matrix{"standard": standardMatrix(), "quick": quickMatrix()} {
		t.Run(name, func(t *testing.T) {
			ps := m.phases(allWorkloads, peerNames)
			seen := map[string]bool{}
			var total time.Duration
			for _, p := range ps {
				k := p.workload + "|" + p.variant + "|" + p.peer
				if seen[k] {
					t.Fatalf("duplicate phase %s", k)
				}
				seen[k] = true
				if p.workload == "W5" && p.peer != "edge" || p.workload == "W4" && p.peer == "raw" {
					t.Fatalf("phase %s should not exist", k)
				}
				total += p.budget
			}
			for _, w := range allWorkloads {
				if w == "C1" || w == "C2" { // their peers are their X, every one edge's
					if firstVariant(ps, w) == "" {
						t.Fatalf("no %s phase", w)
					}
					continue
				}
				if !seen[w+"|"+firstVariant(ps, w)+"|edge"] {
					t.Fatalf("no edge phase for %s", w)
				}
			}
			// The suite must finish within 15 minutes, builds included
			// (the budgets are generous).
			limit := 14*time.Minute + 30*time.Second
			if name == "quick" {
				limit = 4 * time.Minute
			}
			if total > limit {
				t.Fatalf("%s matrix budget %s over %s", name, total, limit)
			}
		})
	}
}

func firstVariant(ps []phase, w string) string {
	for _, p := range ps {
		if p.workload == w {
			return p.variant
		}
	}
	return ""
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	l := load.Latency{Count: 10, P50: 50, P99: 90, P999: 99, Max: 120}
	l2 := load.Latency{Count: 10, P50: 80, P99: 150, P999: 200, Max: 220}
	recs := []Record{
		{Run: "t", Workload: "W1", Variant: "c50w1-16B", Peer: "edge", OK: true, Throughput: 1000, Unit: "req/s",
			Latency: &l, Server: &Usage{UserS: 0.5, SysS: 0.5, Util: 1, UsPerOp: 10}, Client: &Usage{UsPerOp: 2},
			Syscalls: &Syscalls{Total: 8040, PerOp: 2.01}},
		{Run: "t", Workload: "W1", Variant: "c50w1-16B", Peer: "gorilla", OK: true, Throughput: 500, Unit: "req/s",
			Latency: &l, Server: &Usage{UserS: 0.5, SysS: 0.5, Util: 1, UsPerOp: 20}},
		{Run: "t", Workload: "W1", Variant: "c50w1-16B", Peer: "geth", Error: "boom | bang"},
		{Run: "t", Workload: "W2", Variant: "10k/s", Peer: "edge", OK: true, Throughput: 1000, Latency: &l,
			Server: &Usage{UsPerOp: 10}, Syscalls: &Syscalls{PerOp: 1.23}},
		{Run: "t", Workload: "W4", Variant: "1000 subs 100k/s", Peer: "edge", OK: true, Throughput: 1e5,
			Params: map[string]any{"offered_deliveries": 1e5}, Syscalls: &Syscalls{PerOp: 0.0456}},
		{Run: "t", Workload: "W4", Variant: "1000 subs 500k/s", Peer: "edge", OK: true, Throughput: 4e5,
			Params: map[string]any{"offered_deliveries": 5e5}},
		{Run: "t", Workload: "W4", Variant: "1000 subs 500k/s", Peer: "nbio", Error: "refused"},
		{Run: "t", Workload: "W6", Variant: "8 workers", Peer: "edge", OK: true, Throughput: 5000,
			Syscalls: &Syscalls{PerOp: 14.5}, SyscallsOff: "perf not found"},
		{Run: "t", Workload: "W3", Variant: "1000", Peer: "edge", OK: true, Conns: 1000, RSSKiB: 2048, RSSPerConnKiB: 1.5},
		{Run: "t", Workload: "W5", Variant: "1000 conns", Peer: "edge", OK: true,
			Extra: load.StormResult{Sleeps: 10, Leaked: 0, EchoQuiet: load.Result{Rate: 5, Latency: l}}},
		{Run: "t", Workload: "C1", Variant: "c50w1-16B", Peer: "direct", OK: true, Throughput: 4000, Latency: &l,
			Server: &Usage{UsPerOp: 10}},
		{Run: "t", Workload: "C1", Variant: "c50w1-16B", Peer: "nats-1w", OK: true, Throughput: 1000, Latency: &l2,
			Server: &Usage{UsPerOp: 15}, NATS: &Usage{UsPerOp: 7}, Workers: &Usage{UsPerOp: 12}},
		{Run: "t", Workload: "C1", Variant: "c50w1-16B", Peer: "nats-2w", Error: "natsd exited"},
	}
	if err := writeReport(dir, recs); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## W1", "x0.50", "x2.00", "FAILED: boom / bang", "## W3", "## W5", "![W1](W1.svg)", "## Failed phases",
		"| syscalls/req |", "| 2.01 |", "| 1.23 |", "| syscalls/delivery |", "| 0.05 |", "| syscalls/upgrade |", "| 14.5 |",
		"| 1000 subs 100k/s | edge |", "| 1000 subs 500k/s | edge |", "| 1000 subs 500k/s | nbio | FAILED: refused",
		"System calls were not counted (syscalls/op shows -): perf not found.",
		// C1: total = 15 + 7 + 12 = 34 us/req against 10 direct, the hop
		// +24 of which edge +5 and the workers +2; p50 +30, p99 +60.
		"## C1", "| c50w1-16B | nats-1w | 1k | x0.25 | 15 | 7 | 12 | 34 | x3.40 |", "| c50w1-16B | nats-1w | 24 | 5 | 7 | 2 | 30 | 60 |",
		"| c50w1-16B | nats-2w | FAILED: natsd exited"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Every row of every table has as many cells as its header.
	head := 0
	for _, line := range strings.Split(string(md), "\n") {
		if !strings.HasPrefix(line, "|") {
			head = 0
			continue
		}
		n := strings.Count(line, "|") - 1
		switch {
		case head == 0:
			head = n
		case n != head:
			t.Errorf("row has %d cells, header %d: %s", n, head, line)
		}
	}
	for _, w := range []string{"W1", "W3", "W4", "W5", "C1"} {
		svg, err := os.ReadFile(filepath.Join(dir, w+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(svg, new(struct{})); err != nil {
			t.Fatalf("%s.svg is not well-formed XML: %v", w, err)
		}
	}
}

func TestCompact(t *testing.T) {
	tests := map[float64]string{0: "0", 0.123: "0.12", 12.34: "12.3", 950: "950", 1234: "1.2k", 45678: "46k", 2.5e6: "2.5M"}
	for v, want := range tests {
		if got := compact(v); got != want {
			t.Errorf("compact(%v) = %q, want %q", v, got, want)
		}
	}
	if niceCeil(73) != 80 || niceCeil(0) != 1 || niceCeil(180) != 200 {
		t.Error("niceCeil")
	}
	if num(math.NaN()) != "-" {
		t.Error("num(NaN)")
	}
}

// perfStatEdgeW1 is real `perf stat -x, -D -1 --control fd:3,4 -e
// syscallEvents -p PID -o F` output: edge in W1 c50w1-16B (-quick) over the
// 1 s window, 11919 replies; /proc/PID/io counted 11963 reads and 11983
// writes in it.
const perfStatEdgeW1 = `# started on Mon Nov 30 02:04:47 2026

27413,,raw_syscalls:sys_enter,218538090,100.00,,
3157,,syscalls:sys_enter_epoll_wait,218538090,100.00,,
29,,syscalls:sys_enter_epoll_pwait,218556785,100.00,,
0,,syscalls:sys_enter_epoll_pwait2,218608092,100.00,,
`

// perfStatAllCalls is real output with read and write tracepoints counted
// too (edge, W1 c50w1-16B -quick), from before they were left to
// /proc/PID/io.
const perfStatAllCalls = `# started on Mon Nov 30 01:53:28 2026

57088,,raw_syscalls:sys_enter,563012928,100.00,,
27496,,syscalls:sys_enter_read,563168909,100.00,,
0,,syscalls:sys_enter_readv,563311144,100.00,,
0,,syscalls:sys_enter_recvfrom,563451816,100.00,,
0,,syscalls:sys_enter_recvmsg,563589233,100.00,,
27515,,syscalls:sys_enter_write,563730245,100.00,,
0,,syscalls:sys_enter_writev,563754681,100.00,,
0,,syscalls:sys_enter_sendto,563754681,100.00,,
0,,syscalls:sys_enter_sendmsg,563754681,100.00,,
1938,,syscalls:sys_enter_epoll_wait,563754681,100.00,,
66,,syscalls:sys_enter_epoll_pwait,563754681,100.00,,
0,,syscalls:sys_enter_epoll_pwait2,563754681,100.00,,
`

// perfStatIdle is real output for a process (sleep) that never ran while
// the counters were enabled.
const perfStatIdle = `# started on Mon Nov 30 01:49:54 2026

<not counted>,,raw_syscalls:sys_enter,0,100.00,,
<not counted>,,syscalls:sys_enter_read,0,100.00,,
`

func TestParsePerfStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]int64
		wantErr bool
	}{
		{name: "edge W1", in: perfStatEdgeW1, want: map[string]int64{
			"raw_syscalls:sys_enter": 27413, "syscalls:sys_enter_epoll_wait": 3157, "syscalls:sys_enter_epoll_pwait": 29,
			"syscalls:sys_enter_epoll_pwait2": 0}},
		{name: "every call", in: perfStatAllCalls, want: map[string]int64{
			"raw_syscalls:sys_enter": 57088, "syscalls:sys_enter_read": 27496, "syscalls:sys_enter_write": 27515,
			"syscalls:sys_enter_epoll_wait": 1938, "syscalls:sys_enter_epoll_pwait": 66, "syscalls:sys_enter_readv": 0}},
		{name: "not counted", in: perfStatIdle, want: map[string]int64{"raw_syscalls:sys_enter": 0, "syscalls:sys_enter_read": 0}},
		{name: "not supported", in: "<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n", wantErr: true},
		{name: "garbage count", in: "12x,,raw_syscalls:sys_enter,0,100.00,,\n", wantErr: true},
		{name: "empty", in: "# started on Mon Nov 30 01:49:54 2026\n\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePerfStat(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			for ev, n := range tt.want {
				if v, ok := got[ev]; !ok || v != n {
					t.Errorf("%s = %d (present %v), want %d", ev, v, ok, n)
				}
			}
		})
	}
}

func TestNewSyscalls(t *testing.T) {
	counts, err := parsePerfStat(strings.NewReader(perfStatEdgeW1))
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSyscalls(counts, &ioCalls{reads: 11963, writes: 11983}, 11919)
	if err != nil {
		t.Fatal(err)
	}
	if s.Total != 27413 || s.Reads != 11963 || s.Writes != 11983 || s.EpollWaits != 3157+29 {
		t.Fatalf("totals %+v", s)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-3 }
	if !near(s.PerOp, 2.2999) || !near(s.ReadsPerOp, 1.0037) || !near(s.WritesPerOp, 1.0054) || !near(s.EpollWaitsPerOp, 0.2673) {
		t.Fatalf("per op %+v", s)
	}
	if len(s.ByCall) != 2 || s.ByCall["epoll_pwait"] != 29 {
		t.Fatalf("by call %v (zero counts must be left out)", s.ByCall)
	}
	if s, _ := newSyscalls(counts, &ioCalls{}, 0); s.PerOp != 0 || s.ReadsPerOp != 0 || s.Total != 27413 {
		t.Fatalf("no ops: %+v", s)
	}
	if s, _ := newSyscalls(counts, nil, 11919); s.Reads != -1 || s.Writes != -1 || s.ReadsPerOp != 0 || s.PerOp == 0 {
		t.Fatalf("reads and writes unknown: %+v", s)
	}
	if _, err := newSyscalls(map[string]int64{"syscalls:sys_enter_epoll_wait": 1}, nil, 1); err == nil {
		t.Fatal("no total accepted")
	}
}

// TestPerfStat counts the system calls of a real process (cat, echoing
// lines back through pipes) with the harness's perf stat and /proc/PID/io:
// the lines echoed before the window must not count, those inside must.
// It is skipped where perf stat does not work.
func TestPerfStat(t *testing.T) {
	events, err := probePerfStat()
	if err != nil {
		t.Skip(err)
	}
	cat := exec.Command("cat")
	in, err := cat.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cat.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cat.Wait() }()
	out := bufio.NewReader(outp)
	echo := func(n int) {
		t.Helper()
		for i := range n {
			fmt.Fprintf(in, "line %d\n", i)
			if _, err := out.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := startPerfStat([]int{cat.Process.Pid}, events, filepath.Join(t.TempDir(), "perfstat.csv"))
	if err != nil {
		t.Fatal(err)
	}
	echo(100) // counters disabled
	p.enable()
	if err := p.waitAcks(10 * time.Second); err != nil { // the hooks do not wait; the test does, to be exact
		t.Fatal(err)
	}
	io0, err := procIO(cat.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	echo(300)
	io1, err := procIO(cat.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	p.disable()
	if err := p.waitAcks(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	echo(100) // disabled again
	counts, err := p.stop()
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSyscalls(counts, &ioCalls{io1.reads - io0.reads, io1.writes - io0.writes}, 300)
	if err != nil {
		t.Fatal(err)
	}
	// cat: one read and one write per line. perf counts a call when it
	// enters, /proc/PID/io when it returns: cat's read waiting for the next
	// line may enter on either side of enable and of disable, so the total
	// is 600 +- 1 while reads and writes are exact.
	if s.Total < 599 || s.Total > 601 || s.Reads != 300 || s.Writes != 300 || s.EpollWaits != 0 {
		t.Errorf("got %d calls, %d reads, %d writes, %d epoll waits; want 600+-1, 300, 300, 0", s.Total, s.Reads, s.Writes, s.EpollWaits)
	}
	if len(events) != len(syscallEvents) {
		t.Logf("perf stat counts only %v here", events)
	}
}

func TestParseNums(t *testing.T) {
	tests := []struct {
		name, in string
		want     []float64
	}{
		{"one", "100000", []float64{100000}},
		{"list with spaces", "100000, 500000", []float64{100000, 500000}},
		{"exponent", "5e5", []float64{500000}},
		{"empty entry", "1,,2", nil},
		{"zero", "0", nil},
		{"negative", "-1", nil},
		{"word", "fast", nil},
		{"infinite", "Inf", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNums("w4-deliveries", tt.in)
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), "-w4-deliveries") {
					t.Fatalf("got %v, %v; want an error naming the flag", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestSplitList(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"one", "c4w64-16B", []string{"c4w64-16B"}},
		{"spaces and empties", " c50w1 , ,500k/s,", []string{"c50w1", "500k/s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := splitList(tt.in); !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestW4Variants(t *testing.T) {
	names := func(m matrix) []string {
		var out []string
		for _, p := range m.phases([]string{"W4"}, []string{"edge"}) {
			out = append(out, p.variant)
		}
		return out
	}
	tests := []struct {
		name string
		m    func() matrix
		o    options
		want []string
	}{
		{"standard", standardMatrix, options{},
			[]string{"1000 subs 100k/s", "1000 subs 1M/s", "10000 subs 100k/s", "10000 subs 2M/s"}},
		{"quick", quickMatrix, options{}, []string{"100 subs 20k/s"}},
		{"flags", standardMatrix, options{w4Subs: "2000", w4Offered: "50000,1500000"},
			[]string{"2000 subs 50k/s", "2000 subs 1.5M/s"}},
		// 10 subscribers at the 1,000 publishes/s cap: both rates are 10k/s.
		{"capped rates run once", standardMatrix, options{w4Subs: "10", w4Offered: "20000,50000"},
			[]string{"10 subs 10k/s"}},
		{"below 1k", quickMatrix, options{w4Subs: "1", w4Offered: "500"}, []string{"1 subs 500/s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.m()
			if err := m.override(&tt.o); err != nil {
				t.Fatal(err)
			}
			if got := names(m); !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	m := standardMatrix()
	if err := m.override(&options{w4Offered: "100000,x"}); err == nil {
		t.Fatal("bad -w4-deliveries accepted")
	}
}

func TestFilterVariants(t *testing.T) {
	all := standardMatrix().phases(allWorkloads, []string{"edge", "raw"})
	tests := []struct {
		name  string
		subs  []string
		count int
		check func(p phase) bool
	}{
		{"none keeps all", nil, len(all), func(phase) bool { return true }},
		// W1 for edge and raw, W1-wss for edge, P1 for direct, edge and
		// nginx, C1 for direct, nats-1w and nats-2w.
		{"one W1 variant", []string{"c4w64-16B"}, 9, func(p phase) bool { return p.variant == "c4w64-16B" }},
		{"either of two", []string{"c50w1-16B", "c4w64-1KiB"}, 12, func(p phase) bool {
			return p.workload == "W1" || p.workload == "W1-wss" && p.peer == "edge" && p.tls ||
				(p.workload == "P1" || p.workload == "C1") && p.variant == "c50w1-16B"
		}},
		{"P1 in flight", []string{"hold-"}, 1, func(p phase) bool { return p.workload == "P1" && p.peer == "edge" && p.holdCalls == 65536 }},
		{"W4 rate", []string{"2M/s"}, 1, func(p phase) bool { return p.workload == "W4" && p.peer == "edge" }},
		{"no match", []string{"c9w9"}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := filterVariants(all, tt.subs)
			if len(got) != tt.count {
				t.Fatalf("%d phases, want %d", len(got), tt.count)
			}
			for _, p := range got {
				if !tt.check(p) {
					t.Errorf("unexpected phase %s %s %s", p.workload, p.variant, p.peer)
				}
			}
		})
	}
}

// TestSpinIdle: the polling a spinning generator did is taken out of its
// CPU figures, less the time it waited for its CPU (not CPU time).
func TestSpinIdle(t *testing.T) {
	for _, tt := range []struct {
		wait, util, usPerOp float64
	}{
		{0, 0.2, 200},    // quiet machine: all 0.8 s of polling was CPU
		{0.5, 0.7, 700},  // 0.5 s of it was waiting for the CPU
		{1.2, 1.0, 1000}, // waited longer than it polled: nothing taken out
	} {
		pc := &phaseCtx{rec: &Record{Client: &Usage{Util: 1, UsPerOp: 1000, RunWaitS: tt.wait}}}
		pc.spinIdle(load.Result{SpinIdle: 0.8, Requests: 1000, Seconds: 1})
		c := pc.rec.Client
		if math.Abs(c.Util-tt.util) > 1e-9 || math.Abs(c.UsPerOp-tt.usPerOp) > 1e-6 || len(pc.rec.Notes) != 1 {
			t.Errorf("wait %v: util %v, us/op %v, notes %q", tt.wait, c.Util, c.UsPerOp, pc.rec.Notes)
		}
	}
}

// TestRunWait parses schedstat lines, selfRunWaits reads them where the
// kernel has them, and maxRunWait takes the longest wait of a thread.
func TestRunWait(t *testing.T) {
	if w, ok := runWait([]byte("9416971 35774349 5\n")); !ok || w != 35774349*time.Nanosecond {
		t.Fatalf("got %v %v", w, ok)
	}
	for _, bad := range []string{"", "12", "1 x 3", "1 -5 3"} {
		if _, ok := runWait([]byte(bad)); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := os.Stat("/proc/self/schedstat"); err == nil && len(selfRunWaits()) == 0 {
		t.Fatal("schedstat present but selfRunWaits read none")
	}
	w0 := map[string]time.Duration{"1": 10, "2": 100, "3": 5}
	w1 := map[string]time.Duration{"1": 40, "2": 110, "4": 1000} // 3 exited, 4 is new
	if got := maxRunWait(w0, w1); got != 30 {
		t.Fatalf("maxRunWait %v, want 30ns", got)
	}
	if maxRunWait(nil, w1) != 0 {
		t.Fatal("maxRunWait without a start")
	}
}

// TestW3Counts: W3's largest count follows the open-file limit (issue 21:
// as many as the limit allows, up to 50,000).
func TestW3Counts(t *testing.T) {
	for _, c := range []struct {
		noFile uint64
		want   int
	}{{20000, 19000}, {1 << 20, w3Max}, {52345, w3Max}, {30500, 29000}, {16000, 15000}, {1024, 15000}, {0, 15000}} {
		got := w3Counts(c.noFile)
		if len(got) != 3 || got[0] != 1000 || got[1] != 10000 || got[2] != c.want {
			t.Errorf("w3Counts(%d) = %v, want [1000 10000 %d]", c.noFile, got, c.want)
		}
	}
}

// TestBaseSrc: -base-src runs edge-base right after edge in the per-server
// workloads (W1, W3, W4, W6, W7), not in the edge-only or fixed-peer ones,
// speaking edge's dialect and started as edge; without edge it is refused.
func TestBaseSrc(t *testing.T) {
	o, err := parseFlags([]string{"-base-src", "/tmp/main", "-peers", "gorilla,edge,nbio", "-workloads", "W1,W2,W4,W5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.peers, ","); got != "gorilla,edge,edge-base,nbio" {
		t.Fatalf("peers %s", got)
	}
	by := map[string][]string{}
	for _, p := range standardMatrix().phases(o.workloads, o.peers) {
		by[p.workload] = append(by[p.workload], p.peer)
	}
	for _, w := range []string{"W1", "W4"} {
		if i := slices.Index(by[w], "edge"); i < 0 || i+1 >= len(by[w]) || by[w][i+1] != baseEdge {
			t.Errorf("%s servers %v: want edge-base right after edge", w, by[w])
		}
	}
	for _, w := range []string{"W2", "W5"} {
		if slices.Contains(by[w], baseEdge) {
			t.Errorf("%s servers %v: edge-base runs only where every server does", w, by[w])
		}
	}
	if d, err := load.DialectFor(dialectOf(baseEdge)); err != nil || d != (load.JSONRPC{}) {
		t.Errorf("edge-base dialect %v, %v", d, err)
	}
	if !isEdge(baseEdge) || isEdge("gorilla") {
		t.Error("isEdge")
	}
	if _, err := parseFlags([]string{"-base-src", "/tmp/main", "-peers", "gorilla"}, io.Discard); err == nil {
		t.Error("-base-src without edge accepted")
	}
}
