package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/internal/testnats"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
	"github.com/openengine/edge/worker"
)

// This file tests the nats:// upstream and package worker (CONTRACT.md
// section 13): a proxy gateway forwards over an embedded NATS server, in the
// test process, to workers serving the memory backend.

// startNATS starts a NATS server on 127.0.0.1 with a free port; it stops in
// t.Cleanup.
func startNATS(t *testing.T) *server.Server { return testnats.Start(t) }

// natsWorker is one worker serving its own memory backend.
type natsWorker struct {
	w      *worker.Worker
	mem    *backend.Memory
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error // Serve's result
}

// startWorker starts a worker for prefix on ns. In t.Cleanup it drains (or,
// when that does not end in time, loses its connection).
func startWorker(t *testing.T, ns *server.Server, prefix string) *natsWorker {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	mem := backend.NewMemory()
	w, err := worker.New(worker.Config{Conn: nc, Prefix: prefix, Handler: mem, Subscriber: mem,
		NonBlocking: mem.NonBlocking, DrainTimeout: 2 * time.Second, ProbeInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	nw := &natsWorker{w: w, mem: mem, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { nw.done <- w.Serve(ctx) }()
	poll.Until(t, pollTimeout, "worker "+w.ID()+" taking calls", func() (bool, string) {
		return w.Taking(), "not subscribed"
	})
	t.Cleanup(func() {
		cancel()
		select {
		case <-nw.done:
		case <-time.After(5 * time.Second):
			t.Log("worker drain timed out")
			nc.Close()
			<-nw.done
		}
		nc.Close()
	})
	return nw
}

// kill closes the worker's NATS connection at once, as a crash would: the
// edge is told nothing.
func (nw *natsWorker) kill(t *testing.T) {
	t.Helper()
	nw.nc.Close()
	select {
	case err := <-nw.done:
		if !errors.Is(err, worker.ErrConnClosed) {
			t.Fatalf("Serve after its connection closed: %v", err)
		}
		nw.done <- err
	case <-time.After(pollTimeout):
		t.Fatal("Serve did not return after its connection closed")
	}
}

// waiting is how many calls wait on gate name across workers.
func waiting(ws []*natsWorker, name string) int {
	n := 0
	for _, w := range ws {
		n += w.mem.Waiting(name)
	}
	return n
}

func waitWorkerGate(t *testing.T, ws []*natsWorker, name string, n int) {
	t.Helper()
	poll.Until(t, pollTimeout, fmt.Sprintf("%d calls on the workers' gate %q", n, name), func() (bool, string) {
		got := waiting(ws, name)
		return got == n, fmt.Sprintf("%d waiting", got)
	})
}

// natsURL is the upstream URL of prefix on ns.
func natsURL(ns *server.Server, prefix string) string {
	return ns.ClientURL() + "/" + prefix
}

// upstreamError is the answer to id for a forwarded call that failed with
// code (UPSTREAM_UNAVAILABLE, UPSTREAM_TIMEOUT).
func upstreamError(id, code string) string {
	msg := map[string]string{"UPSTREAM_UNAVAILABLE": "Upstream unavailable", "UPSTREAM_TIMEOUT": "Upstream timeout"}[code]
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32000,"message":"` + msg + `","data":{"code":"` + code + `"}}}`
}

// TestNATSTwoWorkersShareWork: calls through edge -> NATS -> two workers of
// one queue group are all answered with the client's ids, and both workers
// take some.
func TestNATSTwoWorkersShareWork(t *testing.T) {
	ns := startNATS(t)
	a, b := startWorker(t, ns, "svc"), startWorker(t, ns, "svc")
	p := startProxy(t, upstream.Config{}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	const n = 40
	for i := range n {
		c.sendText(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"edge/echo","params":{"i":` + strconv.Itoa(i) + `}}`)
	}
	want := make([]string, n)
	for i := range n {
		want[i] = `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"result":{"i":` + strconv.Itoa(i) + `}}`
	}
	c.expectTexts(want...)
	if ta, tb := a.w.Taken(), b.w.Taken(); ta == 0 || tb == 0 || ta+tb != n {
		t.Fatalf("workers took %d and %d calls, want both some, %d in all", ta, tb, n)
	}
	if d := p.set.Upstreams()[0].Dropped(); d != 0 {
		t.Fatalf("edge dropped %d messages from the workers", d)
	}
}

