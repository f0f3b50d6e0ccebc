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
	start  int64    // immutable after dispatch: Counters.Now at admission
	params []byte   // immutable after dispatch: owned copy of the params (but lent)
	// lent is set while params are the client's message itself, lent to a
	// backend.Borrower during Forward (dispatch, Keep). Loop-owned.
	lent bool

	// buf holds id and params; res is the buffer the handler appends its
	// result to. Both are kept when the task is reused.
	buf, res []byte

	// ctx is the request's context: cancelled by the loop, read by the
	// worker. Kept for the next request only while pristine (reqCtx.reuse).
	ctx *reqCtx

	result []byte // worker-written before Post, loop-read after
	err    error  // worker-written before Post, loop-read after

	sub *subscription // immutable after dispatch: set for subscription establishment

	// ticket reaches the forwarder of a forwarded call (zero otherwise).
	// Written on the loop by dispatch after Forward returns; read on the
	// loop.
	ticket backend.Ticket

	// batch is the batch the request came in, until it is answered
	// (jsonrpc profile). Loop-owned.
	batch *reqBatch

	cancelled  bool  // loop-owned
	prev, next *Task // loop-owned: Session.active links

	// nonBlocking is set when the method is non-blocking
	// (Config.NonBlocking): the task may run in a batch.
	nonBlocking bool // immutable after dispatch
}

// newTask returns an empty Task: from the session's own free list, else
// from the server's. A unary task is reused once its completion has been
// applied: by then its worker has posted it and returned (Run touches nothing
// of it after Post), and the session has dropped it from its id table and
// slot list, so nothing in the gateway refers to it. Its generation, not its
// address, is what identifies a request. Subscription tasks are never reused:
// the subscription outlives the completion. A task's context is reused with
// it only if nothing but the finished call can have reached it
// (reqCtx.reuse). Must be called on the loop.
func (s *Session) newTask() *Task {
	if n := len(s.free); n > 0 {
		t := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		s.freeBytes -= t.bufBytes()
		return t
	}
	if t, ok := s.srv.tasks.Get().(*Task); ok {
		return t
	}
	return &Task{ctx: newReqCtx()}
}

// A session's own free list: a pipelining client reuses its tasks from there
// without the synchronisation of the server's free list; Trim hands them over
// to the server's list when it goes quiet. It is bounded by count and by the
// bytes of the buffers its tasks keep, so that the memory a connection holds
// follows its active work (hardening issue, item 9).
const (
	sessionFreeTasks = 64
	sessionFreeBytes = 64 << 10
	// sharedKeepBytes is the largest buffer a task keeps on the server's
	// free list, which every session draws from.
	sharedKeepBytes = 4 << 10
)

// freeTask returns t to a free list with its buffers. Must be called on the
// loop, after Complete has applied t.
func (s *Session) freeTask(t *Task) {
	if t.sub != nil {
		return
	}
	ctx := t.ctx
	if !ctx.reuse() {
		ctx = newReqCtx()
	}
	buf, res := t.buf[:0], t.res[:0]
	*t = Task{} // one clear of the whole task, then what it keeps
	t.buf, t.res, t.ctx = buf, res, ctx
	keep := t.bufBytes()
	if len(s.free) < sessionFreeTasks && s.freeBytes+keep <= sessionFreeBytes && !s.closed {
		s.free = append(s.free, t)
		s.freeBytes += keep
		return
	}
	s.srv.putTask(t)
}

// bufBytes is the capacity of the buffers t keeps.
func (t *Task) bufBytes() int { return cap(t.buf) + cap(t.res) }

// putTask puts a free task on the server's free list, without buffers larger
// than sharedKeepBytes. Safe for concurrent use.
func (srv *Server) putTask(t *Task) {
	if cap(t.buf) > sharedKeepBytes {
		t.buf = nil
	}
	if cap(t.res) > sharedKeepBytes {
		t.res = nil
	}
	srv.tasks.Put(t)
}

// releaseFree hands the session's free tasks to the server's free list.
func (s *Session) releaseFree() {
	for i, t := range s.free {
		s.srv.putTask(t)
		s.free[i] = nil
	}
	s.free, s.freeBytes = nil, 0
}

// Session returns the session the task belongs to. Safe for concurrent use.
func (t *Task) Session() *Session { return t.sess }

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
		srv.settled(1)
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
		return nil, t.sess.srv.subscriber.Subscribe(t.ctx, t.method.Name, t.params, &t.sub.st)
	}
	res, err = t.sess.srv.cfg.Handler.Call(t.ctx, t.method.Name, t.params, t.res[:0])
	if cap(res) > cap(t.res) && len(res) > 0 {
		t.res = res[:0] // keep a grown buffer for the next request
	}
	return res, err
}

// errorFields maps an error from a backend call to the JSON-RPC error object
// fields (CONTRACT.md section 7). It is the only place that does.
func errorFields(err error) (code codec.Code, message, dataCode string, details []byte) {
	var be *backend.Error
	switch {
	case errors.As(err, &be):
	case errors.Is(err, backend.ErrUnknownMethod):
		be = errMethodNotFound
	default:
		// Anything else, a context error included (a live request was not
		// cancelled by its client, so a backend's own timeout is internal),
		// is an internal error with details stripped.
		be = errInternal
	}
	if be.Code == backend.CodeInternal {
		// Internal errors keep their code string; message and details are
		// the gateway's.
		dc := be.DataCode
		if dc == "" {
			dc = errInternal.DataCode
		}
		return codec.CodeInternalError, errInternal.Message, dc, nil
	}
	return codec.Code(be.Code), be.Message, be.DataCode, be.Details
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
