package test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
)

// End-to-end tests of subscriptions (CONTRACT.md sections 5, 6 and 8
// edge/ticks, watch, edge/stats). The backpressure tests are in
// outbound_test.go; the helpers of both are here.

// TestSubscriptionsShareConnection: unary calls and two subscriptions
// (edge/ticks on a timer, and watch) share one connection. Each request gets
// its subscription id in message order (s1, s2) and no event precedes its
// subscription's response; edge/stats counts the subscriptions; cancelling
// watch leaves the ticks flowing and unary calls answered; cancelling the
// ticks stops them (at most one event in flight after the cancel was
// processed); neither cancel is answered with subscription/closed, and once
// the producers have returned the connection holds nothing.
func TestSubscriptionsShareConnection(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	tr := newSubTracker(t)

	c.sendText(`{"jsonrpc":"2.0","id":"t","method":"edge/ticks","params":{"count":1000000,"intervalMs":2}}`)
	c.sendText(`{"jsonrpc":"2.0","id":"w","method":"watch","params":{}}`)
	got := tr.responses(c, `"t"`, `"w"`)
	if want := `{"jsonrpc":"2.0","id":"t","result":{"subscriptionId":"s1"}}`; got[`"t"`] != want {
		t.Fatalf("edge/ticks answer %s, want %s", got[`"t"`], want)
	}
	if want := `{"jsonrpc":"2.0","id":"w","result":{"subscriptionId":"s2","runId":null,"atCursor":null}}`; got[`"w"`] != want {
		t.Fatalf("watch answer %s, want %s", got[`"w"`], want)
	}

	tr.awaitEvents(c, "s1", 5)
	tr.echo(c)
	if s := tr.stats(c); s.Subscriptions != 2 || s.Tasks != 2 || s.InFlightIDs != 0 {
		t.Fatalf("stats %+v, want 2 subscriptions holding 2 tasks, no id", s)
	}

	// Cancel watch: the ticks keep flowing.
	c.sendText(subCancel("s2"))
	tr.markCancelled("s2")
	if s := tr.stats(c); s.Subscriptions != 1 {
		t.Fatalf("stats %+v after cancelling s2, want 1 subscription", s)
	}
	tr.awaitEvents(c, "s1", tr.seq["s1"]+5)
	tr.echo(c)
	tr.settle(c, 1, 0) // the watch producer returned

	// Cancel the ticks.
	c.sendText(subCancel("s1"))
	if s := tr.stats(c); s.Subscriptions != 0 {
		t.Fatalf("stats %+v after cancelling s1, want no subscription", s)
	}
	tr.markCancelled("s1") // processed before the stats answer
	tr.settle(c, 0, 0)
	tr.echo(c)
	c.expectNoMessage()
	if tr.seq["s1"] < 10 {
		t.Fatalf("only %d events of s1", tr.seq["s1"])
	}
}

