package test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/upstream"
)

// This file holds the proxy's failure tests (CONTRACT.md section 10): an
// upstream that dies with work in flight, a failing replica, the upstream
// timeout, and garbage from an upstream. Every race is scheduled with gates
// on the upstream, never with sleeps.

// failureConfig reconnects quickly, so that the tests see an upstream come
// back within a poll.
var failureConfig = upstream.Config{BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}

// TestUpstreamDeath: an upstream dies (tcp and ws: its gateway stops and
// every connection closes unanswered; exec: the child is killed with
// SIGKILL) while 10 clients have 200 calls and 50 subscriptions in flight
// on it, 20 of the subscriptions streaming. Every call is answered
// UPSTREAM_UNAVAILABLE, every subscription ends UPSTREAM_LOST with the
// cursor of the last event its client received (none for those that had
// none), no client waits, and every connection's stats are back to zero.
// Then the upstream comes back (on the same port, or restarted by the
// supervisor) and calls and subscriptions are served again.
func TestUpstreamDeath(t *testing.T) {
	for _, transport := range []string{"tcp", "ws", "exec"} {
		t.Run(transport, func(t *testing.T) { testUpstreamDeath(t, transport) })
	}
}

func testUpstreamDeath(t *testing.T, transport string) {
	const (
		clients   = 10
		calls     = 20 // gated calls per client
		streaming = 2  // subscriptions per client with an event every 20 ms
		silent    = 3  // subscriptions per client with no event before the death
	)
	var u *upstreamEdge
	var url string
	switch transport {
	case "tcp":
		u = startUpstreamEdge(t)
		url = u.nd
	case "ws":
		u = startUpstreamEdge(t)
		url = u.ws
	case "exec":
		url = "exec:" + edgeBinary(t) + " --stdio"
	}
	p := startProxy(t, failureConfig, []string{"e=" + url})
	watchers := make([]*watcher, clients)
	for i := range watchers {
		watchers[i] = startWatcher(t, p.gateway)
		var b bytes.Buffer
		for id := 1; id <= calls; id++ {
			b.Write(textFrame(gate(strconv.Itoa(id), "death")))
		}
		for s := range streaming + silent {
			params := `{"count":1000000,"intervalMs":20}`
			if s >= streaming {
				params = `{"count":10,"intervalMs":60000}`
			}
			b.Write(textFrame(`{"jsonrpc":"2.0","id":` + strconv.Itoa(101+s) + `,"method":"edge/ticks","params":` + params + `}`))
		}
		watchers[i].write(b.Bytes())
	}
	// Everything is in flight: every subscription established and every
	// streaming one has delivered, every call forwarded and held by the
	// upstream.
	for _, c := range watchers {
		c.until(readTimeout, "subscriptions established and streaming", func() bool {
			for s := range streaming + silent {
				sub := c.byReq[strconv.Itoa(101+s)]
				if sub == nil || (s < streaming && sub.events == 0) {
					return false
				}
			}
			return true
		})
		for s := range streaming + silent {
			delete(c.answers, strconv.Itoa(101+s))
		}
		c.settle(calls+streaming+silent, calls, streaming+silent)
	}
	switch transport {
	case "exec":
		// The child reads in order: once it answered a call sent after
		// the gated ones, it holds all of them.
		watchers[0].sendText(`{"jsonrpc":"2.0","id":"barrier","method":"edge/echo","params":{}}`)
		if got := watchers[0].answer(`"barrier"`); got != `{"jsonrpc":"2.0","id":"barrier","result":{}}` {
			t.Fatalf("barrier: %s", got)
		}
		pids := childPIDs(t, edgeBinary(t), "--stdio")
		if len(pids) != 1 {
			t.Fatalf("exec children %v, want one", pids)
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	default:
		u.waitGate(t, "death", clients*calls)
		u.stop(t)
	}
	for _, c := range watchers {
		c.until(2*readTimeout, "every call answered and every subscription closed", func() bool {
			for _, s := range c.subs {
				if s.closed == "" {
					return false
				}
			}
			return len(c.answers) == calls
		})
		for id := 1; id <= calls; id++ {
			if got, want := c.answers[strconv.Itoa(id)], upstreamUnavailable(strconv.Itoa(id)); got != want {
				t.Fatalf("call %d: got %s, want %s", id, got, want)
			}
		}
		clear(c.answers)
		for s := range streaming + silent {
			sub := c.byReq[strconv.Itoa(101+s)]
			if want := closedLost(sub.id, sub.last); sub.closed != want {
				t.Fatalf("subscription %s after %d events: got %s, want %s", sub.id, sub.events, sub.closed, want)
			}
			if s >= streaming && sub.events != 0 {
				t.Fatalf("silent subscription %s had %d events", sub.id, sub.events)
			}
		}
		c.settle(0, 0, 0)
	}
	if transport != "exec" {
		u = u.restart(t)
	}
	// The upstream is back: a call polls until it is served (each failed
	// attempt is answered UPSTREAM_UNAVAILABLE at once), then a
	// subscription runs to its end.
	c := watchers[0]
	deadline := time.Now().Add(pollTimeout)
	for attempt := 0; ; attempt++ {
		id := `"again-` + strconv.Itoa(attempt) + `"`
		c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/echo","params":{"back":true}}`)
		got := c.answer(id)
		if got == `{"jsonrpc":"2.0","id":`+id+`,"result":{"back":true}}` {
			break
		}
		if got != upstreamUnavailable(id) {
			t.Fatalf("while the upstream restarts: %s", got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream did not come back within %s", pollTimeout)
		}
		time.Sleep(5 * time.Millisecond) // paces the attempts
	}
	c.sendText(`{"jsonrpc":"2.0","id":"t","method":"edge/ticks","params":{"count":3,"intervalMs":0}}`)
	c.until(readTimeout, "the new subscription's end", func() bool {
		s := c.byReq[`"t"`]
		return s != nil && s.closed != ""
	})
	if s := c.byReq[`"t"`]; s.events != 3 || s.closed != `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"`+s.id+`","reason":"done","lastDeliveredCursor":"3"}}` {
		t.Fatalf("after the restart: %d events, then %s", s.events, s.closed)
	}
	delete(c.answers, `"t"`)
	c.settle(0, 0, 0)
	quietAll(t, watchers...)
}

// childPIDs returns the pids of this process's children whose command line
// is argv (from /proc: the children of each of its threads).
func childPIDs(t *testing.T, argv ...string) []int {
	t.Helper()
	files, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil || len(files) == 0 {
		t.Skipf("no /proc/self/task/*/children (%v): cannot find the exec child", err)
	}
	want := strings.Join(argv, "\x00") + "\x00"
	var pids []int
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(field)
			if err != nil {
				continue
			}
			if cmd, _ := os.ReadFile("/proc/" + field + "/cmdline"); string(cmd) == want {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestUpstreamFailingReplica: of three replicas of one upstream, one has
// nothing listening. Calls spread over the two that are up, fewest in
// flight first, and none is sent to the third. When one of the two dies,
// its calls in flight are answered UPSTREAM_UNAVAILABLE, the others still
// complete, and new calls all go to the survivor without waiting. With no
// replica up, every call is answered UPSTREAM_UNAVAILABLE at once (nothing
// queues for a reconnect, and nothing arrives late once a replica is back).
func TestUpstreamFailingReplica(t *testing.T) {
	a, b := startUpstreamEdge(t), startUpstreamEdge(t)
	dead := "tcp://" + testgw.FreeAddr(t, "127.0.0.1")
	cfg := failureConfig
	cfg.Conns, cfg.Timeout = 1, upstream.DefaultTimeout // a queued call would wait 30 s
	p := startProxyUp(t, cfg, 2, []string{"e=" + a.nd, "e=" + dead, "e=" + b.nd})
	c := startWatcher(t, p.gateway)

	// Both live replicas take gated calls: 20 each, as each call goes to
	// the one with fewer in flight.
	sendGates(c, 1, 40, "r1")
	a.waitGate(t, "r1", 20)
	b.waitGate(t, "r1", 20)
	echoes(c, "one", 100)
	openGate(t, a, "r1", 20)
	openGate(t, b, "r1", 20)
	for id := 1; id <= 40; id++ {
		if got := c.answer(strconv.Itoa(id)); got != gateResult(strconv.Itoa(id), "r1") {
			t.Fatalf("call %d: %s", id, got)
		}
	}

	// b dies with 20 calls in flight.
	sendGates(c, 41, 80, "r2")
	a.waitGate(t, "r2", 20)
	b.waitGate(t, "r2", 20)
	b.stop(t)
	c.until(readTimeout, "the calls on the dead replica answered", func() bool { return len(c.answers) == 20 })
	for id, got := range c.answers {
		if got != upstreamUnavailable(id) {
			t.Fatalf("call %s on the dead replica: %s", id, got)
		}
	}
	lost := len(c.answers)
	clear(c.answers)
	waitUp(t, p.set.Upstreams()[0], 1)
	echoes(c, "two", 100)
	openGate(t, a, "r2", 20)
	c.until(readTimeout, "the calls on the live replica answered", func() bool { return len(c.answers) == 40-lost })
	for id, got := range c.answers {
		if got != gateResult(id, "r2") {
			t.Fatalf("call %s on the live replica: %s", id, got)
		}
	}
	clear(c.answers)

	// No replica is up: answered at once, well within the upstream timeout.
	a.stop(t)
	waitUp(t, p.set.Upstreams()[0], 0)
	start := time.Now()
	var batch bytes.Buffer
	for i := range 50 {
		batch.Write(textFrame(`{"jsonrpc":"2.0","id":"down-` + strconv.Itoa(i) + `","method":"edge/echo","params":{}}`))
	}
	c.write(batch.Bytes())
	for i := range 50 {
		id := `"down-` + strconv.Itoa(i) + `"`
		if got := c.answer(id); got != upstreamUnavailable(id) {
			t.Fatalf("with no replica up: %s", got)
		}
	}
	if d := time.Since(start); d > readTimeout {
		t.Fatalf("refusing 50 calls took %s", d)
	}
	c.settle(0, 0, 0)
	a = a.restart(t)
	waitUp(t, p.set.Upstreams()[0], 1)
	echoes(c, "three", 10)
	quietAll(t, c)
}

// sendGates sends edge/gate calls with ids from..to on gate name in one write.
func sendGates(c *watcher, from, to int, name string) {
	c.t.Helper()
	var b bytes.Buffer
	for id := from; id <= to; id++ {
		b.Write(textFrame(gate(strconv.Itoa(id), name)))
	}
	c.write(b.Bytes())
}

// echoes sends n pipelined edge/echo calls and requires every answer.
func echoes(c *watcher, tag string, n int) {
	c.t.Helper()
	var b bytes.Buffer
	for i := range n {
		b.Write(textFrame(`{"jsonrpc":"2.0","id":"` + tag + strconv.Itoa(i) + `","method":"edge/echo","params":{"i":` + strconv.Itoa(i) + `}}`))
	}
	c.write(b.Bytes())
	for i := range n {
		id := `"` + tag + strconv.Itoa(i) + `"`
		if got, want := c.answer(id), `{"jsonrpc":"2.0","id":`+id+`,"result":{"i":`+strconv.Itoa(i)+`}}`; got != want {
			c.t.Fatalf("got  %s\nwant %s", got, want)
		}
	}
}

// openGate opens gate name on the upstream edge u and requires that it
// released n calls.
func openGate(t *testing.T, u *upstreamEdge, name string, n int) {
	t.Helper()
	res, err := u.gw.Mem.Call(t.Context(), "edge/open", []byte(`{"name":"`+name+`"}`), nil)
	if want := `{"released":` + strconv.Itoa(n) + `}`; err != nil || string(res) != want {
		t.Fatalf("edge/open %s: %s, %v; want %s", name, res, err, want)
	}
}

// TestUpstreamTimeout: a call the upstream does not answer within
// --upstream-timeout is answered UPSTREAM_TIMEOUT, no sooner, and its slot
// and id are free at once. A WebSocket upstream is sent the cancel (the
// upstream edge leaves the gate); an NDJSON one still holds the call, and
// its late answer is counted late (not as a dropped message) and finishes
// nothing.
func TestUpstreamTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			u := startUpstreamEdge(t)
			url := u.nd
			if transport == "ws" {
				url = u.ws
			}
			p := startProxy(t, upstream.Config{Conns: 1, Timeout: timeout}, []string{"e=" + url})
			c := dial(t, p.gateway)
			start := time.Now()
			c.sendText(gate("1", "slow"))
			u.waitGate(t, "slow", 1)
			c.expectText(upstreamTimeout("1"))
			if d := time.Since(start); d < timeout {
				t.Fatalf("timed out after %s, before the %s timeout", d, timeout)
			}
			c.expectSettled(0, 0)
			up := p.set.Upstreams()[0]
			if transport == "ws" {
				u.waitGate(t, "slow", 0) // the cancel was forwarded
			} else {
				if n := u.gw.Mem.Waiting("slow"); n != 1 {
					t.Fatalf("%d calls wait on the upstream's gate, want 1: NDJSON has no cancel", n)
				}
				openGate(t, u, "slow", 1)
				poll.Until(t, pollTimeout, "the late answer read and counted late, not dropped", func() (bool, string) {
					return up.Late() == 1 && up.Dropped() == 0, fmt.Sprintf("Late() = %d, Dropped() = %d", up.Late(), up.Dropped())
				})
			}
			c.sendText(gate("1", "slow2")) // the id is free and the connection serves
			u.waitGate(t, "slow2", 1)
			openGate(t, u, "slow2", 1)
			c.expectText(gateResult("1", "slow2"))
			c.expectSettled(0, 0)
		})
	}
}

