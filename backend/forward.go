package backend

import (
	"errors"
)

// Forwarder serves methods by passing each call on to another server (an
// upstream, CONTRACT.md section 10) without a goroutine per call: Forward
// writes the call out and returns, and whatever reads the other server's
// answer finishes the call. Implementations must be safe for concurrent use.
type Forwarder interface {
	// Forward starts c, admitted as o says, and returns without blocking:
	// it must not wait for I/O. It calls c.Finish exactly once, from any
	// goroutine, possibly before it returns. The Ticket it returns is how
	// the gateway tells it that the call's outcome is no longer wanted.
	Forward(c Call, o Origin) Ticket
}

// Origin is where and when the gateway admitted a forwarded call. The zero
// Origin is a call from no event loop with no clock.
type Origin struct {
	// Loops and Loop are the event loop the call's session runs on (nil
	// Loops: none), so that a forwarder picks a connection the same loop
	// owns: Loops is the loops' identity (the gateway's *loop.Server, as
	// its loops name it, Homed), compared by a forwarder with the loops its
	// connections run on (upstream.Loops), never called.
	Loops any
	Loop  int
	// Admitted is the loop's clock of the turn that admitted the call, in
	// Unix nanoseconds, or 0 when its session has none: a forwarder
	// measures its timeout from it rather than reading the clock once per
	// call.
	Admitted int64
}

// Call is one request a Forwarder carries: what the gateway admitted, and how
// the answer gets back. Its methods are safe for concurrent use; none of them
// may be called after Finish.
type Call interface {
	// Method is the method name.
	Method() string
	// Params is the raw params value (an object, or with the jsonrpc
	// profile an array). Valid until Finish.
	Params() []byte
	// Stream is the subscription's stream when the call establishes a
	// subscription, nil for a unary call. The forwarder establishes it
	// (Stream.Establish, whose result must carry Stream.ID() as
	// "subscriptionId") and emits its events.
	Stream() Stream
	// Finish ends the call. Unary: result is the raw JSON result (copied) or
	// err the error, a *RawError to pass the other server's error object
	// through. Subscription: err before Establish fails the request; after
	// it, nil ends the subscription "done" and ErrUpstreamLost ends it
	// UPSTREAM_LOST, in both cases once its buffered events are delivered.
	// Exactly once; it does not block.
	Finish(result []byte, err error)
}

// LoopCall is implemented by a Call whose session runs on an event loop (the
// gateway's): a forwarder that reads the answer on that same loop finishes
// the call there with FinishOnLoop, which applies it at once, instead of
// Finish, which hands it to the loop's queue.
type LoopCall interface {
	Call
	// FinishOnLoop is Finish, applied before it returns: result and err
	// are used during the call only (result is written out, not copied).
	// It must be called on the call's own event loop (Origin.Loops and
	// Loop), from the loop's reading of the other server's answer, never
	// from within a call the gateway made to the forwarder (Forward,
	// Cancel, Notify), whose caller is in the middle of the session's work.
	FinishOnLoop(result []byte, err error)
}

// Borrower is implemented by a Forwarder that may be lent a call's params:
// the gateway then does not copy them before Forward, and Params returns the
// client's message itself, valid only until Forward returns. A Borrower
// that writes the call out at once (to a connection on the call's own loop)
// saves that copy; one that reads Params later (from another goroutine, in
// a later turn) calls the call's Keep (LentCall) first, during Forward.
type Borrower interface {
	Forwarder
	// BorrowsParams marks the Forwarder as a Borrower; it does nothing.
	BorrowsParams()
}

// LentCall is a Call whose params a Borrower was lent (see Borrower).
type LentCall interface {
	Call
	// Keep makes Params the call's own copy, valid until Finish. It must
	// be called during Forward, on Forward's goroutine; a call whose
	// params are its own already ignores it.
	Keep()
}

// Canceller is what a Ticket reaches: the forwarder side of calls.
type Canceller interface {
	// Cancel tells the forwarder that the gateway no longer wants the
	// outcome of call id: the client cancelled it, its connection closed, its
	// subscription ended or shutdown ran out of time. The forwarder passes
	// the cancel on if its protocol can, and still calls Finish once (at
	// once, or when the other server answers or the call times out). Cancel
	// of a call already finished, or twice, does nothing. It must not block:
	// it runs on an event loop.
	Cancel(id uint64)
}

// Ticket identifies one forwarded call to its forwarder. The zero Ticket
// cancels nothing.
type Ticket struct {
	c  Canceller
	id uint64
}

// NewTicket returns the ticket of call id of c. id must never be reused by c
// while a ticket of it may still be used, so that a late cancel cannot reach
// a newer call.
func NewTicket(c Canceller, id uint64) Ticket { return Ticket{c: c, id: id} }

// Cancel passes the cancel on (see Canceller). Must not be called after the
// call's Finish has been applied.
func (t Ticket) Cancel() {
	if t.c != nil {
		t.c.Cancel(t.id)
	}
}

// RawError is an error object another JSON-RPC server sent, passed to the
// client byte for byte (CONTRACT.md section 10).
type RawError struct {
	Object []byte // the raw JSON value of the "error" member
}

func (e *RawError) Error() string { return "backend: upstream error " + string(e.Object) }

// ErrUpstreamLost ends a forwarded subscription with subscription/closed
// reason UPSTREAM_LOST (CONTRACT.md section 10).
var ErrUpstreamLost = errors.New("backend: upstream lost")

// Errors of forwarded calls (CONTRACT.md sections 7 and 10).
var (
	ErrUpstreamTimeout     = &Error{Code: CodeApplication, Message: "Upstream timeout", DataCode: "UPSTREAM_TIMEOUT"}
	ErrUpstreamUnavailable = &Error{Code: CodeApplication, Message: "Upstream unavailable", DataCode: "UPSTREAM_UNAVAILABLE"}
	// ErrServerBusy is the gateway's own SERVER_BUSY, also for a call
	// over an upstream's bound: the client retries as it would for any.
	ErrServerBusy = &Error{Code: CodeApplication, Message: "Server busy", DataCode: "SERVER_BUSY"}
)

// UnaryOnly is implemented by a Forwarder that may carry unary calls only
// (an http upstream): when UnaryOnly reports true, the gateway forwards a
// subscription method to it as a unary call with the jsonrpc profile, and
// the other server answers it itself (CONTRACT.md section 10).
type UnaryOnly interface {
	UnaryOnly() bool
}

// Notifier is implemented by a Forwarder that can pass on a notification (a
// request without id, jsonrpc profile): no answer comes back. Notify must not
// block; a notification that cannot be sent now is dropped.
type Notifier interface {
	Notify(method string, params []byte)
}

// Homed is implemented by a session's poster that is an event loop of a
// set of loops: Home returns the set's identity (Origin.Loops) and the
// loop's number. The session reads
// it once and passes it with every call it forwards (Origin).
type Homed interface {
	Home() (any, int)
}
