package test

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/internal/testnats"
	"github.com/openengine/edge/topics"
	"github.com/openengine/edge/upstream"
)

// This file tests edge/topic and edge/publish across edges over NATS
// (CONTRACT.md section 13, package topics): two in-process edges share an
// embedded NATS server (with JetStream in a temp dir where a test needs it).

// topicsEdge is one edge with topics over NATS.
type topicsEdge struct {
	*gateway
	tops *topics.Topics
}

// startTopicsEdge starts Topics on url and an edge serving edge/topic and
// edge/publish with them (every other method by next's routes, or the
// memory backend). Both stop in t.Cleanup, the topics after the edge.
// wait: wait until the topics are connected.
func startTopicsEdge(t *testing.T, url string, js, wait bool, next *upstream.Set) *topicsEdge {
	t.Helper()
	logs := &testgw.Buffer{}
	tops, err := topics.New(topics.Config{URL: url, Prefix: "t", JetStream: js,
		BackoffMax: 200 * time.Millisecond,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := tops.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tops.Close()
		if t.Failed() {
			t.Logf("topics logs:\n%s", logs.String())
		}
	})
	if wait {
		waitTopics(t, tops)
	}
	gw := startGateway(t, func(c *gwConfig) {
		if next != nil {
			c.rpc.Forward = tops.Route(next.Forwarder)
		} else {
			c.rpc.Forward = tops.Route(nil)
		}
	})
	return &topicsEdge{gateway: gw, tops: tops}
}

func waitTopics(t *testing.T, tops *topics.Topics) {
	t.Helper()
	poll.Until(t, pollTimeout, "topics connected to NATS", func() (bool, string) {
		return tops.Ready(), "not connected"
	})
}

// waitReopened waits until tops is usable again after a loss of NATS: it
// has opened more than before times.
func waitReopened(t *testing.T, tops *topics.Topics, before uint64) {
	t.Helper()
	poll.Until(t, pollTimeout, "topics reconnected to NATS", func() (bool, string) {
		return tops.Ready() && tops.Opens() > before, "opened " + strconv.FormatUint(tops.Opens(), 10) + " times"
	})
}

// subscribeTopic subscribes c to name (from cursor from, unless empty) with
// request id and returns the subscription id.
func (c *client) subscribeTopic(id int, name, from string) string {
	c.t.Helper()
	p := `{"name":` + strconv.Quote(name)
	if from != "" {
		p += `,"fromCursor":` + strconv.Quote(from)
	}
	c.sendText(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"edge/topic","params":` + p + `}}`)
	r := parseResponse(c.t, c.readText())
	var res struct {
		SubscriptionID string `json:"subscriptionId"`
	}
	if string(r.ID) != strconv.Itoa(id) || r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.SubscriptionID == "" {
		c.t.Fatalf("edge/topic %s: %+v", p, r)
	}
	return res.SubscriptionID
}

// publishText is edge/publish of {"i":i} on name with request id.
func publishText(id, name string, i int) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"edge/publish","params":{"name":` + strconv.Quote(name) + `,"data":{"i":` + strconv.Itoa(i) + `}}}`
}

func delivered(id string, n int) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{"delivered":` + strconv.Itoa(n) + `}}`
}

// topicEvent is one edge/topic event.
type topicEvent struct {
	sub    string
	cursor string
	seq    int64
	i      int
}

// readTopicEvent reads the next message, which must be an event of
// subscription sub carrying {"i":n}, with seq equal to its cursor.
func (c *client) readTopicEvent(sub string) topicEvent {
	c.t.Helper()
	msg := c.readText()
	var m struct {
		Method string `json:"method"`
		Params struct {
			SubscriptionID string `json:"subscriptionId"`
			Cursor         string `json:"cursor"`
			Seq            int64  `json:"seq"`
			Data           struct {
				I *int `json:"i"`
			} `json:"data"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(msg), &m); err != nil || m.Method != "event" || m.Params.SubscriptionID != sub || m.Params.Data.I == nil {
		c.t.Fatalf("got %s, want an event of %s", msg, sub)
	}
	if m.Params.Cursor != strconv.FormatInt(m.Params.Seq, 10) {
		c.t.Fatalf("event %s: cursor and seq differ", msg)
	}
	return topicEvent{sub: sub, cursor: m.Params.Cursor, seq: m.Params.Seq, i: *m.Params.Data.I}
}

