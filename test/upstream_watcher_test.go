package test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/internal/poll"
)

// watcher is a WebSocket client whose messages are read by a goroutine of
// their own and sorted as they are taken: answers by id, events and closes
// by subscription. A test can then wait on several clients in turn while
// subscriptions stream to all of them, and every message is checked for
// what must never happen (a second answer to an id, an event after its
// subscription closed).
type watcher struct {
	*client
	in      chan string            // text messages, in order; closed when the connection ends
	answers map[string]string      // answers not yet taken, by raw id
	subs    map[string]*watchedSub // by edge's subscription id
	byReq   map[string]*watchedSub // by the raw id of the establishing request
}

// watchedSub is what a watcher saw of one subscription.
type watchedSub struct {
	id     string // edge's subscription id
	events int
	last   string // the raw cursor of the last event, "" before the first
	closed string // the subscription/closed message, "" while live
}

func startWatcher(t *testing.T, gw *gateway) *watcher {
	t.Helper()
	p := &watcher{client: dial(t, gw), in: make(chan string, 1<<16), answers: map[string]string{},
		subs: map[string]*watchedSub{}, byReq: map[string]*watchedSub{}}
	go func() {
		defer close(p.in)
		for {
			// No deadline of its own: the connection closes in
			// t.Cleanup, and the test's watchdog bounds a hang.
			h, payload, err := p.readFrame(watchdogTimeout)
			if err != nil {
				return
			}
			if h.OpCode != ws.OpText {
				p.in <- "unexpected " + describe(h.OpCode, payload)
				return
			}
			p.in <- string(payload)
		}
	}()
	return p
}

// take sorts one message.
func (p *watcher) take(msg string) {
	t := p.t
	t.Helper()
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
		Params struct {
			SubscriptionID string          `json:"subscriptionId"`
			Cursor         json.RawMessage `json:"cursor"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(msg), &m); err != nil {
		t.Fatalf("message %s: %v", msg, err)
	}
	switch m.Method {
	case "event", "subscription/closed":
		s := p.subs[m.Params.SubscriptionID]
		if s == nil || s.closed != "" {
			t.Fatalf("%s for a subscription that is not live: %s", m.Method, msg)
		}
		if m.Method == "event" {
			s.events++
			s.last = string(m.Params.Cursor)
		} else {
			s.closed = msg
		}
		return
	case "":
	default:
		t.Fatalf("unexpected message %s", msg)
	}
	id := string(m.ID)
	if prev, ok := p.answers[id]; ok {
		t.Fatalf("a second answer to id %s: %s (the first: %s)", id, msg, prev)
	}
	p.answers[id] = msg
	var r struct {
		SubscriptionID string `json:"subscriptionId"`
	}
	if json.Unmarshal(m.Result, &r) == nil && r.SubscriptionID != "" {
		if p.subs[r.SubscriptionID] != nil {
			t.Fatalf("subscription id %s given twice: %s", r.SubscriptionID, msg)
		}
		s := &watchedSub{id: r.SubscriptionID}
		p.subs[s.id], p.byReq[id] = s, s
	}
}

// until takes messages until cond holds, failing after d.
func (p *watcher) until(d time.Duration, what string, cond func() bool) {
	p.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for !cond() {
		select {
		case msg, ok := <-p.in:
			if !ok {
				p.t.Fatalf("connection ended while waiting for %s", what)
			}
			p.take(msg)
		case <-timer.C:
			p.t.Fatalf("no %s within %s", what, d)
		}
	}
}

// answer waits for the answer to id (raw JSON) and takes it.
func (p *watcher) answer(id string) string {
	p.t.Helper()
	p.until(readTimeout, "answer to "+id, func() bool { _, ok := p.answers[id]; return ok })
	a := p.answers[id]
	delete(p.answers, id)
	return a
}

// stats asks edge/stats and waits for its answer, taking every message
// that arrives first.
func (p *watcher) stats() stats {
	p.t.Helper()
	p.seq++
	id := `"pstats-` + strconv.Itoa(p.seq) + `"`
	p.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/stats","params":{}}`)
	var s stats
	if err := json.Unmarshal(parseResponse(p.t, p.answer(id)).Result, &s); err != nil {
		p.t.Fatalf("edge/stats: %v", err)
	}
	return s
}

// settle polls edge/stats until the connection holds tasks slots,
// inFlight ids and subs subscriptions.
func (p *watcher) settle(tasks, inFlight, subs int) {
	p.t.Helper()
	poll.Until(p.t, pollTimeout, fmt.Sprintf("tasks %d inFlightIds %d subscriptions %d", tasks, inFlight, subs), func() (bool, string) {
		s := p.stats()
		return s.Tasks == tasks && s.InFlightIDs == inFlight && s.Subscriptions == subs, fmt.Sprintf("%+v", s)
	})
}

// quietAll requires that nothing arrives at any of ws within quiet
// (measured once for all), and that they hold no answer not taken.
func quietAll(t *testing.T, ws ...*watcher) {
	t.Helper()
	<-time.After(quiet) // only to assert absence
	for _, p := range ws {
		select {
		case msg, ok := <-p.in:
			if !ok {
				t.Fatal("connection ended")
			}
			t.Fatalf("unexpected message %s", msg)
		default:
		}
		if len(p.answers) > 0 {
			t.Fatalf("answers not taken: %v", p.answers)
		}
	}
}

// Fixed errors of CONTRACT.md section 10.
func upstreamUnavailable(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32000,"message":"Upstream unavailable","data":{"code":"UPSTREAM_UNAVAILABLE"}}}`
}

func upstreamTimeout(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32000,"message":"Upstream timeout","data":{"code":"UPSTREAM_TIMEOUT"}}}`
}

// closedLost is the subscription/closed of a subscription whose upstream
// was lost, with the cursor of the last event delivered ("" for none).
func closedLost(sub, last string) string {
	msg := `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"` + sub + `","reason":"UPSTREAM_LOST"`
	if last != "" {
		msg += `,"lastDeliveredCursor":` + last
	}
	return msg + `}}`
}
