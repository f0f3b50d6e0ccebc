package main

import (
	"bytes"
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/bench/load"
)

func TestListenAddr(t *testing.T) {
	tests := []struct{ name, line, want string }{
		{"edge slog", `time=2026-11-30T00:15:58.604Z level=INFO msg=listening addr=127.0.0.1:35561 url=ws://127.0.0.1:35561/ backend=memory`, "127.0.0.1:35561"},
		{"edge pprof", `time=x level=INFO msg=pprof addr=127.0.0.1:33647`, "127.0.0.1:33647"},
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
				if !seen[w+"|"+firstVariant(ps, w)+"|edge"] {
					t.Fatalf("no edge phase for %s", w)
				}
			}
			limit := 13 * time.Minute // the suite must finish within 15 minutes, builds included
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
	recs := []Record{
		{Run: "t", Workload: "W1", Variant: "c50w1-16B", Peer: "edge", OK: true, Throughput: 1000, Unit: "req/s",
			Latency: &l, Server: &Usage{UserS: 0.5, SysS: 0.5, Util: 1, UsPerOp: 10}, Client: &Usage{UsPerOp: 2}},
		{Run: "t", Workload: "W1", Variant: "c50w1-16B", Peer: "gorilla", OK: true, Throughput: 500, Unit: "req/s",
			Latency: &l, Server: &Usage{UserS: 0.5, SysS: 0.5, Util: 1, UsPerOp: 20}},
		{Run: "t", Workload: "W1", Variant: "c50w1-16B", Peer: "geth", Error: "boom | bang"},
		{Run: "t", Workload: "W3", Variant: "1000", Peer: "edge", OK: true, Conns: 1000, RSSKiB: 2048, RSSPerConnKiB: 1.5},
		{Run: "t", Workload: "W5", Variant: "1000 conns", Peer: "edge", OK: true,
			Extra: load.StormResult{Sleeps: 10, Leaked: 0, EchoQuiet: load.Result{Rate: 5, Latency: l}}},
	}
	if err := writeReport(dir, recs); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## W1", "x0.50", "x2.00", "FAILED: boom / bang", "## W3", "## W5", "![W1](W1.svg)", "## Failed phases"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, w := range []string{"W1", "W3", "W5"} {
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