// expectTopicEvents reads the events of sub carrying i = from..to, in
// order, with strictly increasing cursors, and returns them by i.
func (c *client) expectTopicEvents(sub string, from, to int) map[int]topicEvent {
	c.t.Helper()
	got := make(map[int]topicEvent)
	var last int64
	i := from
	defer func() {
		if c.t.Failed() {
			c.t.Logf("reading the event i=%d of %s (events %d to %d)", i, sub, from, to)
		}
	}()
	for ; i <= to; i++ {
		e := c.readTopicEvent(sub)
		if e.i != i {
			c.t.Fatalf("event of %s carries i=%d, want %d (a gap or a duplicate)", sub, e.i, i)
		}
		if e.seq <= last {
			c.t.Fatalf("event i=%d of %s: seq %d after %d", i, sub, e.seq, last)
		}
		last = e.seq
		got[i] = e
	}
	return got
}

// expectLostTopic reads the subscription/closed UPSTREAM_LOST of sub with
// cursor and checks it came within the contract's 5 s of since.
func (c *client) expectLostTopic(sub, cursor string, since time.Time) {
	c.t.Helper()
	c.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"` + sub + `","reason":"UPSTREAM_LOST","lastDeliveredCursor":"` + cursor + `"}}`)
	if d := time.Since(since); d > 5*time.Second {
		c.t.Fatalf("UPSTREAM_LOST after %s, want within 5s", d)
	}
}

// TestTopicsAcrossEdges: a publish on edge A reaches the subscribers of the
// topic on A and on B exactly once each, in publish order, and not those of
// another topic; edge/publish answers with this edge's subscribers.
func TestTopicsAcrossEdges(t *testing.T) {
	ns := testnats.Start(t)
	a := startTopicsEdge(t, ns.ClientURL(), false, true, nil)
	b := startTopicsEdge(t, ns.ClientURL(), false, true, nil)
	ca, cb1, cb2, other := dial(t, a.gateway), dial(t, b.gateway), dial(t, b.gateway), dial(t, b.gateway)
	sa := ca.subscribeTopic(1, "news.eu", "")
	sb1 := cb1.subscribeTopic(1, "news.eu", "")
	sb2 := cb2.subscribeTopic(1, "news.eu", "")
	so := other.subscribeTopic(1, "news.us", "")
	pub := dial(t, a.gateway)
	const n = 50
	for i := 1; i <= n; i++ {
		pub.sendText(publishText(strconv.Itoa(i), "news.eu", i))
	}
	for i := 1; i <= n; i++ {
		pub.expectText(delivered(strconv.Itoa(i), 1)) // A's one subscriber
	}
	for _, x := range []struct {
		c   *client
		sub string
	}{{ca, sa}, {cb1, sb1}, {cb2, sb2}} {
		evs := x.c.expectTopicEvents(x.sub, 1, n)
		if evs[1].seq != 1 || evs[n].seq != n {
			t.Fatalf("plain topic sequence from %d to %d, want 1 to %d", evs[1].seq, evs[n].seq, n)
		}
	}
	// From B: B's two subscribers are counted.
	pubB := dial(t, b.gateway)
	pubB.sendText(publishText("1", "news.eu", n+1))
	pubB.expectText(delivered("1", 2))
	// Then a marker on each topic: events arrive in publish order, so the
	// marker coming next shows that nothing was repeated.
	pubB.sendText(publishText("3", "news.us", 0))
	pubB.expectText(delivered("3", 1))
	for _, x := range []struct {
		c   *client
		sub string
	}{{ca, sa}, {cb1, sb1}, {cb2, sb2}} {
		x.c.expectTopicEvents(x.sub, n+1, n+1)
	}
	if e := other.readTopicEvent(so); e.i != 0 {
		t.Fatalf("news.us subscriber got i=%d, want only the marker 0", e.i)
	}
	// A subscriber that left gets nothing more; the others still do.
	cb1.sendText(`{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"` + sb1 + `"}}`)
	cb1.expectSettled(0, 0)
	pubB.sendText(publishText("2", "news.eu", n+2))
	pubB.expectText(delivered("2", 1))
	pubB.sendText(publishText("4", "news.eu", n+3))
	pubB.expectText(delivered("4", 1))
	ca.expectTopicEvents(sa, n+2, n+3)
	cb2.expectTopicEvents(sb2, n+2, n+3)
	cb1.expectNoMessage()
}

// TestTopicsParams: names that are not NATS subject tokens and fromCursor
// without JetStream are refused with -32602; edge/topic and edge/publish
// are the edge's own even when --route sends every method to an upstream.
func TestTopicsParams(t *testing.T) {
	ns := testnats.Start(t)
	// An upstream that is never started: what is routed to it fails.
	set, err := upstream.NewSet([]upstream.Spec{{Name: "far", URL: "tcp://127.0.0.1:1"}},
		[]upstream.Route{{Pattern: "*", Target: "far"}}, upstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := startTopicsEdge(t, ns.ClientURL(), false, true, set)
	c := dial(t, e.gateway)
	for i, name := range []string{"", "a..b", ".a", "a.", "a b", "a.*", ">", "a\tb", strings.Repeat("x", 257)} {
		id := strconv.Itoa(i + 1)
		c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/topic","params":{"name":` + strconv.Quote(name) + `}}`)
		if r := parseResponse(t, c.readText()); r.Error == nil || r.Error.Code != -32602 {
			t.Fatalf("edge/topic name %q: %+v, want -32602", name, r)
		}
		c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/publish","params":{"name":` + strconv.Quote(name) + `,"data":1}}`)
		if r := parseResponse(t, c.readText()); r.Error == nil || r.Error.Code != -32602 {
			t.Fatalf("edge/publish name %q: %+v, want -32602", name, r)
		}
	}
	c.sendText(`{"jsonrpc":"2.0","id":20,"method":"edge/topic","params":{"name":"a","fromCursor":"3"}}`)
	if r := parseResponse(t, c.readText()); r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "--jetstream") {
		t.Fatalf("fromCursor without JetStream: %+v, want -32602 naming --jetstream", r)
	}
	c.sendText(`{"jsonrpc":"2.0","id":21,"method":"edge/echo","params":{}}`)
	c.expectText(upstreamError("21", "UPSTREAM_UNAVAILABLE")) // the route is in force
	s := c.subscribeTopic(22, "a", "")
	c.sendText(publishText("23", "a", 7))
	// The event may come before the answer: NATS delivers it while the
	// publishing edge waits for the flush.
	c.expectTexts(delivered("23", 1),
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"`+s+`","cursor":"1","seq":1,"data":{"i":7}}}`)
}

// TestTopicsNATSDown: with the NATS server gone, subscriptions end
// UPSTREAM_LOST with their last delivered cursor within 5 s, and edge/topic
// and edge/publish answer UPSTREAM_UNAVAILABLE until NATS is back; then they
// work again. An edge started while NATS is unreachable answers the same.
func TestTopicsNATSDown(t *testing.T) {
	ns := testnats.Start(t)
	e := startTopicsEdge(t, ns.ClientURL(), false, true, nil)
	c, pub := dial(t, e.gateway), dial(t, e.gateway)
	s := c.subscribeTopic(1, "x", "")
	for i := 1; i <= 3; i++ {
		pub.sendText(publishText(strconv.Itoa(i), "x", i))
		pub.expectText(delivered(strconv.Itoa(i), 1))
	}
	evs := c.expectTopicEvents(s, 1, 3)
	port := testnats.Port(ns)
	start := time.Now()
	ns.Shutdown()
	ns.WaitForShutdown()
	c.expectLostTopic(s, evs[3].cursor, start)
	c.sendText(`{"jsonrpc":"2.0","id":2,"method":"edge/topic","params":{"name":"x"}}`)
	c.expectText(upstreamError("2", "UPSTREAM_UNAVAILABLE"))
	pub.sendText(publishText("9", "x", 9))
	pub.expectText(upstreamError("9", "UPSTREAM_UNAVAILABLE"))
	c.expectSettled(0, 0)
	late := startTopicsEdge(t, ns.ClientURL(), false, false, nil)
	cl := dial(t, late.gateway)
	cl.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/topic","params":{"name":"x"}}`)
	cl.expectText(upstreamError("1", "UPSTREAM_UNAVAILABLE"))

	testnats.StartWith(t, testnats.Config{Port: port})
	waitTopics(t, e.tops)
	waitTopics(t, late.tops)
	s = c.subscribeTopic(3, "x", "")
	sl := cl.subscribeTopic(2, "x", "")
	pub.sendText(publishText("10", "x", 10))
	pub.expectText(delivered("10", 1))
	c.expectTopicEvents(s, 10, 10)
	cl.expectTopicEvents(sl, 10, 10)
}