// TestNATSNoResponders: with no worker on the prefix, a call is answered
// UPSTREAM_UNAVAILABLE at once (the NATS server's no-responders status), not
// after the upstream timeout, and counted unavailable.
func TestNATSNoResponders(t *testing.T) {
	ns := startNATS(t)
	startWorker(t, ns, "other")
	p := startProxy(t, upstream.Config{Timeout: time.Minute}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	start := time.Now()
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`)
	c.expectText(upstreamError("1", "UPSTREAM_UNAVAILABLE"))
	c.sendText(`{"jsonrpc":"2.0","id":2,"method":"edge/ticks","params":{"count":1,"intervalMs":0}}`)
	c.expectText(upstreamError("2", "UPSTREAM_UNAVAILABLE"))
	if d := time.Since(start); d > readTimeout {
		t.Fatalf("no-responders took %s", d)
	}
	c.expectSettled(0, 0)
	// Both counted in edge_upstream_requests_total{outcome="unavailable"}
	// (issue 19: they were missing).
	if n := outcomes(p.set.Upstreams()[0], "unavailable"); n != 2 {
		t.Fatalf("%d calls counted unavailable, want 2", n)
	}
}

// outcomes is how many calls of u ended with the outcome labelled label.
func outcomes(u *upstream.Upstream, label string) uint64 {
	st := u.Stats()
	for i := range upstream.NumOutcomes {
		if upstream.OutcomeLabel(i) == label {
			return st.Outcomes[i]
		}
	}
	panic("no outcome " + label)
}

// TestNATSTimeout: a call no worker answers in time gets UPSTREAM_TIMEOUT,
// and the cancel reaches the worker that holds it. Meanwhile the edge
// probed the live worker every sweep (a tenth of the timeout) and the
// worker probed the edge, and that failed nothing.
func TestNATSTimeout(t *testing.T) {
	ns := startNATS(t)
	ws := []*natsWorker{startWorker(t, ns, "svc")}
	p := startProxy(t, upstream.Config{Timeout: 300 * time.Millisecond}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	c.sendText(gate("1", "slow"))
	c.expectText(upstreamError("1", "UPSTREAM_TIMEOUT"))
	waitWorkerGate(t, ws, "slow", 0)
	c.expectSettled(0, 0)
	// The worker answered the call once its cancel arrived: that answer is
	// counted late, and nothing is dropped. The worker's probes of the
	// edge's inbox meanwhile (every 20ms) are taken, not dropped.
	u := p.set.Upstreams()[0]
	poll.Until(t, pollTimeout, "the late answer counted", func() (bool, string) {
		return u.Late() >= 1, "none yet"
	})
	if l, d := u.Late(), u.Dropped(); l != 1 || d != 0 {
		t.Fatalf("edge counted %d late answers and dropped %d messages, want 1 and 0", l, d)
	}
}

// TestNATSCancelReachesWorker: a client's $/cancelRequest reaches the
// context of the call on the worker that took it (the worker leaves its
// gate), and the slot is freed once the worker answers.
func TestNATSCancelReachesWorker(t *testing.T) {
	ns := startNATS(t)
	ws := []*natsWorker{startWorker(t, ns, "svc"), startWorker(t, ns, "svc")}
	p := startProxy(t, upstream.Config{Timeout: time.Minute}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	for i := range 4 {
		c.sendText(gate(strconv.Itoa(i), "g"))
	}
	waitWorkerGate(t, ws, "g", 4)
	for i := range 4 {
		c.sendText(cancel(strconv.Itoa(i)))
	}
	waitWorkerGate(t, ws, "g", 0)
	c.expectSettled(0, 0)
	c.echo()
}

// TestNATSWorkerKilledMidCall: a worker that loses its NATS connection while
// it holds a call and a subscription says nothing, and NATS request/reply
// has no connection between edge and worker to break; but the edge probes
// the workers that hold its calls (package wire), and the NATS server
// answers no-responders for one whose connection is gone. So the call gets
// UPSTREAM_UNAVAILABLE and the subscription ends UPSTREAM_LOST within a
// sweep, long before the upstream timeout, and the next calls go to the
// worker still alive.
func TestNATSWorkerKilledMidCall(t *testing.T) {
	ns := startNATS(t)
	a := startWorker(t, ns, "svc")
	p := startProxy(t, upstream.Config{Timeout: time.Minute}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":1000000,"intervalMs":20}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)
	c.expectText(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1}}`)
	c.sendText(gate("2", "k"))
	waitWorkerGate(t, []*natsWorker{a}, "k", 1)
	b := startWorker(t, ns, "svc")
	start := time.Now()
	a.kill(t)
	expectLost(t, c, "2")
	if d := time.Since(start); d > readTimeout {
		t.Fatalf("the dead worker's calls settled after %s", d)
	}
	c.expectSettled(0, 0)
	// The call counted unavailable (issue 19: it was missing); the
	// subscription was counted ok when it was established.
	if n := outcomes(p.set.Upstreams()[0], "unavailable"); n != 1 {
		t.Fatalf("%d calls counted unavailable, want 1", n)
	}
	for range 5 {
		c.echo()
	}
	if b.w.Taken() != 5 {
		t.Fatalf("the surviving worker took %d calls, want 5", b.w.Taken())
	}
}