// TestTicksPacedByConsumer: edge/ticks with intervalMs 0 is paced by the
// consumer: with an 8-event subscription buffer and a 64 KiB soft cap, a
// client that stops reading (the kernel buffers fill, then the soft cap, then
// the buffer) stops the producer short of its 10,000 events of 1 KiB, and
// once the client reads it still gets all of them in order, then
// subscription/closed "done" with lastDeliveredCursor "10000" — never
// SLOW_CONSUMER. Catches a producer that does not wait for room (Emit instead
// of EmitWait), a gateway that takes every event while nobody reads, and a
// buffer that drops or reorders events under backpressure.
func TestTicksPacedByConsumer(t *testing.T) {
	cb := &countingBackend{}
	gw := startGateway(t, withCounting(cb), func(c *gwConfig) {
		c.rpc.SubscriptionBuffer = 8
		c.loop.OutboundSoftBytes = 64 << 10
		c.loop.OutboundHardBytes = 1 << 20
	})
	c := dial(t, gw)
	const count, size = 10000, 1024
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":` + strconv.Itoa(count) + `,"intervalMs":0,"size":` + strconv.Itoa(size) + `}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)
	// The consumer does not read until the producer has stopped: 10 MB of
	// events exceed what the socket buffers (at most a few MB here), the soft
	// cap and the 8-event buffer together, so it has to wait for room.
	waitStopped(t, &cb.events, count)
	data := strings.Repeat("x", size)
	for n := 1; n <= count; n++ {
		if got, want := c.readText(), tickEvent("s1", n, data); got != want {
			t.Fatalf("event %d: got %.200s, want %.200s", n, got, want)
		}
	}
	c.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"10000"}}`)
	c.expectSettled(0, 0)
}

// waitStopped polls until the events a producer handed over (n) stop growing
// for quiet while nobody reads, and fails the test if it hands over all count
// events: then nothing made it wait. A producer parked for room has no other
// sign than that it stopped.
func waitStopped(t *testing.T, n *atomic.Int64, count int) {
	t.Helper()
	last, since := int64(-1), time.Now()
	poll.Until(t, pollTimeout, "the paced producer to stop while nobody reads", func() (bool, string) {
		got := n.Load()
		if got == int64(count) {
			t.Fatalf("the gateway took all %d events while the client read nothing", count)
		}
		if got != last {
			last, since = got, time.Now()
		}
		return time.Since(since) >= quiet, fmt.Sprintf("%d of %d events taken, still growing", got, count)
	})
	t.Logf("the producer stopped after %d of %d events", last, count)
}

// TestSubscriptionTailNotStrandedByTurnCap is the regression test of a
// subscription whose last events and subscription/closed were never sent to
// a client that reads everything.
//
// The interleaving: edge/ticks with intervalMs 0 emits 100 events of 4 KiB
// into its (1024-event) buffer and returns before the loop has drained it.
// In one loop turn the session writes events until this turn's output
// reaches the 64 KiB soft cap (conn.Writable counts output not yet flushed)
// and parks the subscription in Session.blocked; the producer's return,
// applied in the same turn, finds the connection still not writable. The
// flush then hands the whole turn to the kernel, which takes it, so the
// backlog is 0, the connection is never paused, and nothing ever calls
// Session.Resume: the remaining events and "done" stay in the buffer for
// good, and the client times out waiting.
func TestSubscriptionTailNotStrandedByTurnCap(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) {
		c.loop.OutboundSoftBytes = bpSoftCap
		c.loop.OutboundHardBytes = bpHardCap
	})
	c := dial(t, gw)
	const count, size = 100, 4096
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":` + strconv.Itoa(count) + `,"intervalMs":0,"size":` + strconv.Itoa(size) + `}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)
	data := strings.Repeat("x", size)
	for n := 1; n <= count; n++ {
		h, p, err := c.readFrame(readTimeout)
		if err != nil {
			t.Fatalf("after %d of %d events: %v", n-1, count, err)
		}
		if got, want := string(p), tickEvent("s1", n, data); h.OpCode != ws.OpText || got != want {
			t.Fatalf("event %d: got %.200s", n, describe(h.OpCode, p))
		}
	}
	c.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"100"}}`)
	c.expectSettled(0, 0)
}

