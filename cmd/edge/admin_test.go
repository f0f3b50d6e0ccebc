package main

// Tests of the admin listener as edge wires it (--admin-listen,
// --admin-pprof), on an in-process edge (startEdge).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/client"
	"github.com/openengine/edge/dashboard/dashboardtest"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/internal/testnats"
	"github.com/openengine/edge/loop"
)

// httpClient has no keep-alive, so that no idle connection outlives a test,
// and a bound on each request.
var httpClient = &http.Client{Timeout: readTimeout, Transport: &http.Transport{DisableKeepAlives: true}}

// get fetches path from the admin listener and returns the status and body.
func (e *edgeProc) get(path string) (int, string) {
	e.t.Helper()
	res, err := httpClient.Get(e.admin + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	return res.StatusCode, string(body)
}

// readyz is /readyz's answer.
type readyz struct {
	status  int
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons"`
}

func (e *edgeProc) readyz() readyz {
	e.t.Helper()
	status, body := e.get("/readyz")
	r := readyz{status: status}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		e.t.Fatalf("/readyz body %q: %v", body, err)
	}
	if r.Ready != (status == http.StatusOK) {
		e.t.Fatalf("/readyz: status %d with body %s", status, body)
	}
	return r
}

// untilReady polls /readyz until its status is want and, for a 503, until
// one of its reasons contains reason.
func (e *edgeProc) untilReady(want int, reason string) readyz {
	e.t.Helper()
	var r readyz
	poll.Until(e.t, edgeWait, fmt.Sprintf("/readyz %d %q", want, reason), func() (bool, string) {
		r = e.readyz()
		ok := r.status == want && (reason == "" || slices.ContainsFunc(r.Reasons, func(s string) bool { return strings.Contains(s, reason) }))
		return ok, fmt.Sprintf("%d %q", r.status, r.Reasons)
	})
	return r
}

// TestAdminHealthAndReady: with --admin-listen, /healthz answers 200 "ok"
// and /readyz 200 {"ready":true} once the data listener is up, on a port of
// their own; the start-up log names the admin URL. The admin listener
// closes when edge has stopped.
func TestAdminHealthAndReady(t *testing.T) {
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0")
	if status, body := e.get("/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q, want 200 ok", status, body)
	}
	if r := e.readyz(); r.status != http.StatusOK || len(r.Reasons) > 0 {
		t.Errorf("/readyz: %d %q, want 200 and no reasons", r.status, r.Reasons)
	}
	if status, _ := e.get("/debug/pprof/"); status != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --admin-pprof: %d, want 404", status)
	}
	if !strings.Contains(e.stderr.String(), `url=`+e.admin+`/`) {
		t.Errorf("no admin URL in the log:\n%s", e.stderr.String())
	}
	e.stop()
	if err := e.wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := httpClient.Get(e.admin + "/healthz"); err == nil {
		t.Errorf("the admin listener still answers after edge stopped")
	}
}

// TestAdminPprof: /debug/pprof/ is served only with --admin-pprof.
func TestAdminPprof(t *testing.T) {
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0", "--admin-pprof")
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		if status, _ := e.get(path); status != http.StatusOK {
			t.Errorf("%s: %d, want 200", path, status)
		}
	}
}

