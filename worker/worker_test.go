package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/internal/testnats"
	"github.com/openengine/edge/internal/wire"
)

// TestMain fails the run if a worker goroutine outlives the tests.
func TestMain(m *testing.M) { testgw.Main(m) }

const timeout = 5 * time.Second

func TestConfigValidate(t *testing.T) {
	nc := &nats.Conn{}
	mem := backend.NewMemory()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings of the error, every one reported
	}{
		{name: "ok", cfg: Config{Conn: nc, Prefix: "svc.a", Handler: mem}},
		{name: "empty", cfg: Config{}, want: []string{"no NATS connection", "prefix", "no handler"}},
		{name: "wildcard prefix", cfg: Config{Conn: nc, Prefix: "svc.*", Handler: mem}, want: []string{"prefix"}},
		{name: "empty token", cfg: Config{Conn: nc, Prefix: "svc..a", Handler: mem}, want: []string{"prefix"}},
		{name: "id with a dot", cfg: Config{Conn: nc, Prefix: "svc", Handler: mem, ID: "a.b"}, want: []string{"id"}},
		{name: "negative", cfg: Config{Conn: nc, Prefix: "svc", Handler: mem, MaxCalls: -1}, want: []string{"negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if err := (Config{}).Validate(); !errors.Is(err, ErrNoConn) {
		t.Fatalf("Validate without a connection: %v, want ErrNoConn", err)
	}
}

// fixture is a NATS server, a worker serving a memory backend on prefix
// "svc", and a raw client standing in for an edge.
type fixture struct {
	w     *Worker
	ns    *server.Server
	mem   *backend.Memory
	wnc   *nats.Conn // the worker's
	edge  *nats.Conn // the test's
	stop  context.CancelFunc
	done  chan error
	inbox chan *nats.Msg // everything on _INBOX.t.>
}

func start(t *testing.T) *fixture {
	t.Helper()
	return startWith(t, nil)
}

// startWith is start with h serving unary methods in place of the memory
// backend (nil: the memory backend).
func startWith(t *testing.T, h backend.Handler) *fixture {
	t.Helper()
	return startCfg(t, h, nil)
}

// startCfg is startWith with Config.NonBlocking set to nonBlocking.
func startCfg(t *testing.T, h backend.Handler, nonBlocking func(string) bool) *fixture {
	t.Helper()
	ns := testnats.Start(t)
	var err error
	f := &fixture{ns: ns, mem: backend.NewMemory(), done: make(chan error, 1), inbox: make(chan *nats.Msg, 64)}
	if f.wnc, err = nats.Connect(ns.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.wnc.Close)
	if f.edge, err = nats.Connect(ns.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.edge.Close)
	if _, err := f.edge.ChanSubscribe("_INBOX.t.>", f.inbox); err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = f.mem
	}
	f.w, err = New(Config{Conn: f.wnc, Prefix: "svc", Handler: h, Subscriber: f.mem, NonBlocking: nonBlocking, ProbeInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go func() { f.done <- f.w.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-f.done:
		case <-time.After(timeout):
			t.Error("Serve did not return")
		}
	})
	poll.Until(t, timeout, "the worker to subscribe", func() (bool, string) { return f.w.Taking(), "not yet" })
	if err := f.edge.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

// call publishes a request as an edge does.
func (f *fixture) call(t *testing.T, reply, method, body string) {
	t.Helper()
	if err := f.edge.PublishMsg(&nats.Msg{Subject: "svc." + method, Reply: reply, Data: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

// next returns the next message on the test's inbox other than the
// worker's probes of it.
func (f *fixture) next(t *testing.T) *nats.Msg {
	t.Helper()
	for {
		select {
		case m := <-f.inbox:
			if m.Subject == "_INBOX.t."+wire.EdgeAliveToken {
				continue
			}
			return m
		case <-time.After(timeout):
			t.Fatal("no message on the inbox")
			return nil
		}
	}
}

// expectAccepted reads the worker's "accepted" on reply.
func (f *fixture) expectAccepted(t *testing.T, reply string) {
	t.Helper()
	m := f.next(t)
	if m.Subject != reply || len(m.Data) != 0 || m.Header.Get(wire.Worker) != f.w.ID() {
		t.Fatalf("got %s %v %q, want the accepted message of %s from %s", m.Subject, m.Header, m.Data, reply, f.w.ID())
	}
}

func (f *fixture) expect(t *testing.T, subject, data string) {
	t.Helper()
	m := f.next(t)
	if m.Subject != subject || string(m.Data) != data {
		t.Fatalf("got %s %s, want %s %s", m.Subject, m.Data, subject, data)
	}
}

// TestWire: a call is accepted with the worker's id, then answered with the
// JSON-RPC response carrying the request's id; a backend error is encoded
// as a gateway encodes it.
func TestWire(t *testing.T) {
	f := start(t)
	f.call(t, "_INBOX.t.7", "edge/echo", `{"jsonrpc":"2.0","id":7,"method":"edge/echo","params":{"a":1}}`)
	f.expectAccepted(t, "_INBOX.t.7")
	f.expect(t, "_INBOX.t.7", `{"jsonrpc":"2.0","id":7,"result":{"a":1}}`)
	f.call(t, "_INBOX.t.8", "initialize", `{"jsonrpc":"2.0","id":8,"method":"initialize","params":{}}`)
	f.expectAccepted(t, "_INBOX.t.8")
	f.expect(t, "_INBOX.t.8", `{"jsonrpc":"2.0","id":8,"error":{"code":-32602,"message":"Invalid params","data":{"code":"SCHEMA_VIOLATION"}}}`)
}

// TestInline: a call to a method Config.NonBlocking names is answered by
// its response alone, with no "accepted" before it (the next message on the
// inbox after it is the accepted of a blocking call published after it, so
// an accepted of the fast call would be seen first), errors and panics
// included; a blocking call is still accepted, and cancelled through the
// worker's cancel subject.
func TestInline(t *testing.T) {
	f := startCfg(t, nil, func(m string) bool { return m != "edge/gate" })
	expectAnswer := func(reply, data string) {
		t.Helper()
		m := f.next(t)
		if m.Subject != reply || string(m.Data) != data || len(m.Header) != 0 {
			t.Fatalf("got %s %v %s, want %s %s with no header", m.Subject, m.Header, m.Data, reply, data)
		}
	}
	f.call(t, "_INBOX.t.1", "edge/echo", `{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"a":1}}`)
	f.call(t, "_INBOX.t.2", "initialize", `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}`)
	f.call(t, "_INBOX.t.3", "edge/echo", `{"jsonrpc":"2.0","id":3,"method":"edge/echo"}`)
	f.call(t, "_INBOX.t.4", "edge/gate", `{"jsonrpc":"2.0","id":4,"method":"edge/gate","params":{"name":"g"}}`)
	expectAnswer("_INBOX.t.1", `{"jsonrpc":"2.0","id":1,"result":{"a":1}}`)
	expectAnswer("_INBOX.t.2", `{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Invalid params","data":{"code":"SCHEMA_VIOLATION"}}}`)
	expectAnswer("_INBOX.t.3", `{"jsonrpc":"2.0","id":3,"result":{}}`)
	f.expectAccepted(t, "_INBOX.t.4")
	poll.Until(t, timeout, "the call on the gate", func() (bool, string) { return f.mem.Waiting("g") == 1, "" })
	if err := f.edge.PublishMsg(&nats.Msg{Subject: wire.CancelSubject("svc", f.w.ID()),
		Header: nats.Header{wire.Reply: []string{"_INBOX.t.4"}}, Data: []byte(`{"id":4}`)}); err != nil {
		t.Fatal(err)
	}
	if m := f.next(t); m.Subject != "_INBOX.t.4" || !strings.Contains(string(m.Data), `"error"`) {
		t.Fatalf("got %s %s, want the gate call to end with an error", m.Subject, m.Data)
	}
	if n := f.w.Taken(); n != 4 {
		t.Fatalf("Taken() = %d, want 4", n)
	}
	g := startCfg(t, panicky{}, func(string) bool { return true })
	g.call(t, "_INBOX.t.1", "x", `{"jsonrpc":"2.0","id":1,"method":"x","params":{}}`)
	m := g.next(t)
	if m.Subject != "_INBOX.t.1" || len(m.Header) != 0 ||
		string(m.Data) != `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"code":"BACKEND_PANIC"}}}` {
		t.Fatalf("got %s %v %s, want the panic's error alone", m.Subject, m.Header, m.Data)
	}
}

// TestSubscriptionWire: a subscription's response, events and end go to
// its Edge-Stream subject; its id is the worker's.
func TestSubscriptionWire(t *testing.T) {
	f := start(t)
	err := f.edge.PublishMsg(&nats.Msg{Subject: "svc.edge/ticks", Reply: "_INBOX.t.1",
		Header: nats.Header{wire.Stream: []string{"_INBOX.t.s.1"}},
		Data:   []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":2,"intervalMs":0}}`)})
	if err != nil {
		t.Fatal(err)
	}
	f.expectAccepted(t, "_INBOX.t.1")
	f.expect(t, "_INBOX.t.s.1", `{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"1"}}`)
	f.expect(t, "_INBOX.t.s.1", `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"1","cursor":"1","seq":1}}`)
	f.expect(t, "_INBOX.t.s.1", `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"1","cursor":"2","seq":2}}`)
	f.expect(t, "_INBOX.t.s.1", `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"1","reason":"done"}}`)
}

// TestCancelNeedsTheReplySubject: two edges may use the same id at once
// (edge ids are unique per edge connection only), so {"id":N} alone is
// ambiguous; the cancel's Edge-Reply header names the call. Only the named
// call is cancelled.
func TestCancelNeedsTheReplySubject(t *testing.T) {
	f := start(t)
	f.call(t, "_INBOX.t.a.5", "edge/gate", `{"jsonrpc":"2.0","id":5,"method":"edge/gate","params":{"name":"g"}}`)
	f.expectAccepted(t, "_INBOX.t.a.5")
	f.call(t, "_INBOX.t.b.5", "edge/gate", `{"jsonrpc":"2.0","id":5,"method":"edge/gate","params":{"name":"g"}}`)
	f.expectAccepted(t, "_INBOX.t.b.5")
	poll.Until(t, timeout, "2 calls on the gate", func() (bool, string) { return f.mem.Waiting("g") == 2, "" })
	cancelSubj := wire.CancelSubject("svc", f.w.ID())
	// Without the header, or with another call's, nothing is cancelled.
	for _, h := range []nats.Header{nil, {wire.Reply: []string{"_INBOX.t.c.5"}}} {
		if err := f.edge.PublishMsg(&nats.Msg{Subject: cancelSubj, Header: h, Data: []byte(`{"id":5}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.edge.PublishMsg(&nats.Msg{Subject: cancelSubj, Header: nats.Header{wire.Reply: []string{"_INBOX.t.b.5"}}, Data: []byte(`{"id":5}`)}); err != nil {
		t.Fatal(err)
	}
	m := f.next(t)
	if m.Subject != "_INBOX.t.b.5" || !strings.Contains(string(m.Data), `"error"`) {
		t.Fatalf("got %s %s, want b's call to end with an error", m.Subject, m.Data)
	}
	if n := f.mem.Waiting("g"); n != 1 {
		t.Fatalf("%d calls on the gate, want a's still there", n)
	}
	if _, err := f.mem.Call(context.Background(), "edge/open", []byte(`{"name":"g"}`), nil); err != nil {
		t.Fatal(err)
	}
	f.expect(t, "_INBOX.t.a.5", `{"jsonrpc":"2.0","id":5,"result":{"name":"g"}}`)
}

// TestServeEnds: Serve returns nil after a drain with nothing running, and
// ErrConnClosed when its connection closes. While it serves, the worker's
// alive subject has a subscriber that answers nothing; after, the NATS server
// answers no-responders there (how an edge learns a worker is gone).
func TestServeEnds(t *testing.T) {
	f := start(t)
	alive := wire.AliveSubject("svc", f.w.ID())
	if _, err := f.edge.Request(alive, nil, 50*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("probe of a serving worker: %v, want no answer", err)
	}
	f.stop()
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatalf("Serve after a drain: %v", err)
		}
		f.done <- nil
	case <-time.After(timeout):
		t.Fatal("Serve did not return")
	}
	// Its unsubscribe reaches the server a moment after Serve returns.
	poll.Until(t, timeout, "no responders on the alive subject", func() (bool, string) {
		_, err := f.edge.Request(alive, nil, 50*time.Millisecond)
		return errors.Is(err, nats.ErrNoResponders), fmt.Sprint(err)
	})
	g := start(t)
	g.call(t, "_INBOX.t.1", "edge/gate", `{"jsonrpc":"2.0","id":1,"method":"edge/gate","params":{"name":"g"}}`)
	g.expectAccepted(t, "_INBOX.t.1")
	poll.Until(t, timeout, "the call on the gate", func() (bool, string) { return g.mem.Waiting("g") == 1, "" })
	g.wnc.Close()
	select {
	case err := <-g.done:
		if !errors.Is(err, ErrConnClosed) {
			t.Fatalf("Serve after its connection closed: %v", err)
		}
		g.done <- err
	case <-time.After(timeout):
		t.Fatal("Serve did not return")
	}
	if n := g.mem.Waiting("g"); n != 0 {
		t.Fatalf("%d calls still run after the connection closed", n)
	}
}

// TestDrainWhileServerDown: a worker told to stop while its NATS server is
// unreachable does not wait for a drain that cannot happen.
func TestDrainWhileServerDown(t *testing.T) {
	f := start(t)
	f.ns.Shutdown()
	poll.Until(t, timeout, "the worker's connection to notice", func() (bool, string) {
		return !f.wnc.IsConnected(), f.wnc.Status().String()
	})
	f.stop()
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		f.done <- nil
	case <-time.After(timeout):
		t.Fatal("Serve did not return")
	}
}

// panicky is a handler that panics.
type panicky struct{}

func (panicky) Call(context.Context, string, []byte, []byte) ([]byte, error) { panic("boom") }

// TestHandlerPanic: a handler's panic is answered -32603 BACKEND_PANIC, as
// an in-process backend's is, and the worker goes on serving.
func TestHandlerPanic(t *testing.T) {
	f := startWith(t, panicky{})
	for _, id := range []string{"1", "2"} {
		f.call(t, "_INBOX.t."+id, "x", `{"jsonrpc":"2.0","id":`+id+`,"method":"x","params":{}}`)
		f.expectAccepted(t, "_INBOX.t."+id)
		f.expect(t, "_INBOX.t."+id, `{"jsonrpc":"2.0","id":`+id+`,"error":{"code":-32603,"message":"Internal error","data":{"code":"BACKEND_PANIC"}}}`)
	}
}

// TestEdgeGone: a worker ends what it runs for an edge whose connection is
// gone (here a subscription that would run for ever and a call on a gate):
// its probe of the edge's inbox gets the NATS server's no-responders.
func TestEdgeGone(t *testing.T) {
	f := start(t)
	gone, err := nats.Connect(f.ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan *nats.Msg, 64)
	if _, err := gone.ChanSubscribe("_INBOX.g.>", events); err != nil {
		t.Fatal(err)
	}
	if err := gone.PublishMsg(&nats.Msg{Subject: "svc.edge/ticks", Reply: "_INBOX.g.1",
		Header: nats.Header{wire.Stream: []string{"_INBOX.g.s.1"}},
		Data:   []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":1000000,"intervalMs":5}}`)}); err != nil {
		t.Fatal(err)
	}
	if err := gone.PublishMsg(&nats.Msg{Subject: "svc.edge/gate", Reply: "_INBOX.g.2",
		Data: []byte(`{"jsonrpc":"2.0","id":2,"method":"edge/gate","params":{"name":"g"}}`)}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, timeout, "the subscription and the call running", func() (bool, string) {
		return f.w.Running() == 2 && f.mem.Waiting("g") == 1, fmt.Sprintf("%d running", f.w.Running())
	})
	// The probes of a live edge end nothing.
	for seen := false; !seen; {
		select {
		case m := <-events:
			seen = m.Subject == "_INBOX.g."+wire.EdgeAliveToken
		case <-time.After(timeout):
			t.Fatal("no probe of the edge")
		}
	}
	if f.w.Running() != 2 {
		t.Fatalf("%d running while the edge lives, want 2", f.w.Running())
	}
	gone.Close()
	poll.Until(t, timeout, "the edge's work to end", func() (bool, string) {
		return f.w.Running() == 0 && f.mem.Waiting("g") == 0, fmt.Sprintf("%d running", f.w.Running())
	})
}

// TestNotServingWhileNATSUnreachable: a worker started while its NATS server
// is unreachable says so, not "worker serving" (which it said at once
// before), and says "worker serving" once the server is up.
func TestNotServingWhileNATSUnreachable(t *testing.T) {
	addr := testgw.FreeAddr(t, "127.0.0.1")
	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	logs := &testgw.Buffer{}
	w, err := New(Config{Conn: nc, Prefix: "svc", Handler: backend.NewMemory(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(timeout):
			t.Error("Serve did not return")
		}
	})
	poll.Until(t, timeout, "the unreachable server logged", func() (bool, string) {
		return strings.Contains(logs.String(), "NATS server is unreachable"), logs.String()
	})
	if strings.Contains(logs.String(), "worker serving") {
		t.Fatalf("the worker says it serves with no NATS server:\n%s", logs)
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	testnats.StartPort(t, p)
	poll.Until(t, timeout, "worker serving once NATS is up", func() (bool, string) {
		return strings.Contains(logs.String(), "worker serving"), logs.String()
	})
}

// TestServeEndsWhileNATSUnreachable: a worker that never reached its NATS
// server returns from Serve and leaves no goroutine waiting for it (the
// package's TestMain checks).
func TestServeEndsWhileNATSUnreachable(t *testing.T) {
	nc, err := nats.Connect("nats://"+testgw.FreeAddr(t, "127.0.0.1"), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w, err := New(Config{Conn: nc, Prefix: "svc", Handler: backend.NewMemory(), DrainTimeout: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Serve(ctx) }()
	poll.Until(t, timeout, "the worker to subscribe", func() (bool, string) { return w.Taking(), "not yet" })
	cancel()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatal("Serve did not return")
	}
}
