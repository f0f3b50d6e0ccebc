package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// ClosedError reports why a subscription ended other than "done"
// (CONTRACT.md section 5): SLOW_CONSUMER from the server, or from this client
// when its local buffer overflowed (Local).
type ClosedError struct {
	Reason              string
	LastDeliveredCursor json.RawMessage // the cursor of the last event delivered, if known
	Local               bool            // ended by this client's own buffer
}

func (e *ClosedError) Error() string {
	where := "server"
	if e.Local {
		where = "client"
	}
	if len(e.LastDeliveredCursor) > 0 {
		return fmt.Sprintf("client: subscription closed by %s: %s after cursor %s", where, e.Reason, e.LastDeliveredCursor)
	}
	return fmt.Sprintf("client: subscription closed by %s: %s", where, e.Reason)
}

// Subscription is a live subscription. Events arrive on Events in order; the
// channel is closed when the subscription ends, after which Err tells why.
// Safe for concurrent use.
type Subscription struct {
	// ID is the server's subscription id: OECP's subscriptionId, or a plain
	// subscription's result (a string as is, a number as its JSON text).
	ID string
	// Result is the establishment result (OECP: it carries subscriptionId;
	// plain: the id itself, as the server wrote it).
	Result json.RawMessage

	c      *Client
	key    string // immutable: the key of Client.subs (plainKey for a plain one)
	plain  string // immutable: a plain subscription's namespace, else ""
	events chan json.RawMessage

	mu     sync.Mutex
	ended  bool            // guarded by mu
	err    error           // guarded by mu
	cursor json.RawMessage // guarded by mu: cursor of the last event put on events
}

// Plain JSON-RPC subscriptions (CONTRACT.md section 10, the shape of
// Ethereum's eth_subscribe): NS_subscribe answers the subscription id;
// events are NS_subscription notifications with params
// {"subscription":ID,"result":R}, an end the server reports is one with
// "error" instead of "result", and NS_unsubscribe([ID]) cancels.
const (
	plainSubscribeSuffix   = "_subscribe"
	plainEventSuffix       = "_subscription"
	plainUnsubscribeSuffix = "_unsubscribe"
)

// plainNamespace returns NS when method is NS_subscribe, else "".
func plainNamespace(method string) string {
	ns, _ := strings.CutSuffix(method, plainSubscribeSuffix)
	if ns == method {
		return ""
	}
	return ns
}

// plainKey is the Client.subs key of the plain subscription of namespace ns
// with id (raw JSON), and the id as Subscription.ID shows it; false when id
// is neither a string nor a number. Two spellings of one string ("a" and
// "\u0061") have one key.
func plainKey(ns string, id json.RawMessage) (key, shown string, ok bool) {
	id = bytes.TrimSpace(id)
	if len(id) == 0 {
		return "", "", false
	}
	if id[0] == '"' {
		if json.Unmarshal(id, &shown) != nil {
			return "", "", false
		}
		return ns + "\x00s" + shown, shown, true
	}
	var n json.Number
	if json.Unmarshal(id, &n) != nil {
		return "", "", false
	}
	return ns + "\x00n" + string(id), string(id), true
}

// established makes the Subscription of cl's successful establishment
// result. Called by the read loop with c.mu held.
func (c *Client) established(cl *call, result json.RawMessage) (*Subscription, error) {
	s := &Subscription{Result: append(json.RawMessage(nil), result...), c: c, plain: cl.plain,
		events: make(chan json.RawMessage, c.opts.SubscriptionBuffer)}
	if cl.plain != "" {
		var ok bool
		if s.key, s.ID, ok = plainKey(cl.plain, result); !ok {
			return nil, fmt.Errorf("client: %s%s result is no subscription id: %s", cl.plain, plainSubscribeSuffix, result)
		}
		return s, nil
	}
	var res struct {
		SubscriptionID string `json:"subscriptionId"`
	}
	if json.Unmarshal(result, &res) != nil || res.SubscriptionID == "" {
		return nil, fmt.Errorf("client: subscription result without subscriptionId: %s", result)
	}
	s.ID, s.key = res.SubscriptionID, res.SubscriptionID
	return s, nil
}

