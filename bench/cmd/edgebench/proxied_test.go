package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/openengine/edge/bench/load"
)

func TestP1Phases(t *testing.T) {
	type ph struct{ variant, peer string }
	list := func(m matrix, peers []string) []ph {
		var out []ph
		for _, p := range m.phases([]string{"P1"}, peers) {
			if !p.proxied || p.workload != "P1" {
				t.Fatalf("phase %+v is not a P1 phase", p)
			}
			out = append(out, ph{p.variant, p.peer})
		}
		return out
	}
	tests := []struct {
		name    string
		m       func() matrix
		peers   []string
		proxies string
		want    []ph
	}{
		{"standard", standardMatrix, peerNames, "", []ph{
			{"c4w64-16B", "direct"}, {"c4w64-16B", "edge"}, {"c4w64-16B", "nginx"},
			{"c50w1-16B", "direct"}, {"c50w1-16B", "edge"}, {"c50w1-16B", "nginx"},
			{"hold-256x256", "edge"}}},
		{"quick holds 4096", quickMatrix, []string{"edge"}, "", []ph{
			{"c4w64-16B", "direct"}, {"c4w64-16B", "edge"}, {"c4w64-16B", "nginx"},
			{"c50w1-16B", "direct"}, {"c50w1-16B", "edge"}, {"c50w1-16B", "nginx"},
			{"hold-64x64", "edge"}}},
		{"needs edge", standardMatrix, []string{"gorilla"}, "", nil},
		{"-proxies edge,nginx", standardMatrix, []string{"edge"}, "edge,nginx", []ph{
			{"c4w64-16B", "edge"}, {"c4w64-16B", "nginx"}, {"c50w1-16B", "edge"}, {"c50w1-16B", "nginx"},
			{"hold-256x256", "edge"}}},
		{"no edge proxy, no hold", standardMatrix, []string{"edge"}, "nginx", []ph{{"c4w64-16B", "nginx"}, {"c50w1-16B", "nginx"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.m()
			args := []string{}
			if tt.proxies != "" {
				args = append(args, "-proxies", tt.proxies)
			}
			o, err := parseFlags(args, new(bytes.Buffer))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.override(o); err != nil {
				t.Fatal(err)
			}
			if got := list(m, tt.peers); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := parseFlags([]string{"-proxies", "haproxy"}, new(bytes.Buffer)); err == nil {
		t.Fatal("unknown proxy accepted")
	}
	if _, err := parseFlags([]string{"-perf", "nginx,upstream"}, new(bytes.Buffer)); err != nil && !strings.Contains(err.Error(), "linux-perf") {
		t.Fatalf("-perf nginx,upstream: %v", err)
	}
}

func TestServersOf(t *testing.T) {
	m := quickMatrix()
	tests := []struct {
		name      string
		workloads []string
		peers     []string
		want      []string
	}{
		{"P1 needs only edge", []string{"P1"}, peerNames, []string{"edge"}},
		{"W1 and P1", []string{"W1", "P1"}, []string{"gorilla", "edge"}, []string{"gorilla", "edge"}},
		{"W5 is edge's", []string{"W5"}, []string{"edge", "raw"}, []string{"edge"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serversOf(m.phases(tt.workloads, tt.peers), tt.peers); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFindNginx(t *testing.T) {
	if _, err := findNginx("/nonexistent/nginx"); err == nil || !strings.Contains(err.Error(), "apt-get install -y nginx") {
		t.Fatalf("a missing nginx: %v", err)
	}
}

func TestNginxConf(t *testing.T) {
	dir := t.TempDir()
	conf := nginxConf(dir, "127.0.0.1:18080", "127.0.0.1:18081")
	for _, want := range []string{"worker_processes 1;", "master_process on;", "daemon off;", "access_log off;",
		"listen 127.0.0.1:18080;", "proxy_pass http://127.0.0.1:18081;", "proxy_http_version 1.1;",
		"proxy_set_header Upgrade $http_upgrade;", `proxy_set_header Connection "upgrade";`, "proxy_buffering off;",
		"pid " + dir + "/nginx.pid;"} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %q", want)
		}
	}
	bin, err := findNginx("")
	if err != nil {
		t.Skipf("not checked by nginx itself: %v", err)
	}
	cf := filepath.Join(dir, "nginx.conf")
	os.WriteFile(cf, []byte(conf), 0o644)
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", cf, "-e", "stderr").CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
}

// echoServer is a minimal WebSocket JSON-RPC server answering every call
// with its params (edge/echo), to put nginx in front of.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				if _, err := ws.Upgrade(nc); err != nil {
					return
				}
				for {
					msg, _, err := wsutil.ReadClientData(nc)
					if err != nil {
						return
					}
					var req struct {
						ID     json.RawMessage `json:"id"`
						Params json.RawMessage `json:"params"`
					}
					if json.Unmarshal(msg, &req) != nil {
						return
					}
					wsutil.WriteServerText(nc, []byte(`{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":`+string(req.Params)+`}`))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestStartNginx puts nginx in front of a WebSocket server with the
// harness's configuration, calls through it, and stops it: master and
// worker gone, temporary directory removed. Skipped without nginx.
func TestStartNginx(t *testing.T) {
	bin, err := findNginx("")
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logPath := filepath.Join(t.TempDir(), "nginx.log")
	s, err := startNginx(ctx, bin, echoServer(t), logPath, pinning{})
	if err != nil {
		t.Fatal(err)
	}
	if s.worker <= 0 || s.worker == s.pid || !slices.Equal(s.pids(), []int{s.worker, s.pid}) {
		t.Fatalf("worker %d, master %d", s.worker, s.pid)
	}
	if _, err := os.Stat(strings.TrimSuffix(logPath, ".log") + ".conf"); err != nil {
		t.Errorf("configuration not copied next to the log: %v", err)
	}
	tgt := load.Target{Addr: s.addr, Dialect: load.JSONRPC{}}
	if err := waitReady(ctx, tgt, 10*time.Second); err != nil {
		t.Fatalf("no call through nginx: %v\n%s", err, tailFile(logPath, 2000))
	}
	if _, err := procCPUs(s.pids()); err != nil {
		t.Fatal(err)
	}
	if err := s.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.tmp); !os.IsNotExist(err) {
		t.Errorf("temporary directory %s left: %v", s.tmp, err)
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(s.worker) + "/stat"); err == nil && strings.Contains(string(b), "(nginx)") &&
		!strings.Contains(string(b), ") Z") {
		t.Errorf("worker %d still running", s.worker)
	}
}

func TestP1Report(t *testing.T) {
	dir := t.TempDir()
	l := load.Latency{Count: 10, P50: 50, P99: 90, P999: 99, Max: 120}
	u := func(us float64) *Usage { return &Usage{UserS: 0.5, SysS: 0.5, Util: 1, UsPerOp: us} }
	pw := map[string]any{"conns": 4, "window": 64, "params_bytes": 16}
	p1 := map[string]any{"conns": 50, "window": 1, "params_bytes": 16}
	recs := []Record{
		{Run: "t", Workload: "P1", Variant: "c4w64-16B", Peer: "direct", Params: pw, OK: true, Throughput: 1000, Latency: &l,
			Upstream: u(1), Client: u(0.5), UpstreamSyscalls: &Syscalls{PerOp: 0.04}},
		{Run: "t", Workload: "P1", Variant: "c4w64-16B", Peer: "edge", Params: pw, OK: true, Throughput: 600, Latency: &l,
			Server: u(2), Upstream: u(0.5), Client: u(0.5), Syscalls: &Syscalls{PerOp: 0.1}},
		{Run: "t", Workload: "P1", Variant: "c4w64-16B", Peer: "nginx", Params: pw, OK: true, Throughput: 400, Latency: &l,
			Server: &Usage{UserS: 0.1, SysS: 0.9, Util: 1, UsPerOp: 4}, Upstream: u(1), Client: u(0.5)},
		{Run: "t", Workload: "P1", Variant: "c50w1-16B", Peer: "direct", Params: p1, OK: true, Throughput: 100, Latency: &l, Upstream: u(20)},
		{Run: "t", Workload: "P1", Variant: "c50w1-16B", Peer: "edge", Params: p1, OK: true, Throughput: 50, Latency: &l, Server: u(30), Upstream: u(15)},
		{Run: "t", Workload: "P1", Variant: "c50w1-16B", Peer: "nginx", Params: p1, Skipped: true, Error: "nginx not found (apt-get install -y nginx)"},
		{Run: "t", Workload: "P1", Variant: "hold-256x256", Peer: "edge", OK: true, Conns: 256,
			Extra: holdResult{HoldResult: load.HoldResult{Conns: 256, Calls: 65536, Held: 65536, Released: 65536, Answered: 65536},
				RSSBeforeKiB: 10240, RSSHeldKiB: 10240 + 48*1024, RSSPerCallBytes: 768, HeapPerCallBytes: 500,
				GoroutinesBefore: 17, GoroutinesHeld: 17}},
	}
	if err := writeReport(dir, recs); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## P1", "![P1](P1.svg)",
		"| c4w64-16B | edge | 600 | x0.60 | 2 | 0.5 | 2.5 |",
		"| c4w64-16B | direct | 1k | x1.00 | - | 1 | 1 | - |",
		"| c50w1-16B | nginx | skipped: nginx not found (apt-get install -y nginx) |",
		"| edge proxy CPU per proxied request / nginx CPU per proxied message | c4w64-16B | 2 / 4 us = x0.50 | <= x1.00 | **yes** |",
		"| edge proxy CPU per proxied request / nginx CPU per proxied message | c50w1-16B | 30 us / nginx not measured | <= x1.00 | - |",
		"| (split) edge proxy CPU per request, user + kernel | c4w64-16B | 1 + 1 us | - | (reference) |",
		"| (split) nginx proxy CPU per request, user + kernel | c4w64-16B | 0.4 + 3.6 us | - | (reference) |",
		"| proxied pipelined throughput / direct (edge) | c4w64-16B | 600 / 1k req/s = 60% | >= 50% | **yes** |",
		"| proxied pipelined throughput / direct (nginx) | c4w64-16B | 400 / 1k req/s = 40% | >= 50% | (reference) |",
		"| (derived) the proxy alone on a core, 1e6 / proxy CPU us/req, / direct (edge) | c4w64-16B | 500k / 1k req/s = 50000% | - | (reference) |",
		"| memory per in-flight proxied call (edge proxy RSS) | hold-256x256 | 768 B | < 1024 B | **yes** |",
		"| hold-256x256 | 65536 | 256 | 10 | 58 | 768 | 500 | 17 / 17 |"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	if bytes.Contains(md, []byte("## Failed phases")) {
		t.Error("a skipped phase is listed as failed")
	}
	svg, err := os.ReadFile(filepath.Join(dir, "P1.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Fatalf("P1.svg is not well-formed XML: %v", err)
	}
	// The report is regenerated from results.jsonl (Params and Extra come
	// back as JSON values).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range recs {
		enc.Encode(r)
	}
	jl := filepath.Join(dir, "results.jsonl")
	os.WriteFile(jl, buf.Bytes(), 0o644)
	back, err := readResults(jl)
	if err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	if err := writeReport(dir2, back); err != nil {
		t.Fatal(err)
	}
	md2, _ := os.ReadFile(filepath.Join(dir2, "report.md"))
	if !bytes.Equal(md, md2) {
		t.Errorf("report from results.jsonl differs:\n%s\n---\n%s", md, md2)
	}
}

// goroutineProfile is the shape of /debug/pprof/goroutine?debug=1 (edge
// upstream holding edge/gate calls; addresses shortened).
const goroutineProfile = `goroutine profile: total 4103
4096 @ 0x47a1ce 0x4457e5 0x8f1c2a 0x8f4b01 0x4818a1
#	0x8f1c29	github.com/openengine/edge/backend.(*Memory).gate+0x1c9	/src/backend/memory.go:133
#	0x8f4b00	github.com/openengine/edge/backend.(*Pool).run+0x60	/src/backend/pool.go:80

3 @ 0x47a1ce 0x4457e5 0x4818a1
#	0x5e1c55	internal/poll.runtime_pollWait+0x55	/go/src/runtime/netpoll.go:351

1 @ 0x47a1ce 0x8f1c2a 0x4818a1
#	0x8f1c29	github.com/openengine/edge/backend.(*Memory).gate+0x1c9	/src/backend/memory.go:133
#	0x8f1c29	github.com/openengine/edge/backend.(*Memory).gate+0x1c9	/src/backend/memory.go:140

3 @ 0x47a1ce 0x4818a1
#	0x4818a0	runtime.goexit+0x0	/go/src/runtime/asm_amd64.s:1700
`

func TestCountGated(t *testing.T) {
	n, err := countGated(bufio.NewScanner(strings.NewReader(goroutineProfile)))
	if err != nil || n != 4097 {
		t.Fatalf("got %d %v, want 4097", n, err)
	}
}
