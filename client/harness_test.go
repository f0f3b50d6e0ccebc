package client_test

// This file is the harness of the client tests: an in-process edge gateway
// on 127.0.0.1:0 serving WebSocket and NDJSON over TCP, an optional
// recording TCP proxy in front of it, and bounded polls on edge/stats. No
// helper sleeps to wait for an effect: waits are channel receives or polls
// with a deadline, and every test carries a watchdog.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/client"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
)

// Time bounds.
const (
	waitTimeout     = 5 * time.Second  // one awaited effect
	watchdogTimeout = 45 * time.Second // one whole test
)

// TestMain runs the tests, then checks that no client read loop, notify
// goroutine, gateway loop or backend worker outlives them.
func TestMain(m *testing.M) { testgw.Main(m) }

// watchdog fails the whole run if t outlives watchdogTimeout (testgw.Watchdog).
func watchdog(t *testing.T) { testgw.Watchdog(t, watchdogTimeout) }

// transports are the two bindings every test that can runs on.
var transports = []string{"ws", "tcp"}

// gwConfig is what a test may override before its gateway starts.
type gwConfig struct {
	rpc rpc.Config
	// handler, when set, wraps the memory backend.
	handler func(*backend.Memory) backend.Handler
	// tap puts a recording proxy in front of both listeners.
	tap bool
	// loop adjusts the listeners' configuration.
	loop func(*loop.Config)
}

// gateway is one in-process edge with the memory backend.
type gateway struct {
	t      *testing.T
	srv    *loop.Server
	mem    *backend.Memory
	wsURL  string
	tcpURL string
	tap    *tap // nil unless gwConfig.tap
}

// startGateway starts a gateway with WebSocket and NDJSON listeners on
// 127.0.0.1 (testgw.Start), stopped in t.Cleanup. It also arms the watchdog.
func startGateway(t *testing.T, opts ...func(*gwConfig)) *gateway {
	t.Helper()
	watchdog(t)
	var cfg gwConfig
	for _, o := range opts {
		o(&cfg)
	}
	lc := loop.Config{Listen: "127.0.0.1:0", Loops: 2}
	if cfg.loop != nil {
		cfg.loop(&lc)
	}
	g := testgw.Start(t, testgw.Config{Loop: lc, RPC: cfg.rpc, Handler: cfg.handler, NDJSON: true})
	gw := &gateway{t: t, srv: g.Srv, mem: g.Mem}
	wsAddr, tcpAddr := g.Srv.Addr().String(), g.Srv.NDJSONAddr().String()
	if wsAddr == tcpAddr {
		t.Fatalf("NDJSONAddr() %s is the WebSocket listener's address", tcpAddr)
	}
	if cfg.tap {
		gw.tap = newTap(t)
		wsAddr, tcpAddr = gw.tap.front(t, wsAddr), gw.tap.front(t, tcpAddr)
	}
	gw.wsURL, gw.tcpURL = "ws://"+wsAddr+"/", "tcp://"+tcpAddr
	return gw
}

// stop closes every connection and stops the engine (testgw.Stop). Idempotent.
func (gw *gateway) stop() {
	gw.t.Helper()
	testgw.Stop(gw.t, gw.srv)
}

func (gw *gateway) url(transport string) string {
	if transport == "ws" {
		return gw.wsURL
	}
	return gw.tcpURL
}

// dial connects a client over transport; it is closed in t.Cleanup.
func (gw *gateway) dial(transport string, opts *client.Options) *client.Client {
	gw.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := client.Dial(ctx, gw.url(transport), opts)
	if err != nil {
		gw.t.Fatalf("Dial %s: %v", gw.url(transport), err)
	}
	gw.t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitGate polls until n requests wait on gate name.
func (gw *gateway) waitGate(name string, n int) {
	gw.t.Helper()
	poll.Until(gw.t, waitTimeout, fmt.Sprintf("%d waiting on gate %q", n, name), func() (bool, string) {
		got := gw.mem.Waiting(name)
		return got == n, strconv.Itoa(got) + " waiting"
	})
}

// stats is the result of edge/stats.
type stats struct {
	InFlightIDs   int `json:"inFlightIds"`
	Tasks         int `json:"tasks"`
	Subscriptions int `json:"subscriptions"`
	OutboundBytes int `json:"outboundBytes"`
}

// call is Call bounded by waitTimeout.
func call(t *testing.T, c *client.Client, method string, params, result any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := c.Call(ctx, method, params, result)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: no answer within %s", method, waitTimeout)
	}
	return err
}