// TestAdminReadyzDraining: on SIGTERM (ctx cancelled) /readyz answers 503
// "draining" for as long as the gateway drains, while /healthz still
// answers 200; a request held in flight on an edge/gate keeps the drain
// going until the client cancels it, then edge stops and the admin listener
// closes after it.
func TestAdminReadyzDraining(t *testing.T) {
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0", "--shutdown-timeout", "30s")
	e.untilReady(http.StatusOK, "")
	ctx, cancel := context.WithTimeout(context.Background(), edgeWait)
	defer cancel()
	c, err := client.Dial(ctx, e.ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gateCtx, release := context.WithCancel(ctx)
	defer release()
	gated := make(chan error, 1)
	go func() { gated <- c.Call(gateCtx, "edge/gate", map[string]string{"name": "drain"}, nil) }()
	poll.Until(t, edgeWait, "the gate to be in flight", func() (bool, string) {
		var st struct {
			InFlightIDs int `json:"inFlightIds"`
		}
		if err := c.Call(ctx, "edge/stats", struct{}{}, &st); err != nil {
			t.Fatalf("edge/stats: %v", err)
		}
		return st.InFlightIDs == 1, fmt.Sprint(st)
	})

	e.stop()
	r := e.untilReady(http.StatusServiceUnavailable, "draining")
	if status, body := e.get("/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz while draining: %d %q, want 200 ok", status, body)
	}
	if e.returned() {
		t.Fatalf("run returned with the gate in flight")
	}
	t.Logf("/readyz while draining: %d %q", r.status, r.Reasons)

	release() // the client sends $/cancelRequest: nothing is left in flight
	<-gated
	if err := e.wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if _, err := httpClient.Get(e.admin + "/readyz"); err == nil {
		t.Errorf("the admin listener still answers after edge stopped")
	}
}

// TestAdminReadyzUpstream: /readyz answers 503 naming the upstream while
// the default route's upstream has no connected connection (its port is
// closed), 200 once an NDJSON edge listens there and edge has connected,
// and 503 again when that edge goes away. A route to memory needs nothing.
func TestAdminReadyzUpstream(t *testing.T) {
	addr := testgw.FreeAddr(t, "127.0.0.2") // closed now
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0",
		"--upstream", "engine=tcp://"+addr, "--route", "edge/*=memory",
		"--upstream-conns", "2", "--upstream-backoff-max", "50ms")
	r := e.untilReady(http.StatusServiceUnavailable, "upstream engine: 0 of 2 connections up")
	if len(r.Reasons) != 1 {
		t.Errorf("/readyz reasons %q, want only the upstream's", r.Reasons)
	}

	up := testgw.Start(t, testgw.Config{Loop: loop.Config{Loops: 1, NDJSONListen: addr}, QuietLogs: true})
	e.untilReady(http.StatusOK, "")

	testgw.Stop(t, up.Srv)
	e.untilReady(http.StatusServiceUnavailable, "upstream engine: 0 of 2 connections up")
}

// TestAdminReadyzWrongTransport: a tcp:// upstream pointed at a port that
// does not speak NDJSON JSON-RPC is not up (upstream/probe.go): at another
// edge's WebSocket port, which says nothing to a line that is no HTTP
// request, and at its admin port, an HTTP server that answers 400, /readyz
// answers 503 saying why for each, the log says it once per state, and a
// call routed there gets UPSTREAM_UNAVAILABLE at once.
// (TestAdminReadyzUpstream: a tcp:// upstream at an NDJSON port is ready.)
func TestAdminReadyzWrongTransport(t *testing.T) {
	far := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0")
	wsAddr := strings.TrimSuffix(strings.TrimPrefix(far.ws, "ws://"), "/")
	httpAddr := strings.TrimPrefix(far.admin, "http://")
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0",
		"--upstream", "ws=tcp://"+wsAddr, "--upstream", "web=tcp://"+httpAddr,
		"--route", "edge/echo=ws", "--route", "edge/sleep=web",
		"--upstream-conns", "1", "--upstream-backoff-max", "50ms")
	wantWS := "upstream ws: 0 of 1 connections up (tcp://" + wsAddr + ": "
	wantWeb := "upstream web: 0 of 1 connections up (tcp://" + httpAddr + `: not JSON-RPC: it sent "HTTP/1.1 400 Bad Request")`
	poll.Until(t, edgeWait, "/readyz 503 naming both upstreams and why", func() (bool, string) {
		r := e.readyz()
		ws := slices.ContainsFunc(r.Reasons, func(s string) bool {
			return strings.HasPrefix(s, wantWS) && strings.Contains(s, "edge's probe")
		})
		return r.status == http.StatusServiceUnavailable && ws && slices.Contains(r.Reasons, wantWeb), fmt.Sprintf("%d %q", r.status, r.Reasons)
	})

	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	c, err := client.Dial(ctx, e.ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, m := range []string{"edge/echo", "edge/sleep"} {
		var re *client.Error
		if err := c.Call(ctx, m, map[string]int{"ms": 1}, nil); !errors.As(err, &re) || re.DataCode() != "UPSTREAM_UNAVAILABLE" {
			t.Errorf("%s through a wrong transport: %v, want UPSTREAM_UNAVAILABLE", m, err)
		}
	}
	logs := e.stderr.String()
	if strings.Contains(logs, "upstream connected") {
		t.Errorf("edge says an upstream connected:\n%s", logs)
	}
	if n := strings.Count(logs, `msg="upstream does not answer as JSON-RPC" upstream=web`); n != 1 {
		t.Errorf("%d log lines say web does not answer as JSON-RPC, want 1 (the same reason on every attempt):\n%s", n, logs)
	}
}