// TestCloseEndsEverySubscription: closing a connection that holds many live
// subscriptions (watch parks until cancelled; edge/ticks waits on its timer)
// cancels all of them: every backend Subscribe returns, exactly once each,
// and every global task slot is free again. Both ways a connection ends: the
// TCP connection dropped, and a WebSocket close handshake.
func TestCloseEndsEverySubscription(t *testing.T) {
	for _, how := range []string{"tcp close", "close handshake"} {
		t.Run(how, func(t *testing.T) {
			cb := &countingBackend{}
			gw := startGateway(t, withCounting(cb))
			c := dial(t, gw)
			tr := newSubTracker(t)
			const n = 200
			var ids []string
			for i := range n {
				id := strconv.Itoa(i)
				ids = append(ids, id)
				if i%2 == 0 {
					c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"watch","params":{}}`)
				} else {
					c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/ticks","params":{"count":1000,"intervalMs":50}}`)
				}
			}
			tr.responses(c, ids...)
			if s := tr.stats(c); s.Subscriptions != n || s.Tasks != n {
				t.Fatalf("stats %+v, want %d subscriptions and tasks", s, n)
			}
			if e, r := cb.entered.Load(), cb.returned.Load(); e != n || r != 0 {
				t.Fatalf("Subscribe entered %d, returned %d; want %d, 0", e, r, n)
			}

			switch how {
			case "tcp close":
				c.conn.Close()
			case "close handshake":
				c.sendFrame(true, ws.OpClose, closeBody(1000, ""), true)
				for {
					op, p := c.readMessage()
					if op == ws.OpClose {
						break
					}
					tr.observe(string(p)) // events written before our close was read
				}
				c.expectEOF()
			}
			poll.Until(t, pollTimeout, fmt.Sprintf("all %d Subscribe calls to return and free their slots", n), func() (bool, string) {
				r, g := cb.returned.Load(), gw.pool.Running()
				return r == n && g == 0, fmt.Sprintf("Subscribe returned %d of %d, global tasks %d", r, n, g)
			})
			if e, r := cb.entered.Load(), cb.returned.Load(); e != n || r != n {
				t.Fatalf("Subscribe entered %d, returned %d; want %d each", e, r, n)
			}
		})
	}
}

// TestShutdownEndsSubscriptionsDone: graceful shutdown (CONTRACT.md section
// 9; loop's goAway: "subscriptions end with done, then 1001") with two live
// subscriptions and no other work: each gets subscription/closed "done"
// (without lastDeliveredCursor, as none of their events was sent) before the
// 1001 close frame, and Shutdown does not wait out ShutdownTimeout for them,
// since a live subscription is not in-flight work that will finish by itself
// (the bound is half of ShutdownTimeout, 2 s).
//
// Catches a close that discards the "done" notifications queued just before
// its close frame, and a drain that counts parked subscription producers as
// running work.
func TestShutdownEndsSubscriptionsDone(t *testing.T) {
	const shutdownTimeout = 4 * time.Second
	gw := startGateway(t, func(c *gwConfig) { c.loop.ShutdownTimeout = shutdownTimeout })
	c := dial(t, gw)
	tr := newSubTracker(t)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"watch","params":{}}`)
	c.sendText(`{"jsonrpc":"2.0","id":2,"method":"edge/ticks","params":{"count":10,"intervalMs":60000}}`)
	tr.responses(c, "1", "2")

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- gw.srv.Shutdown(context.Background()) }()
	for {
		op, p := c.readMessage()
		if op == ws.OpClose {
			if code := binary.BigEndian.Uint16(p); code != uint16(ws.StatusGoingAway) {
				t.Errorf("closed with %s, want 1001", describe(op, p))
			}
			break
		}
		tr.observe(string(p))
	}
	took := time.Since(start)
	for _, id := range []string{"s1", "s2"} {
		m, ok := tr.closed[id]
		if !ok {
			t.Errorf("%s: no subscription/closed before the 1001 close", id)
			continue
		}
		if m.Params.Reason != "done" || m.Params.LastDeliveredCursor != nil {
			t.Errorf("%s: closed with reason %q cursor %s, want done without cursor", id, m.Params.Reason, m.Params.LastDeliveredCursor)
		}
	}
	c.answerCloseAndExpectEOF()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(2 * shutdownTimeout):
		t.Fatalf("Shutdown did not return")
	}
	if took > shutdownTimeout/2 {
		t.Errorf("the close came %v after Shutdown started: it waited for the live subscriptions (ShutdownTimeout %v)", took, shutdownTimeout)
	}
}

// TestShutdownAnswersEstablishingSubscription: graceful shutdown starts
// while a subscription request is still establishing (its backend has not
// confirmed yet). It is in-flight work: CONTRACT.md section 9 lets it finish
// within ShutdownTimeout and delivers its response ("nothing accepted is
// silently lost"), after which the subscription ends "done" and the
// connection closes 1001. The backend confirms 300 ms after the drain began.
//
// Catches a drain that waits only for unary calls: the connection is closed
// at once, the producer is cancelled and the request never gets an answer.
func TestShutdownAnswersEstablishingSubscription(t *testing.T) {
	cb := &countingBackend{establish: make(chan struct{})}
	gw := startGateway(t, withCounting(cb), func(c *gwConfig) { c.loop.ShutdownTimeout = 4 * time.Second })
	opened := false
	t.Cleanup(func() {
		if !opened {
			close(cb.establish)
		}
	})
	c := dial(t, gw)
	tr := newSubTracker(t)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"watch","params":{}}`)
	poll.Until(t, pollTimeout, "watch to reach the backend", func() (bool, string) {
		return cb.entered.Load() == 1, "Subscribe not entered"
	})

	done := make(chan error, 1)
	go func() { done <- gw.srv.Shutdown(context.Background()) }()
	gw.waitDraining()
	confirm := time.AfterFunc(300*time.Millisecond, func() { close(cb.establish) })
	defer confirm.Stop()
	opened = true

	var msgs []string
	for {
		h, p, err := c.readFrame(readTimeout)
		if err != nil {
			t.Fatalf("after %q: %v", msgs, err)
		}
		if h.OpCode == ws.OpClose {
			msgs = append(msgs, describe(h.OpCode, p))
			break
		}
		msgs = append(msgs, string(p))
		tr.observe(string(p))
	}
	want := []string{
		`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1","runId":null,"atCursor":null}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done"}}`,
		`close 1001 "going away"`,
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(msgs, "\n  "), strings.Join(want, "\n  "))
	}
	c.answerCloseAndExpectEOF()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Shutdown did not return")
	}
}

