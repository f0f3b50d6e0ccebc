package rpc

import (
	"context"
	"sync"
	"sync/atomic"
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
	// state holds ctxCancelled and ctxUsed. It is written under mu (and by
	// reuse, once nothing but the loop can reach the context) and read
	// without it, so that Err and reuse, which run per request, take no
	// lock.
	state atomic.Uint32
	mu    sync.Mutex
	done  chan struct{} // guarded by mu; created lazily
	fns   []*afterFunc  // guarded by mu: callbacks to run at cancel
}

// Bits of reqCtx.state.
const (
	// ctxCancelled: cancel was called.
	ctxCancelled = 1 << iota
	// ctxUsed: Done or AfterFunc handed out something that can outlive
	// the call.
	ctxUsed
)

// afterFunc is one registered callback; its address identifies it for stop.
type afterFunc struct{ f func() }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newReqCtx() *reqCtx { return &reqCtx{} }

func (c *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *reqCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Or(ctxUsed)
	if c.done == nil {
		if c.state.Load()&ctxCancelled != 0 {
			return closedChan
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *reqCtx) Err() error {
	if c.state.Load()&ctxCancelled != 0 {
		return context.Canceled
	}
	return nil
}

func (c *reqCtx) Value(any) any { return nil }

// AfterFunc arranges for f to run in its own goroutine once c is cancelled
// (at once if it already is) and returns a stop function, with the semantics
// of context.AfterFunc. The context package uses it for contexts derived from
// c. Safe for concurrent use.
func (c *reqCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Or(ctxUsed)
	if c.state.Load()&ctxCancelled != 0 {
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
	if c.state.Load()&ctxCancelled != 0 {
		return
	}
	c.state.Or(ctxCancelled)
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
// only a pristine context is (see reqCtx). Must be called on the loop once
// the call it served has returned. A pristine context is reachable from
// nowhere else by then (no Done channel, no callback was handed out; a
// handler may not keep ctx after Call returns, backend.Handler), and the
// loop is the only canceller, so it takes no lock: this runs per request.
func (c *reqCtx) reuse() bool {
	if c.state.Load()&ctxUsed != 0 {
		return false
	}
	c.state.Store(0)
	return true
}

var _ context.Context = (*reqCtx)(nil)