// TestAdminReadyzNATS: with --nats, /readyz answers 503 naming the topics
// while the NATS server is unreachable, and 200 once edge has connected.
func TestAdminReadyzNATS(t *testing.T) {
	addr := testgw.FreeAddr(t, "127.0.0.1") // closed now
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0",
		"--nats", "nats://"+addr, "--upstream-backoff-max", "50ms")
	e.untilReady(http.StatusServiceUnavailable, "nats topics nats://"+addr+": not connected")
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	testnats.StartWith(t, testnats.Config{Port: p})
	e.untilReady(http.StatusOK, "")
}

// TestAdminStdio: the admin listener serves beside --stdio too: ready while
// the session runs.
func TestAdminStdio(t *testing.T) {
	s, _, stderr := startStdio(t, "--admin-listen", "127.0.0.1:0")
	var admin string
	poll.Until(t, edgeWait, "the admin log line", func() (bool, string) {
		m := adminLine.FindStringSubmatch(stderr.String())
		if m != nil {
			admin = "http://" + m[1]
		}
		return m != nil, stderr.String()
	})
	e := &edgeProc{t: t, admin: admin}
	e.untilReady(http.StatusOK, "")
	s.send(echoReq("1", "a"))
	if got := s.recv(); got != echoRes("1", "a") {
		t.Fatalf("got %s", got)
	}
}

// TestAdminListenRefused: an admin address that is taken fails start-up
// with an error naming --admin-listen, before the gateway listens.
func TestAdminListenRefused(t *testing.T) {
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0")
	taken := strings.TrimPrefix(e.admin, "http://")
	stdout, stderr, err := cliRun(t, "--listen", "127.0.0.1:0", "--admin-listen", taken)
	if err == nil || !strings.Contains(err.Error(), "admin-listen") {
		t.Fatalf("error %v, want one naming admin-listen; stdout %q stderr %q", err, stdout, stderr)
	}
	if strings.Contains(stderr, "msg=listening") {
		t.Errorf("the gateway listened before the admin listener failed:\n%s", stderr)
	}
}