// countingBackend wraps the memory backend: it counts Subscribe calls
// entered and returned, the events their producers handed over and edge/echo
// calls, and can hold edge/echo calls until released. Safe for concurrent use.
type countingBackend struct {
	*backend.Memory
	entered, returned atomic.Int64  // Subscribe calls
	events            atomic.Int64  // events the gateway took (Emit or EmitWait returned true)
	echoes            atomic.Int64  // edge/echo calls entered
	held              atomic.Int64  // edge/echo calls waiting on hold
	hold              chan struct{} // when set, edge/echo waits until it is closed (or ctx ends)
	// establish, when set, makes watch wait until it is closed before it
	// establishes, as an upstream that confirms a subscription slowly; a
	// cancelled ctx ends the wait with ctx.Err().
	establish chan struct{}
}

func (b *countingBackend) Call(ctx context.Context, method string, params, dst []byte) ([]byte, error) {
	if method == "edge/echo" {
		b.echoes.Add(1)
		if b.hold != nil {
			b.held.Add(1)
			select {
			case <-b.hold:
			case <-ctx.Done():
				return dst, ctx.Err()
			}
		}
	}
	return b.Memory.Call(ctx, method, params, dst)
}

func (b *countingBackend) Subscribe(ctx context.Context, method string, params []byte, s backend.Stream) error {
	b.entered.Add(1)
	defer b.returned.Add(1)
	if b.establish != nil && method == "watch" {
		select {
		case <-b.establish:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Memory.Subscribe(ctx, method, params, countingStream{s, &b.events})
}

// countingStream counts the events the gateway took from a producer.
type countingStream struct {
	backend.Stream
	events *atomic.Int64
}

func (s countingStream) Emit(cursor, body []byte) bool {
	ok := s.Stream.Emit(cursor, body)
	if ok {
		s.events.Add(1)
	}
	return ok
}

func (s countingStream) EmitWait(ctx context.Context, cursor, body []byte) bool {
	ok := s.Stream.EmitWait(ctx, cursor, body)
	if ok {
		s.events.Add(1)
	}
	return ok
}

// withCounting puts b in front of the gateway's memory backend.
func withCounting(b *countingBackend) func(*gwConfig) {
	return func(c *gwConfig) {
		b.Memory = c.rpc.Handler.(*backend.Memory)
		c.rpc.Handler = b
	}
}

// subCancel returns a subscription/cancel message.
func subCancel(subID string) string {
	return `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"` + subID + `"}}`
}

// tickEvent is the bytes of edge/ticks event n with data (CONTRACT.md section 8).
func tickEvent(subID string, n int, data string) string {
	s := `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"` + subID + `","cursor":"` + strconv.Itoa(n) + `","seq":` + strconv.Itoa(n)
	if data != "" {
		s += `,"data":"` + data + `"`
	}
	return s + `}}`
}

// subMsg is a server message as a subscription client reads it.
type subMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	Params struct {
		SubscriptionID      string          `json:"subscriptionId"`
		Cursor              json.RawMessage `json:"cursor"`
		Seq                 int             `json:"seq"`
		Reason              string          `json:"reason"`
		LastDeliveredCursor json.RawMessage `json:"lastDeliveredCursor"`
	} `json:"params"`
}

// subTracker reads a connection that carries subscriptions and checks every
// message against CONTRACT.md section 5 as it goes: an event only after its
// subscription's response, edge/ticks events in order (seq n with cursor
// "n"), nothing after subscription/closed, at most one event after a
// subscription/cancel was processed, and no subscription/closed for one.
type subTracker struct {
	t         *testing.T
	live      map[string]bool   // answered, not closed
	seq       map[string]int    // last event seq by subscription
	closed    map[string]subMsg // subscription/closed by subscription
	cancelled map[string]int    // events since the cancel was processed
	answers   map[string]string // responses by raw id, not yet taken
	seqN      int
}

func newSubTracker(t *testing.T) *subTracker {
	return &subTracker{t: t, live: map[string]bool{}, seq: map[string]int{}, closed: map[string]subMsg{},
		cancelled: map[string]int{}, answers: map[string]string{}}
}

// observe checks one message and records it.
func (tr *subTracker) observe(raw string) subMsg {
	tr.t.Helper()
	var m subMsg
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		tr.t.Fatalf("message %.200s: %v", raw, err)
	}
	id := m.Params.SubscriptionID
	switch m.Method {
	case "event":
		if !tr.live[id] {
			tr.t.Fatalf("event of %q, which is not live (not answered yet, or closed): %.200s", id, raw)
		}
		if n, ok := tr.cancelled[id]; ok {
			if n >= 1 {
				tr.t.Fatalf("second event of %s after its cancel was processed: %.200s", id, raw)
			}
			tr.cancelled[id] = n + 1
		}
		if m.Params.Seq != 0 {
			if want := tr.seq[id] + 1; m.Params.Seq != want || string(m.Params.Cursor) != `"`+strconv.Itoa(want)+`"` {
				tr.t.Fatalf("event of %s: seq %d cursor %s, want %d", id, m.Params.Seq, m.Params.Cursor, want)
			}
			tr.seq[id] = m.Params.Seq
		}
	case "subscription/closed":
		if !tr.live[id] {
			tr.t.Fatalf("subscription/closed of %q, which is not live: %s", id, raw)
		}
		if _, ok := tr.cancelled[id]; ok {
			tr.t.Fatalf("subscription/closed after subscription/cancel: %s", raw)
		}
		tr.live[id] = false
		tr.closed[id] = m
	case "":
		tr.answers[string(m.ID)] = raw
		var r struct {
			SubscriptionID string `json:"subscriptionId"`
		}
		if len(m.Result) > 0 && m.Result[0] == '{' && json.Unmarshal(m.Result, &r) == nil && r.SubscriptionID != "" {
			if _, seen := tr.seq[r.SubscriptionID]; seen {
				tr.t.Fatalf("subscription id %s handed out twice: %s", r.SubscriptionID, raw)
			}
			tr.live[r.SubscriptionID] = true
			tr.seq[r.SubscriptionID] = 0
		}
	default:
		tr.t.Fatalf("unexpected message %.200s", raw)
	}
	return m
}

