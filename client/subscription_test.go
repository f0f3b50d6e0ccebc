package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/client"
	"github.com/openengine/edge/internal/poll"
)

// subscribe is Subscribe bounded by waitTimeout; it fails the test on error.
func subscribe(t *testing.T, c *client.Client, method string, params any) *client.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	sub, err := c.Subscribe(ctx, method, params)
	if err != nil {
		t.Fatalf("Subscribe %s: %v", method, err)
	}
	return sub
}

// drain reads sub's events until the channel closes and returns them.
func drain(t *testing.T, sub *client.Subscription) []json.RawMessage {
	t.Helper()
	var evs []json.RawMessage
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		case <-timeout:
			t.Fatalf("subscription %s: events still open after %s (%d read)", sub.ID, waitTimeout, len(evs))
		}
	}
}

// tick is the params of an edge/ticks event.
type tick struct {
	SubscriptionID string `json:"subscriptionId"`
	Cursor         string `json:"cursor"`
	Seq            int    `json:"seq"`
}

// checkTicks requires evs to be ticks 1..n of sub, in order.
func checkTicks(t *testing.T, sub *client.Subscription, evs []json.RawMessage, n int) {
	t.Helper()
	if len(evs) != n {
		t.Fatalf("%d events, want %d", len(evs), n)
	}
	for i, ev := range evs {
		var tk tick
		if err := json.Unmarshal(ev, &tk); err != nil {
			t.Fatalf("event %s: %v", ev, err)
		}
		if want := (tick{sub.ID, strconv.Itoa(i + 1), i + 1}); tk != want {
			t.Fatalf("event %d: %s, want %+v", i, ev, want)
		}
	}
}

// TestSubscribeTicks: edge/ticks events arrive in order with their cursors,
// then the channel closes with Err() == nil (the server's "done").
func TestSubscribeTicks(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			// A buffer that holds the longest stream: however the test
			// goroutine is scheduled, the read loop never overflows it.
			c := gw.dial(tr, &client.Options{SubscriptionBuffer: 3000})
			for _, n := range []int{1, 50, 3000} {
				sub := subscribe(t, c, "edge/ticks", map[string]int{"count": n, "intervalMs": 0})
				var res struct {
					SubscriptionID string `json:"subscriptionId"`
				}
				if err := json.Unmarshal(sub.Result, &res); err != nil || res.SubscriptionID == "" || res.SubscriptionID != sub.ID {
					t.Fatalf("Result %s, ID %q: want subscriptionId = ID", sub.Result, sub.ID)
				}
				checkTicks(t, sub, drain(t, sub), n)
				if err := sub.Err(); err != nil {
					t.Fatalf("Err() after done = %v, want nil", err)
				}
				if err := sub.Close(); err != nil {
					t.Fatalf("Close after done: %v", err)
				}
			}
			waitStats(t, c, "an idle connection", idle)
		})
	}
}

// TestSubscribeMany multiplexes several subscriptions and calls on one
// connection: each gets its own events, in order.
func TestSubscribeMany(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			const subs, n = 8, 200
			all := make([]*client.Subscription, subs)
			for i := range all {
				all[i] = subscribe(t, c, "edge/ticks", map[string]int{"count": n, "intervalMs": 0})
			}
			mustEcho(t, c, 1)
			for _, sub := range all {
				checkTicks(t, sub, drain(t, sub), n)
				if err := sub.Err(); err != nil {
					t.Fatalf("Err() = %v", err)
				}
			}
		})
	}
}

func TestSubscribeErrors(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		params   any
		code     int
		dataCode string
	}{
		{"bad params", "edge/ticks", map[string]int{"count": 0, "intervalMs": 0}, -32602, "SCHEMA_VIOLATION"},
		{"unsupported", "logs", nil, -32000, "INVALID_PHASE"},
		{"unary method", "edge/echo", nil, 0, ""}, // answered without a subscriptionId
	}
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
					defer cancel()
					sub, err := c.Subscribe(ctx, tt.method, tt.params)
					if sub != nil || err == nil {
						t.Fatalf("Subscribe: %v, %v; want an error", sub, err)
					}
					var re *client.Error
					if tt.code == 0 {
						if errors.As(err, &re) {
							t.Fatalf("Subscribe: %v, want a local error", err)
						}
						return
					}
					if !errors.As(err, &re) || re.Code != tt.code || re.DataCode() != tt.dataCode {
						t.Fatalf("Subscribe: %v, want code %d %s", err, tt.code, tt.dataCode)
					}
				})
			}
			waitStats(t, c, "an idle connection", idle)
			mustEcho(t, c, 1)
		})
	}
}