// TestAdminDashboardLive: the admin listener serves the dashboard, /metrics
// and /api/stats of the running gateway. Debian's chromium (headless) loads
// the dashboard while a client keeps calling, and it shows the live
// connection and a non-zero request rate; the screenshot is saved in the
// test's temporary directory. Without chromium the browser part skips with
// the install command (dashboardtest.Browser).
func TestAdminDashboardLive(t *testing.T) {
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--admin-listen", "127.0.0.1:0")
	c, err := client.Dial(context.Background(), e.ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for ctx.Err() == nil {
			var res json.RawMessage
			if err := c.Call(ctx, "edge/echo", map[string]int{"n": 1}, &res); err != nil && ctx.Err() == nil {
				t.Errorf("edge/echo: %v", err)
				return
			}
		}
	}()
	defer func() { stop(); <-loaded }()
	poll.Until(t, edgeWait, "edge/echo counted in /metrics", func() (bool, string) {
		status, body := e.get("/metrics")
		return status == http.StatusOK && strings.Contains(body, `edge_requests_total{method="edge/echo",outcome="ok"}`), body
	})
	status, body := e.get("/api/stats")
	if status != http.StatusOK || !strings.Contains(body, `"ws":1}`) {
		t.Fatalf("/api/stats: %d %s", status, body)
	}
	var stats struct {
		Instance struct {
			Listen  []string `json:"listen"`
			Admin   string   `json:"admin"`
			Version string   `json:"version"`
		} `json:"instance"`
	}
	if err := json.Unmarshal([]byte(body), &stats); err != nil {
		t.Fatalf("/api/stats: %v: %s", err, body)
	}
	in := stats.Instance
	if !slices.Equal(in.Listen, []string{e.ws}) || "http://"+in.Admin != e.admin || in.Version != versionLine() {
		t.Errorf("/api/stats names the instance %+v, want listen [%s], admin %s, version %q", in, e.ws, e.admin, versionLine())
	}

	// The server's history: one sample a second since the admin listener
	// started, the client's connection in the newest.
	const past = 3
	type historyDoc struct {
		Interval int64 `json:"interval"`
		Samples  []struct {
			Time        int64          `json:"time"`
			Connections map[string]int `json:"connections"`
			Requests    uint64         `json:"requests"`
		} `json:"samples"`
	}
	var h historyDoc
	poll.Until(t, edgeWait, fmt.Sprintf("%d samples in /api/history", past), func() (bool, string) {
		status, body := e.get("/api/history")
		h = historyDoc{}
		if status != http.StatusOK || json.Unmarshal([]byte(body), &h) != nil {
			return false, fmt.Sprintf("%d %s", status, body)
		}
		return len(h.Samples) >= past && h.Samples[len(h.Samples)-1].Requests > 0, body
	})
	if h.Interval != 1000 {
		t.Errorf("/api/history interval %d, want 1000", h.Interval)
	}
	for i := 1; i < len(h.Samples); i++ {
		if d := h.Samples[i].Time - h.Samples[i-1].Time; d < 500 || d > 1500 {
			t.Errorf("/api/history samples %d and %d are %d ms apart, want about 1000", i-1, i, d)
		}
	}
	if last := h.Samples[len(h.Samples)-1]; last.Connections["ws"] != 1 {
		t.Errorf("/api/history's newest sample has %v connections, want the client's", last.Connections)
	}

	// A page opened now draws those samples at once and names the edge.
	page := dashboardtest.Open(t, e.admin+"/") // skips without chromium
	s := page.WaitFor(30*time.Second, "a live render", dashboardtest.Live)
	if s.Points["connections"] < past+1 {
		t.Errorf("a page opened after %d samples draws %d points of connections: %s", len(h.Samples), s.Points["connections"], s)
	}
	host := strings.TrimSuffix(strings.TrimPrefix(e.ws, "ws://"), "/")
	if s.Instance["listen"] != e.ws || !strings.HasPrefix(s.Title, host+" \u00b7 edge") || s.Instance["version"] != versionLine() {
		t.Errorf("the page names the instance %v with the title %q, want %s first", s.Instance, s.Title, host)
	}
	if errs := page.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}

	// The sampler stops with edge (no test of this package runs in
	// parallel, so any sampler left is this edge's).
	stop()
	<-loaded
	e.stop()
	if err := e.wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	poll.Until(t, edgeWait, "the history sampler's goroutine gone", func() (bool, string) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return !strings.Contains(stacks, "metrics.(*Metrics).sampler"), stacks
	})
}