// TestUpstreamGarbage: a hand-written NDJSON upstream sends, around correct
// answers, a line that is not JSON, an answer to an id edge never sent, one
// carrying the client's own id, a line over --max-message-bytes that would
// answer a real call, a request, an event of an unknown subscription and a
// batch. Only the correct answers and events reach the client; the request
// is answered -32601 on the upstream connection; the six messages that are
// not answers or notifications are counted in Dropped (an event of an
// unknown subscription is a valid notification, ignored as after a cancel,
// and not counted); the burst is logged once, and the next burst's log line
// reports what the first one suppressed. The proxy keeps serving.
func TestUpstreamGarbage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	var br *bufio.Reader
	go func() {
		if conn, err := ln.Accept(); err == nil {
			// The probe first, which the proxy waits for (as any JSON-RPC
			// server would answer it).
			br = bufio.NewReader(conn)
			if line, err := br.ReadString('\n'); err == nil && line == probeRequest+"\n" {
				io.WriteString(conn, probeAnswer)
			}
			accepted <- conn
		}
	}()
	logs := &testgw.Buffer{}
	p := startProxy(t, upstream.Config{Conns: 1, MaxMessageBytes: 1024, Logger: testLogger(logs)},
		[]string{"e=tcp://" + ln.Addr().String()})
	var up net.Conn
	select {
	case up = <-accepted:
	case <-time.After(readTimeout):
		t.Fatal("the proxy did not connect")
	}
	t.Cleanup(func() { up.Close() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(br)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// readLine returns the next line the proxy sent the upstream.
	readLine := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the proxy closed the upstream connection")
			}
			return l
		case <-time.After(readTimeout):
			t.Fatal("nothing from the proxy")
		}
		return ""
	}
	// requestID returns the upstream id of a forwarded request, checking
	// that the rest passed byte for byte.
	requestID := func(line, method, params string) string {
		t.Helper()
		rest, ok := strings.CutPrefix(line, `{"jsonrpc":"2.0","id":`)
		id, tail, _ := strings.Cut(rest, ",")
		if _, err := strconv.ParseUint(id, 10, 64); !ok || err != nil || tail != `"method":"`+method+`","params":`+params+`}` {
			t.Fatalf("forwarded %s, want method %s params %s with an integer id", line, method, params)
		}
		return id
	}
	write := func(s string) {
		t.Helper()
		up.SetWriteDeadline(time.Now().Add(readTimeout))
		if _, err := io.WriteString(up, s); err != nil {
			t.Fatal(err)
		}
	}
	c := dial(t, p.gateway)
	c.sendText(`{"jsonrpc":"2.0","id":"a","method":"edge/echo","params":{"x":1}}`)
	echoID := requestID(readLine(), "edge/echo", `{"x":1}`)
	c.sendText(`{"jsonrpc":"2.0","id":"b","method":"edge/ticks","params":{"count":5,"intervalMs":0}}`)
	subID := requestID(readLine(), "edge/ticks", `{"count":5,"intervalMs":0}`)
	write(strings.Join([]string{
		`garbage`,
		`{"jsonrpc":"2.0","id":1000,"result":{"x":"unknown id"}}`,
		`{"jsonrpc":"2.0","id":"a","result":{"x":"the client's id"}}`,
		`{"jsonrpc":"2.0","id":` + echoID + `,"result":"` + strings.Repeat("x", 2000) + `"}`,
		`{"jsonrpc":"2.0","id":77,"method":"edge/echo","params":{}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"nope","cursor":"9"}}`,
		`{"jsonrpc":"2.0","id":` + subID + `,"result":{"subscriptionId":"up-1"}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"up-1","cursor":"1","seq":1}}`,
		`[1,2,3]`,
		`{"jsonrpc":"2.0","id":` + echoID + `,"result":{"x":1}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"up-1","reason":"done","lastDeliveredCursor":"1"}}`,
	}, "\n") + "\n")
	c.expectTexts(`{"jsonrpc":"2.0","id":"a","result":{"x":1}}`,
		`{"jsonrpc":"2.0","id":"b","result":{"subscriptionId":"s1"}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"1"}}`)
	c.expectSettled(0, 0)
	if got, want := readLine(), `{"jsonrpc":"2.0","id":77,"error":{"code":-32601,"message":"Method not found"}}`; got != want {
		t.Fatalf("the upstream's request was answered %s, want %s", got, want)
	}
	u := p.set.Upstreams()[0]
	if n := u.Dropped(); n != 6 {
		t.Fatalf("Dropped() = %d, want 6", n)
	}
	if n := strings.Count(logs.String(), "upstream message dropped"); n != 1 {
		t.Fatalf("the burst was logged %d times, want once:\n%s", n, logs.String())
	}

	time.Sleep(1100 * time.Millisecond) // paces the upstream: the next burst comes after a quiet second
	write("bad\nbad\n")
	c.sendText(`{"jsonrpc":"2.0","id":"c","method":"edge/echo","params":{}}`)
	write(`{"jsonrpc":"2.0","id":` + requestID(readLine(), "edge/echo", `{}`) + `,"result":{"after":"garbage"}}` + "\n")
	c.expectText(`{"jsonrpc":"2.0","id":"c","result":{"after":"garbage"}}`)
	if n := u.Dropped(); n != 8 {
		t.Fatalf("Dropped() = %d, want 8", n)
	}
	var drops []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "upstream message dropped") {
			drops = append(drops, l)
		}
	}
	if len(drops) != 2 || !strings.Contains(drops[1], "droppedSinceLastLog=5 droppedTotal=7") {
		t.Fatalf("drop log lines %q, want two, the second reporting the 5 the first burst suppressed", drops)
	}
	c.expectSettled(0, 0)
}
