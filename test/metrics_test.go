package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/metrics"
	"github.com/openengine/edge/upstream"
)

// scrape is one /metrics scrape, parsed by the Prometheus text parser.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics gets url (a /metrics endpoint) over HTTP and parses it.
func scrapeMetrics(t *testing.T, url string) scrape {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET %s: %s, Content-Type %q", url, res.Status, res.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return mfs
}

// value returns the value of the sample of family name with exactly the
// labels given as name=value pairs, and whether there is one. A histogram
// sample's value is its count.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	mf := s[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			found := false
			for _, want := range labels {
				if want == l.GetName()+"="+l.GetValue() {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// metricCheck is one expected sample.
type metricCheck struct {
	name   string
	labels []string
	want   float64
}

// TestMetricsAfterWorkload: a scripted workload through a gateway with
// memory methods and an upstream (stopped before the last call), then /metrics scraped over HTTP and parsed with the Prometheus
// text parser shows exactly what happened: requests by method and outcome
// (ok, error, cancelled with $/cancelRequest, busy, timeout and unavailable
// through the upstreams), their duration histograms, closes by code (1000
// from a client's close and an NDJSON EOF, 1006 a dropped TCP connection,
// 1008 slow consumer, 1009 too big), rejected upgrades, a subscription
// ended SLOW_CONSUMER, the events delivered, the live subscriptions, and the
// connections back to zero once the clients left. /api/stats agrees.
func TestMetricsAfterWorkload(t *testing.T) {
	// The upstream "up" is an edge over WebSocket (the cancel of a
	// timed-out call is forwarded); it is stopped later for an
	// unavailable call.
	u := startUpstreamEdge(t)
	p := startProxyWith(t, upstream.Config{Conns: 1, Timeout: 300 * time.Millisecond}, []string{"up=" + u.ws},
		[]string{"edge/sleep=up", "plan=up", "stop=up", "*=memory"}, withNDJSON, func(c *gwConfig) {
			c.rpc.MaxConnTasks = 2
			c.rpc.SubscriptionBufferBytes = 1024
			c.loop.OutboundSoftBytes = 8 << 10
			c.loop.OutboundHardBytes = 16 << 10
			c.loop.MaxMessageBytes = 32 << 10
		})
	gw, set := p.gateway, p.set
	m := metrics.New(gw.srv, gw.rpc, set)
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.Handle("/api/stats", m.StatsHandler())
	mux.Handle("/api/history", m.HistoryHandler())
	m.SetInstance(metrics.Instance{Listen: []string{"ws://" + gw.srv.Addr().String() + "/"}, Admin: "127.0.0.1:9090", Version: "edge test"})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	// Rejected upgrades: another path (404) and no upgrade at all (400).
	for _, req := range []string{
		upgradeRequest(gw.addr, "/elsewhere", "dGhlIHNhbXBsZSBub25jZQ=="),
		"GET / HTTP/1.1\r\nHost: " + gw.addr + "\r\n\r\n",
	} {
		conn := dialTCP(t, gw)
		io.WriteString(conn, req)
		conn.SetReadDeadline(time.Now().Add(readTimeout))
		io.Copy(io.Discard, conn) // the answer, then the server closes
		conn.Close()
	}

	a := dial(t, gw)
	// ok: 3 edge/echo; error: 2 unknown methods.
	a.echo()
	a.echo()
	a.echo()
	a.sendText(`{"jsonrpc":"2.0","id":"n1","method":"nope","params":{}}`)
	a.expectText(`{"jsonrpc":"2.0","id":"n1","error":{"code":-32601,"message":"Method not found"}}`)
	a.sendText(`{"jsonrpc":"2.0","id":"n2","method":"nope","params":{}}`)
	a.expectText(`{"jsonrpc":"2.0","id":"n2","error":{"code":-32601,"message":"Method not found"}}`)
	// cancelled: an edge/gate cancelled with $/cancelRequest.
	a.sendText(gate("10", "c"))
	gw.waitGate("c", 1)
	a.sendText(cancel("10"))
	gw.waitTasks(0)
	// busy: both slots held by gates, then an edge/echo; the gates answer ok.
	a.sendText(gate("20", "b"))
	a.sendText(gate("21", "b"))
	gw.waitGate("b", 2)
	a.sendText(`{"jsonrpc":"2.0","id":22,"method":"edge/echo","params":{}}`)
	a.expectText(serverBusy("22"))
	gw.openGate("b")
	a.expectTexts(gateResult("20", "b"), gateResult("21", "b"))
	gw.waitTasks(0)
	// Through the upstreams: ok, the upstream's error, timeout, unavailable.
	a.sendText(`{"jsonrpc":"2.0","id":30,"method":"edge/sleep","params":{"ms":0}}`)
	a.expectText(`{"jsonrpc":"2.0","id":30,"result":{"sleptMs":0}}`)
	a.sendText(`{"jsonrpc":"2.0","id":31,"method":"plan","params":{}}`)
	if r := parseResponse(t, a.readText()); r.Error == nil || string(r.ID) != "31" {
		t.Fatalf("plan through the upstream: want an error, got %+v", r)
	}
	a.sendText(`{"jsonrpc":"2.0","id":32,"method":"edge/sleep","params":{"ms":60000}}`)
	a.expectText(`{"jsonrpc":"2.0","id":32,"error":{"code":-32000,"message":"Upstream timeout","data":{"code":"UPSTREAM_TIMEOUT"}}}`)
	testgw.Stop(t, u.gw.Srv)
	poll.Until(t, pollTimeout, "upstream up disconnected", func() (bool, string) {
		up, total := set.Upstreams()[0].Connected()
		return up == 0, fmt.Sprintf("%d of %d", up, total)
	})
	a.sendText(`{"jsonrpc":"2.0","id":33,"method":"stop","params":{}}`)
	a.expectText(`{"jsonrpc":"2.0","id":33,"error":{"code":-32000,"message":"Upstream unavailable","data":{"code":"UPSTREAM_UNAVAILABLE"}}}`)
	// A subscription of 3 events, ended "done".
	a.sendText(`{"jsonrpc":"2.0","id":40,"method":"edge/ticks","params":{"count":3,"intervalMs":0}}`)
	a.expectText(`{"jsonrpc":"2.0","id":40,"result":{"subscriptionId":"s1"}}`)
	for i := 1; i <= 3; i++ {
		a.expectText(fmt.Sprintf(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"%d","seq":%d}}`, i, i))
	}
	a.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"3"}}`)
	// A slow consumer subscription: an event larger than its buffer.
	a.sendText(`{"jsonrpc":"2.0","id":41,"method":"edge/topic","params":{"name":"slow"}}`)
	a.expectText(`{"jsonrpc":"2.0","id":41,"result":{"subscriptionId":"s2"}}`)
	a.sendText(`{"jsonrpc":"2.0","id":42,"method":"edge/publish","params":{"name":"slow","data":"` + strings.Repeat("x", 2000) + `"}}`)
	a.expectTexts(`{"jsonrpc":"2.0","id":42,"result":{"delivered":0}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s2","reason":"SLOW_CONSUMER"}}`)

	// A live subscription on another connection.
	b := dial(t, gw)
	b.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/topic","params":{"name":"live"}}`)
	b.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)
	nd := dialNDRaw(t, gw)
	nd.echo()

	s := scrapeMetrics(t, hs.URL+"/metrics")
	checkMetrics(t, s, []metricCheck{
		{"edge_connections", []string{"transport=ws"}, 2},
		{"edge_connections", []string{"transport=ndjson"}, 1},
		{"edge_subscriptions", nil, 1},
	})

	// 1008: an answer larger than the hard cap.
	c := dial(t, gw)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"p":"` + strings.Repeat("x", 20<<10) + `"}}`)
	if reason := c.expectClose(ws.StatusPolicyViolation); reason != "slow consumer" {
		t.Fatalf("close reason %q", reason)
	}
	c.expectEOF()
	c.conn.Close()
	// 1009: a message over --max-message-bytes.
	d := dial(t, gw)
	d.write(frame(true, ws.OpText, make([]byte, 40<<10), true, 0))
	d.expectClose(ws.StatusMessageTooBig)
	d.conn.Close()
	// 1000: the client closes; 1006: a client drops its TCP connection;
	// NDJSON: EOF.
	a.sendFrame(true, ws.OpClose, closeBody(1000, ""), true)
	a.expectClose(1000)
	a.expectEOF()
	a.conn.Close()
	b.conn.Close()
	nd.conn.Close()

	poll.Until(t, pollTimeout, "every connection gone and nothing in flight", func() (bool, string) {
		s = scrapeMetrics(t, hs.URL+"/metrics")
		nws, _ := s.value("edge_connections", "transport=ws")
		nnd, _ := s.value("edge_connections", "transport=ndjson")
		fl, _ := s.value("edge_requests_in_flight")
		sub, _ := s.value("edge_subscriptions")
		closes, _ := s.value("edge_connections_closed_total", "code=1006")
		return nws == 0 && nnd == 0 && fl == 0 && sub == 0 && closes == 1,
			fmt.Sprintf("ws %v ndjson %v in flight %v subscriptions %v closes 1006 %v", nws, nnd, fl, sub, closes)
	})
	var want []metricCheck
	add := func(name string, v float64, labels ...string) {
		want = append(want, metricCheck{name, labels, v})
	}
	req := func(method, outcome string, v float64) {
		add("edge_requests_total", v, "method="+method, "outcome="+outcome)
	}
	for _, o := range []string{"ok", "error", "cancelled", "busy", "rate_limited", "timeout", "unavailable"} {
		n := map[string]map[string]float64{
			"edge/echo":    {"ok": 5, "busy": 1},
			"other":        {"error": 2},
			"edge/gate":    {"ok": 2, "cancelled": 1},
			"edge/sleep":   {"ok": 1, "timeout": 1},
			"plan":         {"error": 1},
			"stop":         {"unavailable": 1},
			"edge/ticks":   {"ok": 1},
			"edge/topic":   {"ok": 2},
			"edge/publish": {"ok": 1},
		}
		for method, counts := range n {
			req(method, o, counts[o])
		}
	}
	// Durations: every answered request admitted and dispatched; not the
	// refused (busy, not found) nor the cancelled ones.
	for method, n := range map[string]float64{"edge/echo": 5, "edge/gate": 2, "edge/sleep": 2, "plan": 1, "stop": 1,
		"edge/ticks": 1, "edge/topic": 2, "edge/publish": 1, "other": 0} {
		add("edge_request_duration_seconds", n, "method="+method)
	}
	for _, tr := range []string{"ws", "ndjson"} {
		add("edge_connections", 0, "transport="+tr)
	}
	add("edge_connections_accepted_total", 6, "transport=ws") // a, b, c, d and the two rejected
	add("edge_connections_accepted_total", 1, "transport=ndjson")
	for _, r := range []string{"bad_request", "not_found"} {
		add("edge_connections_rejected_total", 1, "reason="+r)
	}
	for _, r := range []string{"header_too_large", "upgrade_required", "handshake_timeout", "handshake_aborted", "origin", "limit",
		"unauthorized", "draining", "accept_paused", "tls_handshake", "handshake_pool_full", "proxy_header", "proxy_untrusted"} {
		add("edge_connections_rejected_total", 0, "reason="+r)
	}
	for code, n := range map[string]float64{"1000": 2, "1001": 0, "1002": 0, "1003": 0, "1006": 1, "1007": 0, "1008": 1, "1009": 1, "4401": 0, "other": 0} {
		add("edge_connections_closed_total", n, "code="+code)
	}
	add("edge_requests_in_flight", 0)
	add("edge_subscriptions", 0)
	add("edge_events_delivered_total", 3)
	add("edge_slow_consumers_total", 1, "kind=subscription")
	add("edge_slow_consumers_total", 1, "kind=connection")
	add("edge_connections_paused", 0)
	add("edge_outbound_pending_bytes", 0)
	add("edge_upstream_connections_up", 0, "upstream=up")
	add("edge_upstream_connections", 1, "upstream=up")
	for _, o := range []string{"ok", "error", "timeout", "unavailable"} {
		add("edge_upstream_requests_total", 1, "upstream=up", "outcome="+o)
	}
	add("edge_upstream_requests_total", 0, "upstream=up", "outcome=cancelled")
	add("edge_upstream_requests_total", 0, "upstream=up", "outcome=busy")
	add("edge_upstream_notifications_dropped_total", 0, "upstream=up")
	add("edge_upstream_slow_closed_total", 0, "upstream=up")
	// The unavailable call was never sent: no duration.
	add("edge_upstream_request_duration_seconds", 3, "upstream=up")
	add("edge_metrics_stale_loops", 0)
	add("edge_log_dropped_total", 0)
	checkMetrics(t, s, want)
	// No series of a method that had no request.
	if _, ok := s.value("edge_requests_total", "method=get", "outcome=ok"); ok {
		t.Errorf("a series for method get, which had no request")
	}
	// The timed-out call's duration is at least the upstream timeout.
	for _, mt := range s["edge_request_duration_seconds"].GetMetric() {
		if mt.GetLabel()[0].GetValue() == "edge/sleep" && mt.GetHistogram().GetSampleSum() < 0.3 {
			t.Errorf("edge/sleep durations sum to %vs, want at least the 0.3s timeout", mt.GetHistogram().GetSampleSum())
		}
	}
	for _, f := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if s[f] == nil {
			t.Errorf("no %s: want the Go runtime and process metrics", f)
		}
	}

	// The dashboard's snapshot.
	res, err := http.Get(hs.URL + "/api/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	type statsDoc struct {
		Instance      *metrics.Instance  `json:"instance"`
		Time          int64              `json:"time"`
		Connections   map[string]int     `json:"connections"`
		Requests      int                `json:"requests"`
		Outcomes      map[string]int     `json:"outcomes"`
		Latency       map[string]float64 `json:"latency"`
		InFlight      int                `json:"inFlight"`
		Subscriptions int                `json:"subscriptions"`
		SlowConsumers int                `json:"slowConsumers"`
		Closes        map[string]int     `json:"closes"`
		Upstreams     []struct {
			Name  string `json:"name"`
			Up    int    `json:"up"`
			Total int    `json:"total"`
		} `json:"upstreams"`
	}
	var js statsDoc
	dec := json.NewDecoder(res.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&js); err != nil {
		t.Fatalf("/api/stats: %v", err)
	}
	if d := time.Since(time.UnixMilli(js.Time)); d < 0 || d > time.Minute {
		t.Errorf("time %d is %v off", js.Time, d)
	}
	if in := js.Instance; in == nil || len(in.Listen) != 1 || in.Admin != "127.0.0.1:9090" || in.Version != "edge test" {
		t.Errorf("/api/stats instance %+v", in)
	}
	counts := func(js *statsDoc) string {
		return fmt.Sprintf("%v %d %v %d %d %d %v %+v", js.Connections, js.Requests, js.Outcomes, js.InFlight,
			js.Subscriptions, js.SlowConsumers, js.Closes, js.Upstreams)
	}
	got := counts(&js)
	want2 := "map[ndjson:0 ws:0] 18 map[busy:1 cancelled:1 error:3 ok:12 rate_limited:0 timeout:1 unavailable:1] 0 0 2 " +
		"map[1000:2 1001:0 1002:0 1003:0 1006:1 1007:0 1008:1 1009:1 4401:0 other:0] [{Name:up Up:0 Total:1}]"
	if got != want2 {
		t.Errorf("/api/stats:\ngot  %s\nwant %s", got, want2)
	}
	// 15 requests were timed since start (every answered one but the
	// refusals: busy, not found); the timed-out one (>= 0.3 s) holds the
	// 99th percentile, not the median.
	if p50, p99 := js.Latency["p50"], js.Latency["p99"]; !(p50 > 0 && p50 < 0.3 && p99 >= 0.25) {
		t.Errorf("latency p50 %v p99 %v: want p50 below the timeout and p99 at it", p50, p99)
	}

	// The history: its sampler's first sample, taken at Start, has the
	// same counts, and the instance.
	m.Start()
	t.Cleanup(m.Close)
	var h struct {
		Instance metrics.Instance `json:"instance"`
		Interval int64            `json:"interval"`
		Samples  []statsDoc       `json:"samples"`
	}
	poll.Until(t, 10*time.Second, "a sample in /api/history", func() (bool, string) {
		res, err := http.Get(hs.URL + "/api/history")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		dec := json.NewDecoder(res.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&h); err != nil {
			t.Fatalf("/api/history: %v", err)
		}
		return len(h.Samples) > 0, fmt.Sprintf("%d samples", len(h.Samples))
	})
	if h.Instance.Version != "edge test" || h.Interval != 1000 || h.Samples[0].Instance != nil {
		t.Errorf("/api/history: instance %+v, interval %d, the sample's own instance %+v", h.Instance, h.Interval, h.Samples[0].Instance)
	}
	if got := counts(&h.Samples[0]); got != want2 {
		t.Errorf("/api/history's first sample:\ngot  %s\nwant %s", got, want2)
	}
}

// checkMetrics requires every sample of want in s.
func checkMetrics(t *testing.T, s scrape, want []metricCheck) {
	t.Helper()
	for _, w := range want {
		got, ok := s.value(w.name, w.labels...)
		switch {
		case !ok:
			t.Errorf("%s%v: missing", w.name, w.labels)
		case got != w.want:
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.want)
		}
	}
}

// TestMetricsScrapedUnderLoad: scrapes taken while clients pipeline
// requests on both event loops read the loops' counters through the
// snapshot task, not behind their backs (go test -race sees every scrape
// against the loops' writes), never go backwards, and once the load has
// been answered count exactly what was sent.
func TestMetricsScrapedUnderLoad(t *testing.T) {
	const clients, rounds, window = 4, 10, 250
	const perClient = rounds * window
	gw := startGateway(t)
	hs := httptest.NewServer(metrics.New(gw.srv, gw.rpc, nil).Handler())
	t.Cleanup(hs.Close)
	done := make(chan struct{})
	errs := make(chan error, clients)
	for range clients {
		c := dial(t, gw)
		reqs, _ := pipelinedEchoes(window, 16)
		go func() {
			errs <- func() error {
				for range rounds {
					c.conn.SetWriteDeadline(time.Now().Add(readTimeout))
					if _, err := c.conn.Write(reqs); err != nil {
						return err
					}
					for range window {
						if _, _, err := c.readFrame(readTimeout); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}()
	}
	go func() {
		for range clients {
			if err := <-errs; err != nil {
				t.Errorf("client: %v", err)
			}
		}
		close(done)
	}()
	last := 0.0
	for scrapes := 0; ; scrapes++ {
		s := scrapeMetrics(t, hs.URL+"/metrics")
		n, _ := s.value("edge_requests_total", "method=edge/echo", "outcome=ok")
		if n < last {
			t.Fatalf("scrape %d: %v echo requests, fewer than the %v before", scrapes, n, last)
		}
		last = n
		select {
		case <-done:
			t.Logf("%d scrapes during the load", scrapes+1)
			s = scrapeMetrics(t, hs.URL+"/metrics")
			checkMetrics(t, s, []metricCheck{
				{"edge_requests_total", []string{"method=edge/echo", "outcome=ok"}, clients * perClient},
				{"edge_request_duration_seconds", []string{"method=edge/echo"}, clients * perClient},
				{"edge_connections_accepted_total", []string{"transport=ws"}, clients},
				{"edge_metrics_stale_loops", nil, 0},
			})
			return
		default:
		}
	}
}