// TestTopicsJetStreamReplay: with JetStream, a subscription from a cursor
// in the middle gets exactly the events after it, then the live ones, while
// publishes go on during the switch: every event of the live subscriber
// from there on, with the same cursors (stream sequences), no gap and no
// duplicate.
func TestTopicsJetStreamReplay(t *testing.T) {
	ns := testnats.StartWith(t, testnats.Config{StoreDir: t.TempDir()})
	a := startTopicsEdge(t, ns.ClientURL(), true, true, nil)
	b := startTopicsEdge(t, ns.ClientURL(), true, true, nil)
	live := dial(t, b.gateway)
	sl := live.subscribeTopic(1, "orders", "")
	pub := dial(t, a.gateway)
	// Another topic's events share the stream: its sequences have gaps
	// that are not this topic's.
	// At most 200 publishes in flight: below the connection's 256 task
	// slots.
	const first, mid, total = 40, 20, 240
	for i := 1; i <= first; i++ {
		pub.sendText(publishText(strconv.Itoa(i), "orders", i))
		pub.sendText(publishText(strconv.Itoa(-i), "other", i))
	}
	for i := 1; i <= first; i++ {
		pub.expectText(delivered(strconv.Itoa(i), 0))
		pub.expectText(delivered(strconv.Itoa(-i), 0))
	}
	seen := live.expectTopicEvents(sl, 1, first)
	// Half of the rest is on its way while the replay starts, half after.
	for i := first + 1; i <= total/2; i++ {
		pub.sendText(publishText(strconv.Itoa(i), "orders", i))
	}
	replay := dial(t, b.gateway)
	sr := replay.subscribeTopic(1, "orders", seen[mid].cursor)
	for i := total/2 + 1; i <= total; i++ {
		pub.sendText(publishText(strconv.Itoa(i), "orders", i))
	}
	got := replay.expectTopicEvents(sr, mid+1, total)
	for i := first + 1; i <= total; i++ {
		pub.expectText(delivered(strconv.Itoa(i), 0))
	}
	for i, e := range live.expectTopicEvents(sl, first+1, total) {
		seen[i] = e
	}
	for i := mid + 1; i <= total; i++ {
		if got[i].cursor != seen[i].cursor {
			t.Fatalf("event i=%d: replay cursor %s, live cursor %s", i, got[i].cursor, seen[i].cursor)
		}
	}
	// Both go on live; from the last cursor there is only what follows.
	pub.sendText(publishText("1000", "orders", total+1))
	pub.expectText(delivered("1000", 0))
	live.expectTopicEvents(sl, total+1, total+1)
	last := replay.expectTopicEvents(sr, total+1, total+1)[total+1]
	end := dial(t, b.gateway)
	se := end.subscribeTopic(1, "orders", last.cursor)
	pub.sendText(publishText("1001", "orders", total+2))
	pub.expectText(delivered("1001", 0))
	end.expectTopicEvents(se, total+2, total+2)
	end.sendText(`{"jsonrpc":"2.0","id":2,"method":"edge/topic","params":{"name":"orders","fromCursor":"x1"}}`)
	if r := parseResponse(t, end.readText()); r.Error == nil || r.Error.Code != -32602 {
		t.Fatalf("fromCursor x1: %+v, want -32602", r)
	}
}

