package rpc

// Batch is calls to non-blocking methods (Config.NonBlocking) that a loop
// hands to one worker as a single job: the worker runs them back to back and
// posts them back as a single completion, instead of one claim from the pool's
// queue and one post to the loop per call. Each call keeps its own task, its
// generation and its slots, and the loop applies each with Session.Complete,
// so a cancelled call, or one whose id a newer request has taken, is dropped
// exactly as it would be alone. Every task of a batch belongs to a session of
// the same loop.
//
// The loop fills a Batch (Add) and submits it; it must not touch it again
// until Apply, which empties it and, when Done is set, hands it back for reuse.
type Batch struct {
	tasks []*Task
	// Done, when set, is called on the loop at the end of Apply with the
	// emptied batch.
	Done func(*Batch)
}

// Add appends a non-blocking unary task (Task.NonBlocking). Must be called on
// the loop, before the batch is submitted.
func (b *Batch) Add(t *Task) { b.tasks = append(b.tasks, t) }

// Len reports how many tasks the batch holds. Must be called on the loop.
func (b *Batch) Len() int { return len(b.tasks) }

// Run implements backend.Job: it runs every call, posts the batch back to the
// loop, then frees the calls' global slots. Posting first means that once the
// pool reports no running tasks, every result is already queued for its loop
// (as Task.Run). After the post the batch belongs to the loop again.
func (b *Batch) Run() {
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
func (b *Batch) Apply() {
	for i, t := range b.tasks {
		t.sess.Complete(t)
		b.tasks[i] = nil
	}
	b.tasks = b.tasks[:0]
	if b.Done != nil {
		b.Done(b)
	}
}