// TestNATSWorkerDrains: a worker told to stop finishes the call it took,
// takes no new one (the other worker takes them), ends its subscriptions
// UPSTREAM_LOST so that their clients resubscribe elsewhere, and returns.
func TestNATSWorkerDrains(t *testing.T) {
	ns := startNATS(t)
	a, b := startWorker(t, ns, "svc"), startWorker(t, ns, "svc")
	p := startProxy(t, upstream.Config{Timeout: time.Minute}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	// Calls on gate d until worker a holds one (the queue group picks at
	// random).
	for i := 0; a.mem.Waiting("d") == 0; i++ {
		if i == 20 {
			t.Fatal("worker a took none of 20 calls")
		}
		c.sendText(gate(strconv.Itoa(100+i), "d"))
		waitWorkerGate(t, []*natsWorker{a, b}, "d", i+1)
	}
	a.cancel()
	poll.Until(t, pollTimeout, "worker a to stop taking calls", func() (bool, string) {
		return !a.w.Taking(), "still taking"
	})
	taken := a.w.Taken()
	for range 10 {
		c.echo()
	}
	if a.w.Taken() != taken {
		t.Fatalf("the draining worker took %d new calls", a.w.Taken()-taken)
	}
	select {
	case err := <-a.done:
		t.Fatalf("the draining worker returned (%v) before its call finished", err)
	default:
	}
	// a finishes what it took: its gate opens, its calls are answered, and
	// Serve returns.
	held := a.mem.Waiting("d")
	if _, err := a.mem.Call(context.Background(), "edge/open", []byte(`{"name":"d"}`), nil); err != nil {
		t.Fatal(err)
	}
	for range held {
		r := parseResponse(t, c.readText())
		if r.Error != nil || string(r.Result) != `{"name":"d"}` {
			t.Fatalf("drained call answered %+v", r)
		}
	}
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatalf("Serve after a drain: %v", err)
		}
		a.done <- err
	case <-time.After(pollTimeout):
		t.Fatal("the drained worker did not return")
	}
	if _, err := b.mem.Call(context.Background(), "edge/open", []byte(`{"name":"d"}`), nil); err != nil {
		t.Fatal(err)
	}
	c.settle(0, 0)
}

// TestNATSDrainEndsSubscriptions: a draining worker ends the subscriptions it
// serves UPSTREAM_LOST with their last delivered cursor.
func TestNATSDrainEndsSubscriptions(t *testing.T) {
	ns := startNATS(t)
	a := startWorker(t, ns, "svc")
	p := startProxy(t, upstream.Config{}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":1000000,"intervalMs":20}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)
	c.expectText(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1}}`)
	a.cancel()
	last := "1"
	for {
		msg := c.readText()
		if strings.Contains(msg, `"subscription/closed"`) {
			want := `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"UPSTREAM_LOST","lastDeliveredCursor":"` + last + `"}}`
			if msg != want {
				t.Fatalf("got %s, want %s", msg, want)
			}
			break
		}
		r := parseEvent(t, msg)
		last = r
	}
	if err := <-a.done; err != nil {
		t.Fatalf("Serve after a drain: %v", err)
	}
	a.done <- nil
	c.expectSettled(0, 0)
}

// expectLost reads what c gets once the upstream holding its call id and
// its subscription s1 (edge/ticks, event 1 already read) is lost: the call's
// UPSTREAM_UNAVAILABLE, and the subscription's events up to its
// subscription/closed UPSTREAM_LOST with the last delivered cursor.
func expectLost(t *testing.T, c *client, id string) {
	t.Helper()
	last := "1"
	var gotCall, gotClosed bool
	for !gotCall || !gotClosed {
		msg := c.readText()
		switch {
		case msg == upstreamError(id, "UPSTREAM_UNAVAILABLE"):
			gotCall = true
		case strings.Contains(msg, `"subscription/closed"`):
			want := `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"UPSTREAM_LOST","lastDeliveredCursor":"` + last + `"}}`
			if msg != want {
				t.Fatalf("got %s, want %s", msg, want)
			}
			gotClosed = true
		default:
			last = parseEvent(t, msg)
		}
	}
}

// parseEvent returns the cursor of an edge/ticks event.
func parseEvent(t *testing.T, msg string) string {
	t.Helper()
	const head = `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"`
	rest, ok := strings.CutPrefix(msg, head)
	if !ok {
		t.Fatalf("not an event of s1: %s", msg)
	}
	cursor, _, _ := strings.Cut(rest, `"`)
	return cursor
}