// next reads and checks one message.
func (tr *subTracker) next(c *client) subMsg {
	tr.t.Helper()
	return tr.observe(c.readText())
}

// responses reads until every raw id in ids is answered and returns the
// answers by id.
func (tr *subTracker) responses(c *client, ids ...string) map[string]string {
	tr.t.Helper()
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		for {
			if a, ok := tr.answers[id]; ok {
				delete(tr.answers, id)
				out[id] = a
				break
			}
			tr.next(c)
		}
	}
	return out
}

// call sends a request with raw id and returns its answer, checking every
// message that arrives meanwhile.
func (tr *subTracker) call(c *client, id, method, params string) string {
	tr.t.Helper()
	c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":` + params + `}`)
	return tr.responses(c, id)[id]
}

// echo checks one edge/echo round trip.
func (tr *subTracker) echo(c *client) {
	tr.t.Helper()
	tr.seqN++
	id := `"echo-` + strconv.Itoa(tr.seqN) + `"`
	params := `{"n":` + strconv.Itoa(tr.seqN) + `}`
	if got, want := tr.call(c, id, "edge/echo", params), `{"jsonrpc":"2.0","id":`+id+`,"result":`+params+`}`; got != want {
		tr.t.Fatalf("echo: got %s, want %s", got, want)
	}
}

