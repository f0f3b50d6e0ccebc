package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
)

// wait bounds one awaited effect.
const wait = 5 * time.Second

// TestMain fails the run if a server's goroutine outlives the tests.
func TestMain(m *testing.M) { testgw.Main(m) }

// client has no keep-alive, so that no idle connection holds a server's
// shutdown, and a bound on each request.
var client = &http.Client{Timeout: wait, Transport: &http.Transport{DisableKeepAlives: true}}

// start starts s on 127.0.0.1:0 and shuts it down in t.Cleanup.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	testgw.Watchdog(t, 30*time.Second)
	cfg.Listen = "127.0.0.1:0"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, s)
}

func startServer(t *testing.T, s *Server) *Server {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

// do sends method path to s and returns the status, Content-Type and body.
func do(t *testing.T, s *Server, method, path string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.Addr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("Content-Type"), string(body)
}

// TestEndpoints: what each path answers, with the gateway ready and not,
// with pprof and without.
func TestEndpoints(t *testing.T) {
	var reasons atomic.Pointer[[]string]
	reasons.Store(&[]string{})
	ready := func() []string { return *reasons.Load() }
	plain := start(t, Config{Ready: ready})
	withPprof := start(t, Config{Pprof: true})
	tests := []struct {
		name     string
		s        *Server
		reasons  []string
		method   string
		path     string
		status   int
		body     string // exact, unless empty
		contains string
	}{
		{name: "healthz", s: plain, method: "GET", path: "/healthz", status: 200, body: "ok\n"},
		{name: "healthz HEAD", s: plain, method: "HEAD", path: "/healthz", status: 200},
		{name: "healthz POST", s: plain, method: "POST", path: "/healthz", status: 405},
		{name: "healthz while not ready", s: plain, reasons: []string{"draining"}, method: "GET", path: "/healthz", status: 200, body: "ok\n"},
		{name: "readyz ready", s: plain, method: "GET", path: "/readyz", status: 200, body: `{"ready":true}` + "\n"},
		{name: "readyz draining", s: plain, reasons: []string{"draining", "upstream engine: 0 of 2 connections up"}, method: "GET", path: "/readyz", status: 503,
			body: `{"ready":false,"reasons":["draining","upstream engine: 0 of 2 connections up"]}` + "\n"},
		{name: "readyz without Ready", s: withPprof, method: "GET", path: "/readyz", status: 200, body: `{"ready":true}` + "\n"},
		{name: "no dashboard yet", s: plain, method: "GET", path: "/", status: 404},
		{name: "no metrics yet", s: plain, method: "GET", path: "/metrics", status: 404},
		{name: "no pprof", s: plain, method: "GET", path: "/debug/pprof/", status: 404},
		{name: "pprof index", s: withPprof, method: "GET", path: "/debug/pprof/", status: 200, contains: "goroutine"},
		{name: "pprof heap", s: withPprof, method: "GET", path: "/debug/pprof/heap?debug=1", status: 200, contains: "heap profile"},
		{name: "pprof cmdline", s: withPprof, method: "GET", path: "/debug/pprof/cmdline", status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.reasons
			if r == nil {
				r = []string{}
			}
			reasons.Store(&r)
			status, ctype, body := do(t, tt.s, tt.method, tt.path)
			if status != tt.status {
				t.Fatalf("status %d, want %d; body %q", status, tt.status, body)
			}
			if tt.body != "" && body != tt.body {
				t.Errorf("body %q, want %q", body, tt.body)
			}
			if !strings.Contains(body, tt.contains) {
				t.Errorf("body %q lacks %q", body, tt.contains)
			}
			if tt.path == "/readyz" {
				var v struct {
					Ready bool `json:"ready"`
				}
				if err := json.Unmarshal([]byte(body), &v); err != nil || ctype != "application/json" {
					t.Errorf("readyz: %q (%v), Content-Type %q", body, err, ctype)
				}
			}
		})
	}
}

// TestHandle: a handler registered before Start is served and listed by
// Patterns; Handle after Start panics.
func TestHandle(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "edge_up 1\n")
	}))
	startServer(t, s)
	if status, _, body := do(t, s, "GET", "/metrics"); status != 200 || body != "edge_up 1\n" {
		t.Errorf("/metrics: %d %q", status, body)
	}
	if got, want := s.Patterns(), []string{"GET /healthz", "GET /readyz", "GET /metrics"}; !slices.Equal(got, want) {
		t.Errorf("Patterns() = %q, want %q", got, want)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("Handle after Start did not panic")
		}
	}()
	s.Handle("GET /late", http.NotFoundHandler())
}

// TestShutdownGraceful: Shutdown stops accepting at once, lets a request
// being served finish and returns once it has, with the server's goroutine
// gone (TestMain checks).
func TestShutdownGraceful(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	s, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	}))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		res, err := client.Get("http://" + addr + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		got <- result{res.StatusCode, string(b), err}
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		stopped <- s.Shutdown(ctx)
	}()
	poll.Until(t, wait, "the listener to close", func() (bool, string) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil, "still accepting"
	})
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned %v with a request being served", err)
	default:
	}
	close(release)
	if r := <-got; r.err != nil || r.status != 200 || r.body != "done" {
		t.Errorf("the request served during Shutdown got %+v", r)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestLifecycle: New needs an address; Start twice, or after Shutdown, is
// refused; Shutdown without Start, and twice, returns at once; a taken port
// fails Start.
func TestLifecycle(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrNoListen) {
		t.Errorf("New without Listen: %v, want ErrNoListen", err)
	}
	s := start(t, Config{})
	if err := s.Start(); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start: %v, want ErrStarted", err)
	}
	taken, err := New(Config{Listen: s.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	if err := taken.Start(); err == nil {
		t.Errorf("Start on a taken port succeeded")
	}
	never, err := New(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { _ = never.Shutdown(context.Background()) })
	}
	wg.Wait()
	if never.Addr() != nil {
		t.Errorf("Addr of a server never started: %v", never.Addr())
	}
	if err := never.Start(); !errors.Is(err, ErrStarted) {
		t.Errorf("Start after Shutdown: %v, want ErrStarted", err)
	}
}
