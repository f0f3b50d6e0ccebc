package rpc

import (
	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// The errors a session answers by itself (CONTRACT.md section 7). They are
// written, like a backend's errors, through errorFields, the one mapping from
// an error to the JSON-RPC error object. A code's fixed message is spelled
// once, by codec.Code.Message; only -32000 errors carry their own.
var (
	errParse          = protocolError(codec.CodeParseError, "")
	errInvalidRequest = protocolError(codec.CodeInvalidRequest, "")
	errDuplicateID    = protocolError(codec.CodeInvalidRequest, "DUPLICATE_REQUEST_ID")
	errMethodNotFound = protocolError(codec.CodeMethodNotFound, "")
	errInvalidParams  = protocolError(codec.CodeInvalidParams, "")
	errBusy           = backend.ErrServerBusy // also an upstream's, so counted busy
	errShuttingDown   = serverError("Server shutting down", "SERVER_SHUTTING_DOWN")
	errRateLimited    = serverError("Rate limited", "RATE_LIMITED")
	errCancelled      = protocolError(codec.CodeRequestCancelled, "")

	// errInternal is what a client sees for an error that is not a
	// backend.Error: details are not for the client.
	errInternal = protocolError(codec.CodeInternalError, "INTERNAL")
	// errPanic is what a client sees when a backend call panics.
	errPanic = protocolError(codec.CodeInternalError, "BACKEND_PANIC")
	// errNotEstablished is what a client sees when a subscription backend
	// returns without establishing the subscription or failing it.
	errNotEstablished = protocolError(codec.CodeInternalError, "NOT_ESTABLISHED")
)

// protocolError returns the error with code's fixed message.
func protocolError(code codec.Code, dataCode string) *backend.Error {
	return &backend.Error{Code: int(code), Message: code.Message(), DataCode: dataCode}
}

// serverError returns a -32000 error, whose message is its own.
func serverError(message, dataCode string) *backend.Error {
	return &backend.Error{Code: int(codec.CodeServerError), Message: message, DataCode: dataCode}
}

// AppendErrorResponse appends the JSON-RPC error response to request id (raw
// token, nil for null) for err, a backend's error, as a session writes it
// (CONTRACT.md section 7): a *backend.RawError byte for byte, anything else
// through errorFields. Package worker answers with it, so that a call served
// over NATS fails exactly as it would in-process. Safe for concurrent use.
func AppendErrorResponse(dst, id []byte, err error) []byte {
	if raw, ok := err.(*backend.RawError); ok {
		return codec.AppendRawError(dst, id, raw.Object)
	}
	code, message, dataCode, details := errorFields(err)
	return codec.AppendError(dst, id, code, message, dataCode, details)
}