// cancelMessage is the message that cancels s on the server:
// subscription/cancel, or for a plain subscription NS_unsubscribe([ID]),
// a request whose answer the client drops (its id is never pending).
func (s *Subscription) cancelMessage() []byte {
	if s.plain == "" {
		return subscriptionCancel(s.ID)
	}
	params := append(append([]byte{'['}, bytes.TrimSpace(s.Result)...), ']')
	return appendRequest(nil, s.c.nextID.Add(1), s.plain+plainUnsubscribeSuffix, params)
}

// plainNotification applies an NS_subscription notification: an event of a
// live plain subscription of ns, or with "error" its end (data.code as the
// ClosedError's reason; edge's "Slow consumer" carries none and reads as
// SLOW_CONSUMER). Called by the read loop.
func (c *Client) plainNotification(ns string, params json.RawMessage) {
	var p struct {
		Subscription json.RawMessage `json:"subscription"`
		Error        *Error          `json:"error"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	key, _, ok := plainKey(ns, p.Subscription)
	if !ok {
		return
	}
	c.mu.Lock()
	sub := c.subs[key]
	c.mu.Unlock()
	if sub == nil {
		return
	}
	if p.Error == nil {
		c.deliver(sub, params, nil)
		return
	}
	c.forget(key)
	reason := p.Error.DataCode()
	switch {
	case reason != "":
	case p.Error.Code == -32000 && p.Error.Message == "Slow consumer":
		reason = "SLOW_CONSUMER"
	default:
		reason = p.Error.Message
	}
	sub.end(&ClosedError{Reason: reason})
}

// Subscribe establishes a subscription with a request to method (one of the
// server's subscription methods). A method named NS_subscribe makes a plain
// JSON-RPC subscription (eth_subscribe's shape: its events are the params
// of NS_subscription notifications, Close sends NS_unsubscribe); any other
// an OECP one. Like Call, a done ctx makes it return at once; if the server
// establishes the subscription anyway, the client cancels it there. Safe
// for concurrent use.
func (c *Client) Subscribe(ctx context.Context, method string, params any) (*Subscription, error) {
	cl := &call{subscribe: true, plain: plainNamespace(method), ch: make(chan response, 1)}
	id, err := c.send(method, params, cl)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-cl.ch:
		if r.err != nil {
			return nil, r.err
		}
		return r.sub, nil
	case <-ctx.Done():
		c.mu.Lock()
		if _, waiting := c.pending[id]; waiting {
			cl.abandoned = true
			c.mu.Unlock()
			return nil, ctx.Err()
		}
		c.mu.Unlock()
		// The response raced the cancellation: the subscription is ours.
		r := <-cl.ch
		if r.sub != nil {
			_ = r.sub.Close()
		}
		return nil, ctx.Err()
	}
}

// Events returns the channel of event params objects (each one the whole
// params member: including subscriptionId, or for a plain subscription
// {"subscription":ID,"result":R}).
func (s *Subscription) Events() <-chan json.RawMessage { return s.events }

// Err reports why the subscription ended: nil for "done" or Close, a
// *ClosedError for SLOW_CONSUMER, or the connection's error.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close cancels the subscription on the server (subscription/cancel, or
// NS_unsubscribe for a plain one) and closes Events. Events already buffered stay readable. Safe for concurrent use.
func (s *Subscription) Close() error {
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		return nil
	}
	s.c.forget(s.key)
	err := s.c.write(s.cancelMessage())
	s.end(nil)
	return err
}

// deliver hands one event to the subscriber without waiting; false means the
// local buffer is full. Called by the read loop.
func (s *Subscription) deliver(params, cursor json.RawMessage) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return true
	}
	select {
	case s.events <- append(json.RawMessage(nil), params...):
		if len(cursor) > 0 {
			s.cursor = append(s.cursor[:0], cursor...)
		}
		return true
	default:
		return false
	}
}

func (s *Subscription) lastCursor() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(json.RawMessage(nil), s.cursor...)
}

// end closes Events once, recording why.
func (s *Subscription) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended, s.err = true, err
	close(s.events)
}