// stats asks edge/stats.
func (tr *subTracker) stats(c *client) stats {
	tr.t.Helper()
	tr.seqN++
	a := tr.call(c, `"stats-`+strconv.Itoa(tr.seqN)+`"`, "edge/stats", `{}`)
	var r struct {
		Result stats `json:"result"`
	}
	if err := json.Unmarshal([]byte(a), &r); err != nil {
		tr.t.Fatalf("edge/stats answer %s: %v", a, err)
	}
	return r.Result
}

// settle polls edge/stats until the connection holds tasks slots and
// inFlight ids (a producer returns asynchronously after its cancel).
func (tr *subTracker) settle(c *client, tasks, inFlight int) {
	tr.t.Helper()
	poll.Until(tr.t, pollTimeout, fmt.Sprintf("tasks %d inFlightIds %d", tasks, inFlight), func() (bool, string) {
		s := tr.stats(c)
		return s.Tasks == tasks && s.InFlightIDs == inFlight, fmt.Sprintf("stats %+v", s)
	})
}

// awaitEvents reads until subscription subID has delivered event n.
func (tr *subTracker) awaitEvents(c *client, subID string, n int) {
	tr.t.Helper()
	for tr.seq[subID] < n {
		tr.next(c)
	}
}

// markCancelled records that subscription/cancel of subID has been processed:
// from now on at most one more event of it may arrive and never
// subscription/closed.
func (tr *subTracker) markCancelled(subID string) {
	if _, ok := tr.cancelled[subID]; !ok {
		tr.cancelled[subID] = 0
	}
}

// dialRcvBuf connects with the client's socket receive buffer set to size
// before connecting (so the advertised window stays small) and completes the
// WebSocket upgrade.
func dialRcvBuf(t *testing.T, gw *gateway, size int) *client {
	t.Helper()
	d := net.Dialer{Timeout: readTimeout, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", gw.addr)
	if err != nil {
		t.Fatalf("dial %s: %v", gw.addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	br, resp, key := upgradeOn(t, conn, gw.addr)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key) {
		t.Fatalf("upgrade: status %d", resp.StatusCode)
	}
	return &client{t: t, conn: conn, br: br}
}
