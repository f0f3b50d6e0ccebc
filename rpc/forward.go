package rpc

import (
	"errors"

	"github.com/openengine/edge/backend"
)

// This file is the Task's side of forwarded calls (backend.Forwarder,
// CONTRACT.md section 10): no worker runs them. The forwarder writes the call
// to an upstream and finishes it from its reader, which posts the task to
// the loop exactly as a worker does; the loop applies it with Complete, so
// generations, cancellation and stale answers work as for any task. A reader
// on the session's own loop completes it there at once (FinishOnLoop), with
// the same Complete.

var _ backend.Call = (*Task)(nil)

// Method implements backend.Call.
func (t *Task) Method() string { return t.method.Name }

// Params implements backend.Call: nil when the request had none (jsonrpc
// profile).
func (t *Task) Params() []byte {
	if len(t.params) == 0 {
		return nil
	}
	return t.params
}

var _ backend.LentCall = (*Task)(nil)

// Keep implements backend.LentCall: params lent by dispatch (the client's
// message) are copied after the id. Must be called on the loop, during
// Forward.
func (t *Task) Keep() {
	if !t.lent {
		return
	}
	n := len(t.id)
	t.buf = append(t.buf[:n], t.params...)
	t.id, t.params, t.lent = t.buf[:n:n], t.buf[n:], false
}

// Stream implements backend.Call.
func (t *Task) Stream() backend.Stream {
	if t.sub == nil {
		return nil
	}
	return &t.sub.st
}

// Finish implements backend.Call: it records the outcome and posts the task
// to its loop, as Run does for a worker's call (without a pool slot to free).
func (t *Task) Finish(result []byte, err error) {
	srv := t.sess.srv
	if t.sub != nil {
		t.err = err
		t.sess.post.Post(t)
		return
	}
	t.result, t.err = nil, err
	if err == nil {
		t.result = append(t.res[:0], result...)
		if cap(t.result) > cap(t.res) {
			t.res = t.result[:0]
		}
	}
	t.sess.post.Post(t)
	srv.settled(1)
}

var _ backend.LoopCall = (*Task)(nil)

// FinishOnLoop implements backend.LoopCall: the forwarder read the answer
// on the session's own loop, so the task is completed at once, as the loop
// would apply its posted completion (the generation rule holds: a
// cancelled or stale task is dropped by Complete), and result is written
// to the client without being copied into the task. A subscription's
// establishment is posted as Finish does. Must be called on the session's
// loop, outside the session's own methods (see backend.LoopCall).
func (t *Task) FinishOnLoop(result []byte, err error) {
	if t.sub != nil {
		t.Finish(result, err)
		return
	}
	s := t.sess
	t.result, t.err = result, err
	s.Complete(t) // frees t: result is not kept
	s.settled(1)
}

// abort cancels the task's work: its context, and for a forwarded call the
// forwarder's side. Must be called on the loop, before the task's completion
// is applied.
func (t *Task) abort() {
	t.ctx.cancel()
	t.ticket.Cancel()
}

// producerReason is how a subscription ends once its producer returned with
// err and every buffered event is delivered.
func producerReason(err error) closeReason {
	if errors.Is(err, backend.ErrUpstreamLost) {
		return reasonUpstreamLost
	}
	return reasonDone
}

// origin is where and when the task was admitted, for its forwarder: the
// session's event loop, when its poster is one, and the loop's clock of the
// admitting turn (Counters.Now), 0 without one.
func (t *Task) origin() backend.Origin {
	return backend.Origin{Loops: t.sess.loops, Loop: t.sess.loop, Admitted: t.start}
}
