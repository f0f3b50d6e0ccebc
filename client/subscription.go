package client

import (
	"context"
	"encoding/json"
	"fmt"
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
	// ID is the server's subscription id.
	ID string
	// Result is the establishment result (it carries subscriptionId).
	Result json.RawMessage

	c      *Client
	events chan json.RawMessage

	mu     sync.Mutex
	ended  bool            // guarded by mu
	err    error           // guarded by mu
	cursor json.RawMessage // guarded by mu: cursor of the last event put on events
}

func newSubscription(c *Client, id string, result json.RawMessage, buffer int) *Subscription {
	return &Subscription{ID: id, Result: append(json.RawMessage(nil), result...), c: c, events: make(chan json.RawMessage, buffer)}
}

// Subscribe establishes a subscription with a request to method (one of the
// server's subscription methods). Like Call, a done ctx makes it return at
// once; if the server establishes the subscription anyway, the client cancels
// it there. Safe for concurrent use.
func (c *Client) Subscribe(ctx context.Context, method string, params any) (*Subscription, error) {
	id, cl, err := c.send(method, params, true)
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
// params member, including subscriptionId).
func (s *Subscription) Events() <-chan json.RawMessage { return s.events }

// Err reports why the subscription ended: nil for "done" or Close, a
// *ClosedError for SLOW_CONSUMER, or the connection's error.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close cancels the subscription on the server (subscription/cancel) and
// closes Events. Events already buffered stay readable. Safe for concurrent use.
func (s *Subscription) Close() error {
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		return nil
	}
	s.c.forget(s.ID)
	err := s.c.write(subscriptionCancel(s.ID))
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
