package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/openengine/edge/client"
)

// Plain JSON-RPC subscriptions (NS_subscribe) against the scripted server.

func plainEvent(ns, id, rest string) string {
	return `{"jsonrpc":"2.0","method":"` + ns + `_subscription","params":{"subscription":` + id + rest + `}}`
}

// subscribePlain has c subscribe with eth_subscribe ["newHeads"] as request
// reqID and the fake answer it with answer as the result.
func subscribePlain(t *testing.T, f *fake, c *client.Client, reqID int, answer string) (*client.Subscription, error) {
	t.Helper()
	type r struct {
		s   *client.Subscription
		err error
	}
	ch := make(chan r, 1)
	go func() {
		s, err := c.Subscribe(context.Background(), "eth_subscribe", json.RawMessage(`["newHeads"]`))
		ch <- r{s, err}
	}()
	f.expect(request(reqID, "eth_subscribe", `["newHeads"]`))
	f.send(result(reqID, answer))
	got := recv(t, ch, "Subscribe")
	return got.s, got.err
}

// TestFakePlainSubscription: the result is the id; only NS_subscription
// notifications of that namespace and id are its events (another id,
// another namespace, an OECP event with the same id are not); Close sends
// NS_unsubscribe with the id as the server wrote it, as a request whose
// answer is dropped, once.
func TestFakePlainSubscription(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	sub, err := subscribePlain(t, f, c, 1, `"0xa"`)
	if err != nil || sub.ID != "0xa" || string(sub.Result) != `"0xa"` {
		t.Fatalf("Subscribe: %+v, %v; want ID 0xa", sub, err)
	}
	f.send(plainEvent("eth", `"0xb"`, `,"result":1`), plainEvent("foo", `"0xa"`, `,"result":2`),
		event("0xa", `,"seq":3`), plainEvent("eth", `"\u0030xa"`, `,"result":{"n":4}`))
	ev := recv(t, sub.Events(), "the event")
	if want := `{"subscription":"\u0030xa","result":{"n":4}}`; string(ev) != want {
		t.Fatalf("event %s, want %s", ev, want)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	f.expect(request(2, "eth_unsubscribe", `["0xa"]`))
	if err := sub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	f.expectNothing()
	f.send(result(2, `true`), plainEvent("eth", `"0xa"`, `,"result":5`))
	if evs := drain(t, sub); len(evs) != 0 || sub.Err() != nil {
		t.Fatalf("after Close: events %q, Err() = %v; want none, nil", evs, sub.Err())
	}
	var res json.RawMessage
	e := async(func() error { return c.Call(context.Background(), "m", nil, &res) })
	f.expect(request(3, "m", `{}`))
	f.send(result(3, `{}`))
	if err := recv(t, e, "the next call"); err != nil {
		t.Fatalf("next call: %v", err)
	}
}

// TestFakePlainSubscriptionNumberID: a number id is kept as its text.
func TestFakePlainSubscriptionNumberID(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	sub, err := subscribePlain(t, f, c, 1, `7`)
	if err != nil || sub.ID != "7" {
		t.Fatalf("Subscribe: %+v, %v; want ID 7", sub, err)
	}
	f.send(plainEvent("eth", `"7"`, `,"result":1`), plainEvent("eth", `7`, `,"result":2`))
	if ev := recv(t, sub.Events(), "the event"); string(ev) != `{"subscription":7,"result":2}` {
		t.Fatalf("event %s, want the one of id 7, not \"7\"", ev)
	}
	sub.Close()
	f.expect(request(2, "eth_unsubscribe", `[7]`))
}

// TestFakePlainSubscriptionBadResult: a result that is no id fails Subscribe.
func TestFakePlainSubscriptionBadResult(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	if _, err := subscribePlain(t, f, c, 1, `{"subscriptionId":"a"}`); err == nil {
		t.Fatal("Subscribe succeeded with an object result")
	}
	f.expectNothing()
}

// TestFakePlainSubscriptionEndedByServer: an NS_subscription with "error"
// ends the subscription: edge's "Slow consumer" as SLOW_CONSUMER, a data
// code as itself; nothing is sent back.
func TestFakePlainSubscriptionEndedByServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ errObj, reason string }{
		{`{"code":-32000,"message":"Slow consumer"}`, "SLOW_CONSUMER"},
		{`{"code":-32000,"message":"Upstream lost","data":{"code":"UPSTREAM_LOST"}}`, "UPSTREAM_LOST"},
		{`{"code":-32001,"message":"gone"}`, "gone"},
	} {
		f, c := startFake(t, nil)
		sub, err := subscribePlain(t, f, c, 1, `"0x1"`)
		if err != nil {
			t.Fatal(err)
		}
		f.send(plainEvent("eth", `"0x1"`, `,"result":1`), plainEvent("eth", `"0x1"`, `,"error":`+tc.errObj))
		if evs := drain(t, sub); len(evs) != 1 {
			t.Fatalf("events %q, want the one before the error", evs)
		}
		var ce *client.ClosedError
		if err := sub.Err(); !errors.As(err, &ce) || ce.Reason != tc.reason || ce.Local {
			t.Fatalf("%s: Err() = %v, want the server's ClosedError %s", tc.errObj, err, tc.reason)
		}
		f.expectNothing()
	}
}

// TestFakePlainSlowConsumerLocal: the local buffer's overflow ends the
// subscription with NS_unsubscribe, once.
func TestFakePlainSlowConsumerLocal(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, &client.Options{SubscriptionBuffer: 1})
	sub, err := subscribePlain(t, f, c, 1, `"0x1"`)
	if err != nil {
		t.Fatal(err)
	}
	f.send(plainEvent("eth", `"0x1"`, `,"result":1`), plainEvent("eth", `"0x1"`, `,"result":2`),
		plainEvent("eth", `"0x1"`, `,"result":3`))
	f.expect(request(2, "eth_unsubscribe", `["0x1"]`))
	f.expectNothing()
	var ce *client.ClosedError
	if evs := drain(t, sub); len(evs) != 1 {
		t.Fatalf("events %q, want the 1 buffered", evs)
	}
	if err := sub.Err(); !errors.As(err, &ce) || ce.Reason != "SLOW_CONSUMER" || !ce.Local {
		t.Fatalf("Err() = %v, want a local SLOW_CONSUMER", err)
	}
}

// TestFakePlainSubscribeAbandoned: Subscribe gave up; the late id is
// unsubscribed.
func TestFakePlainSubscribeAbandoned(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	e := async(func() error { _, err := c.Subscribe(ctx, "eth_subscribe", json.RawMessage(`["newHeads"]`)); return err })
	f.expect(request(1, "eth_subscribe", `["newHeads"]`))
	cancel()
	if err := recv(t, e, "Subscribe"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe: %v, want context.Canceled", err)
	}
	f.send(result(1, `"0x9"`), plainEvent("eth", `"0x9"`, `,"result":1`))
	f.expect(request(2, "eth_unsubscribe", `["0x9"]`))
}