// TestSubscriptionClose: Close on a live subscription sends
// subscription/cancel (the gateway's subscription count drops to 0), closes
// Events and leaves Err nil.
func TestSubscriptionClose(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			for _, method := range []string{"watch", "edge/ticks"} {
				sub := subscribe(t, c, method, map[string]int{"count": 10000000, "intervalMs": 20})
				var s stats
				if err := call(t, c, "edge/stats", nil, &s); err != nil || s.Subscriptions != 1 {
					t.Fatalf("stats with one live subscription: %+v, %v", s, err)
				}
				if err := sub.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				drain(t, sub) // Close closes Events
				if err := sub.Err(); err != nil {
					t.Fatalf("Err() after Close = %v, want nil", err)
				}
				if err := sub.Close(); err != nil {
					t.Fatalf("second Close: %v", err)
				}
				waitStats(t, c, "the subscription cancelled on the gateway", idle)
			}
			mustEcho(t, c, 1)
		})
	}
}

// TestSubscriptionSlowConsumer: a subscriber that never reads, with a local
// buffer of 8 and a stream as fast as the connection. The read loop is not
// blocked (calls keep being answered); the subscription ends locally with
// SLOW_CONSUMER and the cursor of the last event in its buffer, and it is
// cancelled on the gateway. The stream is far longer than the test, so the
// gateway's subscription ends only because the client cancelled it.
func TestSubscriptionSlowConsumer(t *testing.T) {
	const buffer = 8
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, &client.Options{SubscriptionBuffer: buffer})
			sub := subscribe(t, c, "edge/ticks", map[string]int{"count": 10000000, "intervalMs": 0})
			for i := range 50 {
				mustEcho(t, c, i)
			}
			poll.Until(t, waitTimeout, "the subscription to end", func() (bool, string) { return sub.Err() != nil, "still live" })
			waitStats(t, c, "the subscription cancelled on the gateway", idle)
			mustEcho(t, c, 50)

			checkTicks(t, sub, drain(t, sub), buffer)
			var ce *client.ClosedError
			if err := sub.Err(); !errors.As(err, &ce) {
				t.Fatalf("Err() = %v, want *client.ClosedError", err)
			}
			if ce.Reason != "SLOW_CONSUMER" || !ce.Local || string(ce.LastDeliveredCursor) != `"8"` {
				t.Fatalf("Err() = %+v (%s), want SLOW_CONSUMER, Local, cursor \"8\"", ce, ce.LastDeliveredCursor)
			}
		})
	}
}

// TestSubscriptionSlowConsumerOthersUnaffected: one subscription overflowing
// locally does not end another one on the same connection.
func TestSubscriptionSlowConsumerOthersUnaffected(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			// The whole fast stream fits in its buffer, read or not.
			c := gw.dial(tr, &client.Options{SubscriptionBuffer: 128})
			slow := subscribe(t, c, "edge/ticks", map[string]int{"count": 10000000, "intervalMs": 0})
			fast := subscribe(t, c, "edge/ticks", map[string]int{"count": 100, "intervalMs": 0})
			evs := make([]json.RawMessage, 0, 100)
			timeout := time.After(waitTimeout)
			for ev := range fast.Events() {
				evs = append(evs, ev)
				select {
				case <-timeout:
					t.Fatalf("fast subscription: %d events after %s", len(evs), waitTimeout)
				default:
				}
			}
			checkTicks(t, fast, evs, 100)
			if err := fast.Err(); err != nil {
				t.Fatalf("fast subscription: Err() = %v", err)
			}
			poll.Until(t, waitTimeout, "the slow subscription to end", func() (bool, string) { return slow.Err() != nil, "still live" })
			waitStats(t, c, "an idle connection", idle)
		})
	}
}

// TestSubscribeCancelledWhileEstablishing: the ctx of a Subscribe is
// cancelled while the gateway is still establishing it; Subscribe returns
// ctx.Err() at once. The gateway then establishes it anyway, and the client
// cancels it there: the backend's subscription returns and the gateway
// counts no subscription.
func TestSubscribeCancelledWhileEstablishing(t *testing.T) {
	slow := &slowSubscriber{
		entered:     make(chan struct{}, 4),
		release:     make(chan struct{}),
		established: make(chan struct{}, 4),
		returned:    make(chan error, 4),
	}
	gw := startGateway(t, func(c *gwConfig) {
		c.handler = func(m *backend.Memory) backend.Handler { slow.Memory = m; return slow }
	})
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				sub *client.Subscription
				err error
			}
			done := make(chan result, 1)
			go func() {
				sub, err := c.Subscribe(ctx, "watch", nil)
				done <- result{sub, err}
			}()
			recv(t, slow.entered, "the gateway to start establishing")
			cancel()
			if r := recv(t, done, "Subscribe to return"); r.sub != nil || !errors.Is(r.err, context.Canceled) {
				t.Fatalf("Subscribe: %v, %v; want nil, context.Canceled", r.sub, r.err)
			}
			select {
			case slow.release <- struct{}{}:
			case <-time.After(waitTimeout):
				t.Fatalf("the gateway's establishment did not wait for release")
			}
			recv(t, slow.established, "the gateway to establish")
			if err := recv(t, slow.returned, "the backend subscription to be cancelled"); !errors.Is(err, context.Canceled) && err != nil {
				t.Fatalf("backend Subscribe returned %v", err)
			}
			waitStats(t, c, "no subscription on the gateway", idle)
			mustEcho(t, c, 1)
		})
	}
}
