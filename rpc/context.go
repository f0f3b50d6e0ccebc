package rpc

import (
	"context"
	"sync"
	"time"
)

// reqCtx is the context a backend call runs under. It is cheaper than
// context.WithCancel: no parent to register with, and the done channel is
// made only when a handler asks for it. The loop cancels it; the worker, and
// whatever the handler derives from it, reads it.
//
// It implements the context package's AfterFunc hook, so a context derived
// from it (WithTimeout, WithCancelCause, context.AfterFunc) registers a
// callback here instead of starting a goroutine that waits on Done.
//
// A reqCtx is reused for the next request of its task only while it is
// pristine: nothing asked for its Done channel or registered a callback, so
// nothing but the finished call can have reached its state (hardening issue,
// item 3). Anything else (a handler that selected on Done, a derived context
// whose timer may still fire) keeps the old one, and the task gets a new one.
type reqCtx struct {
	mu   sync.Mutex
	done chan struct{} // guarded by mu; created lazily
	err  error         // guarded by mu
	fns  []*afterFunc  // guarded by mu: callbacks to run at cancel
	// used is set once Done or AfterFunc handed out something that can
	// outlive the call. Guarded by mu.
	used bool
}

// afterFunc is one registered callback; its address identifies it for stop.
type afterFunc struct{ f func() }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newReqCtx() *reqCtx { return &reqCtx{} }

func (c *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *reqCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used = true
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

// AfterFunc arranges for f to run in its own goroutine once c is cancelled
// (at once if it already is) and returns a stop function, with the semantics
// of context.AfterFunc. The context package uses it for contexts derived from
// c. Safe for concurrent use.
func (c *reqCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used = true
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	a := &afterFunc{f: f}
	c.fns = append(c.fns, a)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.fns {
			if x == a {
				c.fns = append(c.fns[:i], c.fns[i+1:]...)
				return true
			}
		}
		return false
	}
}

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
	for i, a := range c.fns {
		go a.f()
		c.fns[i] = nil
	}
	c.fns = nil
}

// reuse readies c for another request and reports whether it may be reused:
// only a pristine context is (see reqCtx). Must be called once the call it
// served has returned.
func (c *reqCtx) reuse() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used {
		return false
	}
	c.err = nil
	return true
}

var _ context.Context = (*reqCtx)(nil)