// TestNATSSubscriptionCancel: a subscription through a worker carries edge's
// subscription id; the client's subscription/cancel reaches the worker (its
// producer stops), and a subscription the worker ends reaches the client
// "done".
func TestNATSSubscriptionCancel(t *testing.T) {
	ns := startNATS(t)
	ws := []*natsWorker{startWorker(t, ns, "svc"), startWorker(t, ns, "svc")}
	p := startProxy(t, upstream.Config{}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	// Client -> worker.
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":1000000,"intervalMs":10}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)
	c.expectText(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1}}`)
	c.sendText(subCancel("s1"))
	poll.Until(t, pollTimeout, "the workers' producers to stop", func() (bool, string) {
		n := ws[0].w.Running() + ws[1].w.Running()
		return n == 0, fmt.Sprintf("%d running", n)
	})
	for _, m := range c.settle(0, 0) {
		if !strings.Contains(m, `"method":"event"`) {
			t.Fatalf("after subscription/cancel: %s", m)
		}
	}
	// Worker -> client.
	c.sendText(`{"jsonrpc":"2.0","id":2,"method":"edge/ticks","params":{"count":2,"intervalMs":0}}`)
	c.expectTexts(`{"jsonrpc":"2.0","id":2,"result":{"subscriptionId":"s2"}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s2","cursor":"1","seq":1}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s2","cursor":"2","seq":2}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s2","reason":"done","lastDeliveredCursor":"2"}}`)
	c.expectSettled(0, 0)
}

