package backend

import "errors"

// Sentinel errors of package backend. Compare with errors.Is.
var (
	// ErrUnknownMethod reports a method the handler does not serve.
	ErrUnknownMethod = errors.New("backend: unknown method")
)
