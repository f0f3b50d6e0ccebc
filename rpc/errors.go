package rpc

import (
	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// The errors a session answers by itself (CONTRACT.md section 7). They are
// written, like a backend's errors, through errorFields, the one mapping from
// an error to the JSON-RPC error object.
var (
	errParse          = protocolError(codec.CodeParseError, "Parse error", "")
	errInvalidRequest = protocolError(codec.CodeInvalidRequest, "Invalid Request", "")
	errDuplicateID    = protocolError(codec.CodeInvalidRequest, "Invalid Request", "DUPLICATE_REQUEST_ID")
	errMethodNotFound = protocolError(codec.CodeMethodNotFound, "Method not found", "")
	errInvalidParams  = protocolError(codec.CodeInvalidParams, "Invalid params", "")
	errBusy           = protocolError(codec.CodeServerError, "Server busy", "SERVER_BUSY")
	errShuttingDown   = protocolError(codec.CodeServerError, "Server shutting down", "SERVER_SHUTTING_DOWN")
	errCancelled      = protocolError(codec.CodeRequestCancelled, "Request cancelled", "")

	// errPanic is what a client sees when a backend call panics.
	errPanic = protocolError(codec.CodeInternalError, "Internal error", "BACKEND_PANIC")
	// errNotEstablished is what a client sees when a subscription backend
	// returns without establishing the subscription or failing it.
	errNotEstablished = protocolError(codec.CodeInternalError, "Internal error", "NOT_ESTABLISHED")
)

func protocolError(code codec.Code, message, dataCode string) *backend.Error {
	return &backend.Error{Code: int(code), Message: message, DataCode: dataCode}
}