// waitStats polls edge/stats on c until want holds. edge/stats is answered
// on the loop after every completion already applied, so once it shows a
// worker returned, that worker's answer (if any) has been read by c.
func waitStats(t *testing.T, c *client.Client, what string, want func(stats) bool) {
	t.Helper()
	poll.Until(t, waitTimeout, what, func() (bool, string) {
		var s stats
		if err := call(t, c, "edge/stats", nil, &s); err != nil {
			t.Fatalf("edge/stats: %v", err)
		}
		return want(s), fmt.Sprintf("%+v", s)
	})
}

// idle is the stats of a connection with no work at all.
func idle(s stats) bool { return s.InFlightIDs == 0 && s.Tasks == 0 && s.Subscriptions == 0 }

// recv receives from ch within waitTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("waited %s for %s", waitTimeout, what)
		panic("unreachable")
	}
}

// waitDone waits for the client's connection to end.
func waitDone(t *testing.T, c *client.Client) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("connection still up after %s", waitTimeout)
	}
}

// tap is a TCP proxy that records every byte the gateway sends to its
// clients. Server WebSocket frames are unmasked, so their JSON is readable in
// the recording.
type tap struct {
	mu     sync.Mutex
	down   bytes.Buffer // guarded by mu: gateway -> client bytes, all connections
	closed bool         // guarded by mu
	conns  []io.Closer  // guarded by mu: listeners and connections
	wg     sync.WaitGroup
}

func newTap(t *testing.T) *tap {
	tp := &tap{}
	t.Cleanup(func() {
		tp.mu.Lock()
		tp.closed = true
		for _, c := range tp.conns {
			c.Close()
		}
		tp.mu.Unlock()
		tp.wg.Wait()
	})
	return tp
}

// front listens on 127.0.0.1:0, forwards every connection to backAddr and
// returns the listening address.
func (tp *tap) front(t *testing.T, backAddr string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tap listen: %v", err)
	}
	if !tp.track(ln) {
		t.Fatalf("tap closed")
	}
	tp.wg.Add(1)
	go func() {
		defer tp.wg.Done()
		for {
			front, err := ln.Accept()
			if err != nil {
				return
			}
			back, err := net.Dial("tcp", backAddr)
			if err != nil || !tp.track(front) || !tp.track(back) {
				front.Close()
				if back != nil {
					back.Close()
				}
				continue
			}
			tp.wg.Add(2)
			go func() { defer tp.wg.Done(); tp.pipe(back, front, false) }()
			go func() { defer tp.wg.Done(); tp.pipe(front, back, true) }()
		}
	}()
	return ln.Addr().String()
}

func (tp *tap) track(c io.Closer) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed {
		return false
	}
	tp.conns = append(tp.conns, c)
	return true
}

func (tp *tap) pipe(dst, src net.Conn, record bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if record {
				tp.mu.Lock()
				tp.down.Write(buf[:n])
				tp.mu.Unlock()
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// count returns how many times b occurs in what the gateway sent.
func (tp *tap) count(b []byte) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return bytes.Count(tp.down.Bytes(), b)
}

// waitSeen polls until the gateway has sent s to some client.
func (tp *tap) waitSeen(t *testing.T, s string) {
	t.Helper()
	poll.Until(t, waitTimeout, "the gateway to send "+s, func() (bool, string) {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		return bytes.Contains(tp.down.Bytes(), []byte(s)), fmt.Sprintf("%d bytes sent", tp.down.Len())
	})
}

// echoParams is a payload that proves which call an answer belongs to.
type echoParams struct {
	G    int    `json:"g"`
	I    int    `json:"i"`
	Text string `json:"text,omitempty"`
}

// mustEcho proves c still answers calls correctly.
func mustEcho(t *testing.T, c *client.Client, i int) {
	t.Helper()
	want := echoParams{G: -1, I: i}
	var got echoParams
	if err := call(t, c, "edge/echo", want, &got); err != nil {
		t.Fatalf("edge/echo %d: %v", i, err)
	}
	if got != want {
		t.Fatalf("edge/echo: got %+v, want %+v", got, want)
	}
}

// gateParams is the params object of edge/gate and edge/open.
func gateParams(name string) json.RawMessage {
	return json.RawMessage(`{"name":` + strconv.Quote(name) + `}`)
}