// TestNATSServerStopped: when the NATS server goes away, the call in flight
// gets UPSTREAM_UNAVAILABLE, the live subscription ends UPSTREAM_LOST with its
// last delivered cursor, and new calls are refused at once while it is down.
func TestNATSServerStopped(t *testing.T) {
	ns := startNATS(t)
	ws := []*natsWorker{startWorker(t, ns, "svc")}
	p := startProxy(t, upstream.Config{Timeout: time.Minute, BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond},
		[]string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":1000000,"intervalMs":20}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)
	c.expectText(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1}}`)
	c.sendText(gate("2", "held"))
	waitWorkerGate(t, ws, "held", 1)
	ns.Shutdown()
	expectLost(t, c, "2")
	c.sendText(`{"jsonrpc":"2.0","id":3,"method":"edge/echo","params":{}}`)
	c.expectText(upstreamError("3", "UPSTREAM_UNAVAILABLE"))
	if up, total := p.set.Upstreams()[0].Connected(); up != 0 || total != 1 {
		t.Fatalf("Connected() = %d of %d while NATS is down", up, total)
	}
	c.expectSettled(0, 0)
	// The worker's gate call has nobody to answer it to.
	ws[0].kill(t)
}

// TestEdgeWorkerCommand: `edge worker --nats URL --prefix PREFIX` serves the
// memory backend to an edge, and on SIGTERM drains and exits 0; bad flags
// are refused.
func TestEdgeWorkerCommand(t *testing.T) {
	// Every problem of the flags is reported at once, exit status 2.
	bad, err := exec.Command(edgeBinary(t), "worker", "--max-calls", "0").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("edge worker with bad flags: %v\n%s", err, bad)
	}
	for _, want := range []string{"--nats is required", `prefix ""`, "--max-calls must be positive"} {
		if !strings.Contains(string(bad), want) {
			t.Errorf("edge worker with bad flags does not say %q:\n%s", want, bad)
		}
	}
	ns := startNATS(t)
	cmd := exec.Command(edgeBinary(t), "worker", "--nats", ns.ClientURL(), "--prefix", "svc", "--id", "cli")
	var out testgw.Buffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("edge worker:\n%s", out.String())
		}
	})
	poll.Until(t, pollTimeout, "edge worker serving", func() (bool, string) {
		return strings.Contains(out.String(), "worker serving"), out.String()
	})
	p := startProxy(t, upstream.Config{}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	c.echo()
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":1,"intervalMs":0}}`)
	c.expectTexts(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"1"}}`)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("edge worker after SIGTERM: %v", err)
		}
		exited <- nil
	case <-time.After(pollTimeout):
		t.Fatal("edge worker did not exit after SIGTERM")
	}
	if !strings.Contains(out.String(), "worker drained") {
		t.Fatalf("no drain in the log:\n%s", out.String())
	}
}

// TestNATSReconnects: when the NATS server comes back, the edge and the
// worker reconnect by themselves and calls are served again; while it is
// down the upstream reports no connection.
func TestNATSReconnects(t *testing.T) {
	ns := startNATS(t)
	port := ns.Addr().(*net.TCPAddr).Port
	startWorker(t, ns, "svc")
	logs := &testgw.Buffer{}
	p := startProxy(t, upstream.Config{BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: testLogger(logs)},
		[]string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	c.echo()
	ns.Shutdown()
	u := p.set.Upstreams()[0]
	poll.Until(t, pollTimeout, "the upstream down", func() (bool, string) {
		up, _ := u.Connected()
		return up == 0, "still up"
	})
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`)
	c.expectText(upstreamError("1", "UPSTREAM_UNAVAILABLE"))
	testnats.StartPort(t, port)
	waitConnected(t, p.set)
	// The worker's subscriptions come back with its connection: retry
	// until a call is served rather than refused for no responders.
	poll.Until(t, pollTimeout, "a call served after the restart", func() (bool, string) {
		c.sendText(`{"jsonrpc":"2.0","id":2,"method":"edge/echo","params":{}}`)
		msg := c.readText()
		return msg == `{"jsonrpc":"2.0","id":2,"result":{}}`, msg
	})
	// Each change of state is logged once (CONTRACT.md section 10).
	out := logs.String()
	if strings.Count(out, "upstream connected") != 2 || strings.Count(out, "upstream connection lost") != 1 ||
		strings.Count(out, "upstream unavailable") != 0 {
		t.Fatalf("want connected, lost, connected in the log:\n%s", out)
	}
}

// TestNATSNotification: with --profile jsonrpc a client's notification is
// published to the workers with no reply subject; the worker runs it and
// answers nothing (here it opens the gate a call waits on).
func TestNATSNotification(t *testing.T) {
	ns := startNATS(t)
	ws := []*natsWorker{startWorker(t, ns, "svc")}
	p := startProxyWith(t, upstream.Config{}, []string{"w=" + natsURL(ns, "svc")}, nil, func(c *gwConfig) {
		c.rpc.Profile = rpc.ProfileJSONRPC
	})
	c := dial(t, p.gateway)
	c.sendText(gate("1", "n"))
	waitWorkerGate(t, ws, "n", 1)
	c.sendText(`{"jsonrpc":"2.0","method":"edge/open","params":{"name":"n"}}`)
	c.expectText(gateResult("1", "n"))
	c.expectSettled(0, 0)
}

// TestNATSEdgeGone: when an edge goes away without cancelling (crashed, or
// closed before its cancels left), the worker's probe of the edge's inbox
// gets no-responders and the worker ends what it ran for it, instead of
// streaming into the void for ever.
func TestNATSEdgeGone(t *testing.T) {
	ns := startNATS(t)
	w := startWorker(t, ns, "svc")
	p := startProxy(t, upstream.Config{}, []string{"w=" + natsURL(ns, "svc")})
	c := dial(t, p.gateway)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"watch","params":{}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1","runId":null,"atCursor":null}}`)
	if w.w.Running() != 1 {
		t.Fatalf("%d running on the worker, want the watch", w.w.Running())
	}
	p.set.Close() // no subscription/cancel is sent: the connection just goes
	c.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"UPSTREAM_LOST"}}`)
	poll.Until(t, pollTimeout, "the worker to end the watch", func() (bool, string) {
		n := w.w.Running()
		return n == 0, fmt.Sprintf("%d running", n)
	})
}
