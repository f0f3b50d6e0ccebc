package worker

import "errors"

// Sentinel errors of package worker. Compare with errors.Is.
var (
	// ErrNoConn is Validate's error for a Config without a NATS connection.
	ErrNoConn = errors.New("worker: no NATS connection")
	// ErrConnClosed is Serve's error when the NATS connection closed under
	// it.
	ErrConnClosed = errors.New("worker: NATS connection closed")
)
