package rpc

import "github.com/openengine/edge/backend"

// Turn gathers the backend calls that the sessions of one event loop dispatch
// during a loop turn and hands them to the pool together when the loop
// flushes it (backend.Pool.SubmitAll): one hand-off per turn instead of one
// per request. Calls to non-blocking methods (Config.NonBlocking) go into
// batches of up to maxBatch calls, one job each (see batch).
//
// A Turn belongs to one event loop, which gets it from Server.NewTurn and
// offers it to its sessions as a TurnPoster. Its methods must be called on
// that loop, and the loop must call Flush before it blocks: every gathered
// call holds a global slot. Everything a Turn holds is loop-owned.
//
// A Turn also admits its loop's requests (Server.owing) in blocks of
// creditBlock: one atomic step per block and one at Flush instead of two
// per request, which cost 5% of the proxied path (BenchmarkProxyPipelined).
type Turn struct {
	pool *backend.Pool // immutable
	srv  *Server       // immutable
	// credit is the admissions counted in srv.owing that no request of
	// this turn uses: taken ahead by admit, given back by the requests
	// settled on the loop (settle), returned to srv.owing by Flush. A
	// drain therefore waits at most until the end of the turn for it.
	credit int64
	jobs   []backend.Job // gathered since the last Flush
	open   *batch        // being filled, or nil
	spare  []*batch      // applied batches kept for reuse
}

// maxBatch bounds the calls of one batch: a turn that admits more makes
// several jobs, which several workers can run at once when there are
// processors for them.
const maxBatch = 64

// maxSpareBatches bounds the applied batches a Turn keeps for reuse.
const maxSpareBatches = 16

// NewTurn returns an empty Turn for one event loop. Safe for concurrent use.
func (srv *Server) NewTurn() *Turn { return &Turn{pool: srv.cfg.Pool, srv: srv} }

// creditBlock is how many admissions a Turn takes from Server.owing at once:
// a pipelining client's window.
const creditBlock = 64

// admit is Server.admit from the turn's credit: once the server drains it
// admits nothing more, also from credit already taken (the credit is
// counted in owing, so a drain waits for it until Flush returns it).
func (tn *Turn) admit() bool {
	if testHookAdmit != nil {
		testHookAdmit()
	}
	if tn.credit > 0 && !tn.srv.draining() {
		tn.credit--
		return true
	}
	if !tn.srv.admitN(creditBlock) {
		return false
	}
	tn.credit += creditBlock - 1
	return true
}

// settle is Server.settled for n requests settled on the loop: they become
// credit, returned at Flush.
func (tn *Turn) settle(n int) { tn.credit += int64(n) }

// TurnPoster is implemented by a Poster whose event loop gathers the calls
// of each turn in a Turn and flushes it at the end of every turn. A session
// whose Poster is not one, or returns a nil Turn, submits each call to the
// pool itself.
type TurnPoster interface {
	Poster
	// Turn returns the loop's Turn, the same one every time.
	Turn() *Turn
}

// add gathers a dispatched call until Flush: a call to a non-blocking method
// goes into the open batch. Must be called on the loop.
func (tn *Turn) add(t *Task) {
	if !t.nonBlocking {
		tn.jobs = append(tn.jobs, t)
		return
	}
	if tn.open == nil {
		if n := len(tn.spare); n > 0 {
			tn.open = tn.spare[n-1]
			tn.spare[n-1] = nil
			tn.spare = tn.spare[:n-1]
		} else {
			tn.open = &batch{turn: tn}
		}
	}
	tn.open.tasks = append(tn.open.tasks, t)
	if len(tn.open.tasks) == maxBatch {
		tn.jobs = append(tn.jobs, tn.open)
		tn.open = nil
	}
}

// Flush hands every call gathered since the last Flush to the pool with one
// hand-off, and reports whether there was any. A nil Turn has nothing to
// flush. Must be called on the loop.
func (tn *Turn) Flush() bool {
	if tn == nil {
		return false
	}
	if tn.credit != 0 {
		tn.srv.settled(int(tn.credit))
		tn.credit = 0
	}
	if tn.open != nil {
		tn.jobs = append(tn.jobs, tn.open)
		tn.open = nil
	}
	if len(tn.jobs) == 0 {
		return false
	}
	tn.pool.SubmitAll(tn.jobs)
	clear(tn.jobs)
	tn.jobs = tn.jobs[:0]
	return true
}

// reuse keeps an applied batch for a later turn. Must be called on the loop.
func (tn *Turn) reuse(b *batch) {
	if len(tn.spare) < maxSpareBatches {
		tn.spare = append(tn.spare, b)
	}
}

// batch is calls to non-blocking methods (Config.NonBlocking) that a Turn
// hands to one worker as a single job: the worker runs them back to back and
// posts them back as a single completion, instead of one claim from the pool's
// queue and one post to the loop per call. Each call keeps its own task, its
// generation and its slots, and the loop applies each with Session.Complete,
// so a cancelled call, or one whose id a newer request has taken, is dropped
// exactly as it would be alone. Every task of a batch belongs to a session of
// the Turn's loop.
//
// The Turn fills a batch and submits it; nothing touches it again until
// Apply, which empties it and gives it back to its Turn.
type batch struct {
	tasks []*Task
	turn  *Turn // immutable: takes the batch back once applied, if set
}

// Run implements backend.Job: it runs every call, posts the batch back to the
// loop, then frees the calls' global slots. Posting first means that once the
// pool reports no running tasks, every result is already queued for its loop
// (as Task.Run). After the post the batch belongs to the loop again.
func (b *batch) Run() {
	for _, t := range b.tasks {
		t.result, t.err = t.call()
	}
	first := b.tasks[0]
	srv, n := first.sess.srv, len(b.tasks)
	first.sess.post.Post(b)
	srv.settled(n)
	srv.cfg.Pool.ReleaseN(n)
}

// Apply implements Completion: every task is applied to its session, in the
// order it was added. Must be called on the loop.
func (b *batch) Apply() {
	for i, t := range b.tasks {
		t.sess.Complete(t)
		b.tasks[i] = nil
	}
	b.tasks = b.tasks[:0]
	if b.turn != nil {
		b.turn.reuse(b)
	}
}
