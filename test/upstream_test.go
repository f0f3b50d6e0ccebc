package test

import (
	"testing"
	"time"

	"github.com/openengine/edge/upstream"
)

// chains are the ways a proxy reaches an upstream edge, for tests that run
// through each (CONTRACT.md section 10).
func chains(t *testing.T) map[string]func(t *testing.T) (*proxy, *upstreamEdge) {
	return map[string]func(t *testing.T) (*proxy, *upstreamEdge){
		"tcp": func(t *testing.T) (*proxy, *upstreamEdge) {
			u := startUpstreamEdge(t)
			return startProxy(t, upstream.Config{}, []string{"e=" + u.nd}), u
		},
		"ws": func(t *testing.T) (*proxy, *upstreamEdge) {
			u := startUpstreamEdge(t)
			return startProxy(t, upstream.Config{}, []string{"e=" + u.ws}), u
		},
		"exec": func(t *testing.T) (*proxy, *upstreamEdge) {
			return startProxy(t, upstream.Config{}, []string{"e=exec:" + edgeBinary(t) + " --stdio"}), nil
		},
		"nats": func(t *testing.T) (*proxy, *upstreamEdge) {
			ns := startNATS(t)
			startWorker(t, ns, "svc")
			startWorker(t, ns, "svc")
			return startProxy(t, upstream.Config{}, []string{"e=" + natsURL(ns, "svc")}), nil
		},
	}
}

// TestUpstreamGoldens: the protocol's golden transcripts pass byte for byte
// through a proxy on each NDJSON and WebSocket chain: the client's ids come
// back as sent, results and errors as the upstream wrote them.
func TestUpstreamGoldens(t *testing.T) {
	for name, start := range chains(t) {
		t.Run(name, func(t *testing.T) {
			p, _ := start(t)
			for _, pairs := range goldenFiles(t) {
				c := dial(t, p.gateway)
				for _, pair := range pairs {
					c.sendText(pair[0])
					c.expectText(pair[1])
				}
			}
		})
	}
}

// TestUpstreamSubscription: a subscription through each chain carries
// edge's subscription id, the upstream's event fields byte for byte, and
// ends "done" with the last delivered cursor; the upstream's subscription
// id never reaches the client.
func TestUpstreamSubscription(t *testing.T) {
	for name, start := range chains(t) {
		t.Run(name, func(t *testing.T) {
			p, _ := start(t)
			c := dial(t, p.gateway)
			// Two subscriptions on the upstream first, from another client,
			// so that the upstream's ids differ from the proxy's.
			other := dial(t, p.gateway)
			other.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":1,"intervalMs":0}}`)
			other.expectTexts(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`,
				`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1}}`,
				`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"1"}}`)
			c.sendText(`{"jsonrpc":"2.0","id":"a","method":"edge/ticks","params":{"count":3,"intervalMs":0,"size":4}}`)
			c.expectText(`{"jsonrpc":"2.0","id":"a","result":{"subscriptionId":"s1"}}`)
			for i := 1; i <= 3; i++ {
				n := string(rune('0' + i))
				c.expectText(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"` + n + `","seq":` + n + `,"data":"xxxx"}}`)
			}
			c.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"3"}}`)
			c.expectSettled(0, 0)
		})
	}
}

// TestUpstreamCancelThenReuseID: a client cancels a call the upstream still
// holds and reuses its id at once; the new call's answer reaches it, the old
// call's late answer (arriving after the new one) is dropped, and the slot
// of the old call is held until the upstream answered it.
func TestUpstreamCancelThenReuseID(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			u := startUpstreamEdge(t)
			url, cfg := u.nd, upstream.Config{}
			if transport == "ws" {
				url, cfg.Timeout = u.ws, 300*time.Millisecond
			}
			// An OECP upstream answers a forwarded $/cancelRequest with
			// nothing: the cancelled call's slot is then held until the
			// upstream timeout.
			p := startProxy(t, cfg, []string{"e=" + url})
			c := dial(t, p.gateway)
			c.sendText(gate("7", "old"))
			u.waitGate(t, "old", 1)
			c.sendText(cancel("7"))
			c.sendText(`{"jsonrpc":"2.0","id":7,"method":"edge/echo","params":{"new":true}}`)
			c.expectText(`{"jsonrpc":"2.0","id":7,"result":{"new":true}}`)
			if transport == "ws" {
				// The cancel was forwarded: the upstream's gate is left,
				// and the slot is held until the timeout.
				u.waitGate(t, "old", 0)
			} else {
				// NDJSON has no cancel: the upstream still holds the call,
				// and so does the client's slot.
				if s, _ := c.stats(); s.Tasks != 1 || s.InFlightIDs != 0 {
					t.Fatalf("stats %+v, want the cancelled call's slot held and its id free", s)
				}
				u.gw.Mem.Call(t.Context(), "edge/open", []byte(`{"name":"old"}`), nil)
			}
			// Whatever the upstream answers for the old call is dropped.
			c.expectSettled(0, 0)
		})
	}
}

// TestUpstreamIDsAreEdges: the upstream sees edge's integer ids, never the
// client's: two clients using the same id at once each get their own answer.
func TestUpstreamIDsAreEdges(t *testing.T) {
	u := startUpstreamEdge(t)
	p := startProxy(t, upstream.Config{Conns: 1}, []string{"e=" + u.nd})
	a, b := dial(t, p.gateway), dial(t, p.gateway)
	a.sendText(gate(`"x"`, "a"))
	b.sendText(gate(`"x"`, "b"))
	u.waitGate(t, "a", 1)
	u.waitGate(t, "b", 1)
	// The gates are opened on the upstream itself: the answers the clients
	// get are the gate results alone, each to its own client.
	openGate(t, u, "b", 1)
	b.expectText(gateResult(`"x"`, "b"))
	openGate(t, u, "a", 1)
	a.expectText(gateResult(`"x"`, "a"))
	if n := p.set.Upstreams()[0].Dropped(); n != 0 {
		t.Fatalf("proxy dropped %d upstream messages", n)
	}
}
