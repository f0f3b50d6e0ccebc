package backend

import "errors"

// Sentinel errors of package backend. Compare with errors.Is.
var (
	// ErrPoolClosed reports a submission to a closed Pool.
	ErrPoolClosed = errors.New("backend: pool closed")
	// ErrUnknownMethod reports a method the handler does not serve.
	ErrUnknownMethod = errors.New("backend: unknown method")
)
