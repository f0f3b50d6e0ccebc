// Package backend defines what the gateway calls to do real work: the Handler
// interface, the bounded worker Pool that runs handlers off the event loops, and
// the embedded memory backend.
package backend

import (
	"context"
	"fmt"

	"github.com/openengine/edge/codec"
)

// Handler serves backend methods. The session has already checked that method
// exists in the registry and that params is a JSON object.
//
// Implementations must be safe for concurrent use: many workers call them at once.
type Handler interface {
	// Call runs a unary method. params is the raw JSON params object; it is owned
	// by the request and valid until Call returns. Call appends the JSON result to
	// dst and returns it, or returns an error (an *Error for a protocol-visible
	// one). ctx is cancelled when the client cancels the request, the connection
	// closes or the gateway shuts down; Call should then return promptly. ctx must
	// not be used after Call returns.
	Call(ctx context.Context, method string, params, dst []byte) ([]byte, error)
}

// Error is a backend error that reaches the client as a JSON-RPC error object
// (CONTRACT.md section 7). Code is the JSON-RPC code, DataCode the string in
// data.code ("" for no data member), Details optional raw JSON for data.details.
type Error struct {
	Code     int
	Message  string
	DataCode string
	Details  []byte
}

func (e *Error) Error() string {
	if e.DataCode != "" {
		return fmt.Sprintf("backend: %d %s (%s)", e.Code, e.Message, e.DataCode)
	}
	return fmt.Sprintf("backend: %d %s", e.Code, e.Message)
}

// JSON-RPC codes a backend may use (CONTRACT.md section 7).
const (
	CodeInvalidParams = int(codec.CodeInvalidParams)
	CodeInternal      = int(codec.CodeInternalError)
	CodeApplication   = int(codec.CodeServerError)
)

// SchemaViolation returns the -32602 error for params the backend cannot decode.
// details, when not nil, is raw JSON for data.details.
func SchemaViolation(details []byte) *Error {
	return &Error{Code: CodeInvalidParams, Message: codec.CodeInvalidParams.Message(), DataCode: "SCHEMA_VIOLATION", Details: details}
}

// InvalidPhase returns the -32000 INVALID_PHASE error for a method the backend
// does not support in its current state.
func InvalidPhase(method string) *Error {
	return &Error{Code: CodeApplication, Message: "Backend does not support " + method, DataCode: "INVALID_PHASE"}
}

// Subscriber is implemented by backends that serve subscription methods
// (CONTRACT.md section 5). Implementations must be safe for concurrent use.
type Subscriber interface {
	// Subscribe runs one subscription from establishment to its end on a worker
	// goroutine. It must call s.Establish with the success result (which carries
	// s.ID() as "subscriptionId") before emitting events; an error returned
	// before that fails the request. It returns when the stream is done (the
	// client then gets subscription/closed "done") or promptly once ctx is
	// cancelled. Every subscription ends, and Subscribe returns, exactly once.
	Subscribe(ctx context.Context, method string, params []byte, s Stream) error
}

// Stream is the producer side of one subscription. The gateway owns delivery:
// events wait in a bounded per-subscription buffer until the connection can
// take them. Safe for concurrent use.
type Stream interface {
	// ID is the subscription id, unique per connection.
	ID() string
	// Namespace is NS for a plain JSON-RPC subscription (NS_subscribe,
	// CONTRACT.md section 10; jsonrpc profile), "" for an OECP one. A plain
	// subscription's upstream answers its id as the result, sends
	// NS_subscription notifications (an event's body is their
	// `"result":R` member) and is ended with NS_unsubscribe; the result
	// given to Establish is not shown to the client, who gets ID().
	Namespace() string
	// Establish sends the success response with result (a JSON object). The
	// subscription is live from before this call; events follow the response.
	Establish(result []byte)
	// Emit queues one event without waiting. cursor is the event's cursor as a
	// raw JSON value (nil for streams without cursors); body is the event's
	// params members after subscriptionId, without braces, e.g. `"seq":1`.
	// Both are copied. Emit returns false once the subscription has ended
	// (cancelled, connection closed, or its buffer overflowed and it was closed
	// SLOW_CONSUMER); the producer should then return.
	Emit(cursor, body []byte) bool
	// EmitWait is Emit for producers paced by the consumer: it waits for room in
	// the buffer instead of overflowing. It returns false once the subscription
	// has ended or ctx is done.
	EmitWait(ctx context.Context, cursor, body []byte) bool
}

// SharedEmitter is implemented by streams that can hold an event without
// copying it (the gateway's). EmitShared is Stream.Emit for an event whose
// cursor and body the caller never changes again, such as the one copy a
// fan-out makes for all its members: the stream keeps them as they are until
// the event is written, so a fan-out to N members copies the event once,
// not N times.
type SharedEmitter interface {
	EmitShared(cursor, body []byte) bool
}
