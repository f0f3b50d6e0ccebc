package dashboard

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/dashboard/dashboardtest"
)

// docsPNG, when set, makes TestDocsScreenshot write the README's screenshot:
//
//	go test ./dashboard -run TestDocsScreenshot -docs-png "$PWD/docs/dashboard.png"
var docsPNG = flag.String("docs-png", "", "write a screenshot of the dashboard with 4 minutes of fake history to this file")

// serve starts a test server on 127.0.0.1 with the dashboard under prefix
// ("" or "/admin") and the fake's api/stats and api/history beside it, as the
// admin listener does, and returns the page's URL.
func serve(t *testing.T, prefix string, fake *fakeStats) string {
	t.Helper()
	inner := http.NewServeMux()
	inner.Handle("/", Handler())
	inner.Handle("GET /api/stats", fake)
	inner.Handle("GET /api/history", fake.history())
	mux := http.NewServeMux()
	if prefix == "" {
		mux = inner
	} else {
		mux.Handle(prefix+"/", http.StripPrefix(prefix, inner))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + prefix + "/"
}

// loadDashboard loads the dashboard at baseURL in headless Chromium, waits
// until it shows 42 connections and a non-zero request rate, and returns the
// path of its screenshot (in the test's temporary directory).
func loadDashboard(t *testing.T, baseURL string) (screenshotPath string) {
	t.Helper()
	return dashboardtest.Load(t, baseURL, 10*time.Second, func(s dashboardtest.Snapshot) bool {
		conns, _ := s.Value("connections")
		return dashboardtest.Live(s) && conns == 42
	})
}

// TestDashboardInBrowser: headless Chromium shows the live connection count
// and a request rate computed from two polls, with no error on the page.
func TestDashboardInBrowser(t *testing.T) {
	url := serve(t, "", newFakeStats(true))
	shot := loadDashboard(t, url)
	if info, err := os.Stat(shot); err != nil || info.Size() == 0 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
}

// TestDashboardDrawsServerHistory: a page opened on a server that kept 40
// samples (api/history) draws them at its first render, with the first
// poll's after them: the charts' lines have 41 points (the request rate 40:
// the oldest sample has none), not the one point of the poll alone. The
// header and the title name the instance: its listen address first.
func TestDashboardDrawsServerHistory(t *testing.T) {
	const past = 40
	fake := newFakeStats(true)
	fake.pastN = past
	page := dashboardtest.Open(t, serve(t, "", fake))
	s := page.WaitFor(10*time.Second, "the first live render", func(s dashboardtest.Snapshot) bool { return s.State == "live" })
	t.Logf("first live render: %s", s)
	if s.Samples != past+s.Updates {
		t.Errorf("the page holds %d samples after %d polls, want %d", s.Samples, s.Updates, past+s.Updates)
	}
	want := map[string]int{"connections": past + 1, "latency": past + 1, "in-flight": past + 1, "subscriptions": past + 1, "requests": past}
	for chart, n := range want {
		if got := s.Points[chart]; got < n {
			t.Errorf("chart %s draws %d points at the first render, want at least %d", chart, got, n)
		}
	}
	wantInstance := map[string]string{
		"name":    "127.0.0.1:8080",
		"listen":  "ws://127.0.0.1:8080/ tcp://127.0.0.1:9000",
		"admin":   fakeInstance.Admin,
		"version": fakeInstance.Version,
	}
	for k, v := range wantInstance {
		if s.Instance[k] != v {
			t.Errorf("the header's %s shows %q, want %q", k, s.Instance[k], v)
		}
	}
	if !strings.HasPrefix(s.Title, "127.0.0.1:8080 \u00b7 edge \u00b7 42 conn") {
		t.Errorf("title %q, want it to start with the listen address, then edge and the connections", s.Title)
	}
	if errs := page.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
}

// TestDashboardBehaviour drives one page behind a path prefix: what each card
// shows, the number formats, and a poll that fails.
func TestDashboardBehaviour(t *testing.T) {
	fake := newFakeStats(true)
	page := dashboardtest.Open(t, serve(t, "/admin", fake))
	s := page.WaitFor(10*time.Second, "a live render with rates", dashboardtest.Live)

	t.Run("cards", func(t *testing.T) {
		want := map[string]string{"connections": "42", "connections-ws": "40", "connections-ndjson": "2"}
		for name, text := range want {
			if got := s.Text(name); got != text {
				t.Errorf("%s shows %q, want %q", name, got, text)
			}
		}
		for _, name := range []string{"requests-rate", "requests-total", "latency-p50", "latency-p99", "in-flight",
			"subscriptions", "slow-consumers", "slow-consumers-rate", "outcome-error", "closes-1000", "closes-1008"} {
			if _, ok := s.Value(name); !ok {
				t.Errorf("%s shows no value (%q)", name, s.Text(name))
			}
		}
		health := map[string]string{}
		for _, u := range s.Upstreams {
			health[u.Name] = u.Health
		}
		if health["accounts"] != "up" || health["search"] != "down" {
			t.Errorf("upstream health %v, want accounts up and search down", health)
		}
		if errs := page.Errors(); len(errs) > 0 {
			t.Errorf("the page reported errors: %q", errs)
		}
	})

	t.Run("formats", func(t *testing.T) {
		got := dashboardtest.Eval[map[string]string](page, `import("./format.js").then((f) => ({
			"count 42": f.count(42), "count 1234": f.count(1234), "count 999999": f.count(999999),
			"count 2.5M": f.count(2.5e6), "rate 0.5": f.rate(0.5), "rate 9200": f.rate(9200),
			"latency 250us": f.latency(0.00025), "latency 4.2ms": f.latency(0.0042),
			"latency 120ms": f.latency(0.12), "latency 1.5s": f.latency(1.5), "none": f.count(null),
		}))`)
		want := map[string]string{
			"count 42": "42", "count 1234": "1.23k", "count 999999": "1M", "count 2.5M": "2.5M",
			"rate 0.5": "0.5/s", "rate 9200": "9.2k/s", "latency 250us": "250 µs", "latency 4.2ms": "4.2 ms",
			"latency 120ms": "120 ms", "latency 1.5s": "1.5 s", "none": "—",
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %q, want %q", k, got[k], w)
			}
		}
	})

	t.Run("disconnected", func(t *testing.T) {
		fake.setDown(true)
		down := page.WaitFor(10*time.Second, "the disconnected state", func(s dashboardtest.Snapshot) bool {
			return s.State == "disconnected"
		})
		if got := down.Text("connections"); got != "42" {
			t.Errorf("disconnected, connections shows %q, want the last value 42", got)
		}
		lines := dashboardtest.Eval[int](page, `document.querySelectorAll('svg[data-chart="connections"] path.series').length`)
		if lines == 0 {
			t.Errorf("disconnected, the connections chart lost its history")
		}
		fake.setDown(false)
		page.WaitFor(10*time.Second, "live again", func(s dashboardtest.Snapshot) bool { return s.State == "live" })
	})
}

// TestDocsScreenshot writes docs/dashboard.png when -docs-png is given: the
// page opened on a server that kept 4 minutes of a plausible fake load, so
// that its charts show lines.
func TestDocsScreenshot(t *testing.T) {
	if *docsPNG == "" {
		t.Skip("write the README's screenshot with -docs-png FILE")
	}
	fake := newFakeStats(false)
	fake.pastN = 240 // 4 minutes the server kept, drawn at once
	page := dashboardtest.Open(t, serve(t, "", fake))
	page.WaitFor(10*time.Second, "a live render", dashboardtest.Live)
	path, err := filepath.Abs(*docsPNG)
	if err != nil {
		t.Fatal(err)
	}
	page.Screenshot(path)
	t.Logf("wrote %s", path)
}
