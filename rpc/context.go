package rpc

import (
	"context"
	"sync"
	"time"
)

// reqCtx is the context a backend call runs under. It is cheaper than
// context.WithCancel: no parent to register with and the done channel is made
// only when a handler asks for it. The loop cancels it; the worker reads it.
type reqCtx struct {
	mu   sync.Mutex
	done chan struct{} // guarded by mu; created lazily
	err  error         // guarded by mu
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *reqCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			return closedChan
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *reqCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *reqCtx) Value(any) any { return nil }

// cancel cancels the context once; later calls do nothing. Safe for concurrent use.
func (c *reqCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = context.Canceled
	if c.done != nil {
		close(c.done)
	}
}

var _ context.Context = (*reqCtx)(nil)
