package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
)

// holdingService is a JSON-RPC service over HTTP that holds every
// notification's request open until release is closed (or the request is
// aborted), answers "sum" at once, and counts its connections: open now and
// the most open at once (from http.Server.ConnState).
type holdingService struct {
	url     string
	release chan struct{}
	held    atomic.Int64 // notifications that arrived
	stop    func()       // closes release (once)

	mu         sync.Mutex
	open, peak int // guarded by mu: server-side connections
}

func startHoldingService(t *testing.T) *holdingService {
	t.Helper()
	s := &holdingService{release: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve), ConnState: s.connState}
	go srv.Serve(ln)
	var once sync.Once
	s.stop = func() { once.Do(func() { close(s.release) }) }
	t.Cleanup(func() { s.stop(); srv.Close() })
	s.url = "http://" + ln.Addr().String() + "/rpc"
	return s
}

func (s *holdingService) connState(_ net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.open++
		s.peak = max(s.peak, s.open)
	case http.StateClosed, http.StateHijacked:
		s.open--
	}
}

func (s *holdingService) conns() (open, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open, s.peak
}

func (s *holdingService) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params []int           `json:"params"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.ID == nil {
		s.held.Add(1)
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	n := 0
	for _, x := range req.Params {
		n += x
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%d}`, req.ID, n)
}

// TestHTTPNotificationsBounded (issue 19 item 4): under --profile jsonrpc
// a burst of notifications to an http upstream that holds its requests
// open takes at most --upstream-http-conns requests, connections and
// net/http goroutines; the rest are dropped, counted and logged once per
// burst, and a call over the bound is answered SERVER_BUSY at once.
// Before, each notification started a goroutine and a connection of its
// own: 2,000 notifications, 2,000 connections at the service.
func TestHTTPNotificationsBounded(t *testing.T) {
	const notes, bound = 2000, 16
	svc := startHoldingService(t)
	logs := &testgw.Buffer{}
	p := startProxyWith(t, upstream.Config{HTTPConns: bound, Logger: testLogger(logs)},
		[]string{"svc=" + svc.url}, nil, func(c *gwConfig) { c.rpc.Profile = rpc.ProfileJSONRPC })
	u := p.set.Upstreams()[0]
	c := dial(t, p.gateway)
	c.sendText(`{"jsonrpc":"2.0","id":0,"method":"sum","params":[1,1]}`)
	c.expectText(`{"jsonrpc":"2.0","id":0,"result":2}`)
	runtime.GC()
	base := runtime.NumGoroutine()

	var burst bytes.Buffer
	for i := range notes {
		burst.Write(textFrame(fmt.Sprintf(`{"jsonrpc":"2.0","method":"note","params":[%d]}`, i)))
	}
	c.write(burst.Bytes())
	// Every notification has reached the service or been dropped.
	poll.Until(t, pollTimeout, "every notification held or dropped", func() (bool, string) {
		held, dropped := svc.held.Load(), u.Stats().NotificationsDropped
		return held+int64(dropped) == notes, fmt.Sprintf("held %d, dropped %d", held, dropped)
	})
	goroutines := runtime.NumGoroutine() - base
	open, peak := svc.conns()
	held, dropped := svc.held.Load(), u.Stats().NotificationsDropped
	t.Logf("%d notifications, --upstream-http-conns %d: %d held by the service, %d dropped; %d connections at the service (peak %d); %d more goroutines in the process",
		notes, bound, held, dropped, open, peak, goroutines)
	if peak > bound || held != bound || dropped != notes-bound {
		t.Fatalf("peak %d connections at the service, %d notifications held, %d dropped; want at most %d, %d and %d", peak, held, dropped, bound, bound, notes-bound)
	}
	// Per request in flight: the caller's goroutine in http.go, the
	// connection's read and write loops in net/http, the service's
	// connection goroutine and its background read; plus a margin.
	if limit := 6*bound + 20; goroutines > limit {
		t.Fatalf("%d more goroutines with the burst held, want at most %d", goroutines, limit)
	}
	if n := strings.Count(logs.String(), "notifications dropped"); n < 1 || n > 3 {
		t.Fatalf("logged the drops %d times, want once per burst (1 to 3 for one burst on a slow machine):\n%s", n, logs.String())
	}

	// A call over the bound is refused at once; nothing queues.
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"sum","params":[2,3]}`)
	c.expectText(serverBusy(`1`))
	if n := u.Stats().Outcomes[busyOutcome(t)]; n != 1 {
		t.Fatalf("edge_upstream_requests_total{outcome=busy} %d, want 1", n)
	}

	// Released, the requests free their slots: calls go through again.
	svc.stop()
	id := 1
	poll.Until(t, pollTimeout, "a call answered once the service released the notifications", func() (bool, string) {
		id++
		c.sendText(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sum","params":[2,3]}`, id))
		got := c.readText()
		return got == fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":5}`, id), got
	})
	if _, peak := svc.conns(); peak > bound {
		t.Fatalf("peak %d connections at the service, want at most %d", peak, bound)
	}
}

// busyOutcome is the index of the "busy" label in upstream.Stats.Outcomes.
func busyOutcome(t *testing.T) int {
	for i := range upstream.NumOutcomes {
		if upstream.OutcomeLabel(i) == "busy" {
			return i
		}
	}
	t.Fatal("no busy outcome among the upstream outcomes")
	return -1
}