// TestTopicsJetStreamRestart: the NATS server restarted mid-stream (same
// port, same store): live and replaying subscriptions end UPSTREAM_LOST with
// their last delivered cursor within 5 s, and resubscribing from that
// cursor loses nothing, including what was published before the client
// came back.
func TestTopicsJetStreamRestart(t *testing.T) {
	dir := t.TempDir()
	ns := testnats.StartWith(t, testnats.Config{StoreDir: dir})
	a := startTopicsEdge(t, ns.ClientURL(), true, true, nil)
	b := startTopicsEdge(t, ns.ClientURL(), true, true, nil)
	live, replay := dial(t, b.gateway), dial(t, b.gateway)
	sl := live.subscribeTopic(1, "r", "")
	sr := replay.subscribeTopic(1, "r", "0")
	pub := dial(t, a.gateway)
	for i := 1; i <= 10; i++ {
		pub.sendText(publishText(strconv.Itoa(i), "r", i))
		pub.expectText(delivered(strconv.Itoa(i), 0))
	}
	evs := live.expectTopicEvents(sl, 1, 10)
	replay.expectTopicEvents(sr, 1, 10)
	start := time.Now()
	opensA, opensB := a.tops.Opens(), b.tops.Opens()
	testnats.Restart(t, ns, dir)
	live.expectLostTopic(sl, evs[10].cursor, start)
	replay.expectLostTopic(sr, evs[10].cursor, start)
	// A has no subscription to show it saw the restart: wait until both
	// have reopened, not just for Ready, which A may still report from
	// before it learnt of the loss.
	waitReopened(t, a.tops, opensA)
	waitReopened(t, b.tops, opensB)
	for i := 11; i <= 15; i++ {
		pub.sendText(publishText(strconv.Itoa(i), "r", i))
		pub.expectText(delivered(strconv.Itoa(i), 0))
	}
	sl = live.subscribeTopic(2, "r", evs[10].cursor)
	for i := 16; i <= 20; i++ {
		pub.sendText(publishText(strconv.Itoa(i), "r", i))
	}
	live.expectTopicEvents(sl, 11, 20)
	for i := 16; i <= 20; i++ {
		pub.expectText(delivered(strconv.Itoa(i), 0)) // A has no subscriber
	}
}
