package rpc

import (
	"errors"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// Task is one admitted backend call. The session fills it on its loop, a pool
// worker runs it, and the worker posts it back to the loop, which applies it
// with Session.Complete.
type Task struct {
	sess   *Session // immutable after dispatch
	gen    uint64   // immutable after dispatch: the request's generation
	key    idKey    // immutable after dispatch: id identity, kind IDNone if untracked
	id     []byte   // immutable after dispatch: raw id, echoed byte-exact
	method *Method  // immutable after dispatch
	params []byte   // immutable after dispatch: owned copy of the params
	tb     *taskBuf // immutable after dispatch until freed: the task's buffers

	ctx reqCtx // cancelled by the loop, read by the worker

	result []byte // worker-written before Post, loop-read after
	err    error  // worker-written before Post, loop-read after

	sub *subscription // immutable after dispatch: set for subscription establishment

	cancelled  bool  // loop-owned
	prev, next *Task // loop-owned: Session.active links
}

// taskBuf is the reusable memory of a unary task: the id and params it owns
// and the result buffer its handler appends to.
type taskBuf struct {
	b, result []byte
}

// newTask returns a Task with buffers from the server's free list. The Task
// itself is never reused, so a completion or a context kept by mistake can
// never reach another request; only its byte buffers are, once its
// completion has been applied and nothing refers to them any more.
func (srv *Server) newTask() *Task {
	tb, ok := srv.bufs.Get().(*taskBuf)
	if !ok {
		tb = &taskBuf{}
	}
	return &Task{tb: tb}
}

// freeTask returns t's buffers to the free list. Subscription tasks keep
// theirs: the subscription may outlive the completion.
func (srv *Server) freeTask(t *Task) {
	tb := t.tb
	if tb == nil || t.sub != nil {
		return
	}
	t.tb, t.id, t.params, t.result = nil, nil, nil, nil
	const maxKeep = 64 << 10 // do not keep the buffers of huge requests alive
	if cap(tb.b) > maxKeep || cap(tb.result) > maxKeep {
		return
	}
	srv.bufs.Put(tb)
}

// Session returns the session the task belongs to. Safe for concurrent use.
func (t *Task) Session() *Session { return t.sess }

// errPanic is what a client sees when a backend call panics.
var errPanic = &backend.Error{Code: backend.CodeInternal, Message: "Internal error", DataCode: "BACKEND_PANIC"}

// errNotEstablished is what a client sees when a subscription backend returns
// without establishing the subscription or failing it.
var errNotEstablished = &backend.Error{Code: backend.CodeInternal, Message: "Internal error", DataCode: "NOT_ESTABLISHED"}

// Run executes the backend call on a worker goroutine, posts the task back to
// its loop and frees the global slot. Posting first means that once the pool
// reports no running tasks, every result is already queued for its loop, which
// graceful shutdown relies on. Called by the pool.
func (t *Task) Run() {
	t.result, t.err = t.call()
	srv := t.sess.srv
	unary := t.sub == nil
	t.sess.post.Post(t)
	if unary {
		srv.unary.Add(-1)
	}
	srv.cfg.Pool.Release()
}

// Apply delivers the finished task to its session. Must be called on the
// session's loop.
func (t *Task) Apply() { t.sess.Complete(t) }

func (t *Task) call() (res []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			t.sess.srv.cfg.Logger.Error("backend panic", "method", t.method.Name, "panic", r)
			res, err = nil, errPanic
		}
	}()
	if t.sub != nil {
		return nil, t.sess.srv.subscriber.Subscribe(&t.ctx, t.method.Name, t.params, &t.sub.st)
	}
	res, err = t.sess.srv.cfg.Handler.Call(&t.ctx, t.method.Name, t.params, t.tb.result[:0])
	if cap(res) > cap(t.tb.result) && len(res) > 0 {
		t.tb.result = res[:0] // keep a grown buffer for the next request
	}
	return res, err
}

// errorFields maps an error from a backend call to the JSON-RPC error object
// fields (CONTRACT.md section 7). It is the only place that does.
func errorFields(err error) (code codec.Code, message, dataCode string, details []byte) {
	var be *backend.Error
	switch {
	case errors.As(err, &be):
		if be.Code == backend.CodeInternal {
			// Internal errors keep their code string; details are stripped.
			dc := be.DataCode
			if dc == "" {
				dc = "INTERNAL"
			}
			return codec.CodeInternalError, "Internal error", dc, nil
		}
		return codec.Code(be.Code), be.Message, be.DataCode, be.Details
	case errors.Is(err, backend.ErrUnknownMethod):
		return codec.CodeMethodNotFound, "Method not found", "", nil
	}
	// Anything else, a context error included (a live request was not
	// cancelled by its client, so a backend's own timeout is internal), is an
	// internal error with details stripped.
	return codec.CodeInternalError, "Internal error", "INTERNAL", nil
}

// taskList is an intrusive doubly linked list of the tasks that hold a slot.
type taskList struct {
	head *Task
	n    int
}

func (l *taskList) push(t *Task) {
	t.prev, t.next = nil, l.head
	if l.head != nil {
		l.head.prev = t
	}
	l.head = t
	l.n++
}

func (l *taskList) remove(t *Task) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
	l.n--
}
