package load

import "errors"

// Sentinel errors of the load generator.
var (
	ErrFrameTooLarge  = errors.New("load: frame too large")
	ErrClosed         = errors.New("load: server sent a close frame")
	ErrHello          = errors.New("load: handshake message refused")
	ErrNotSupported   = errors.New("load: the dialect does not support this workload")
	ErrNotEstablished = errors.New("load: not every connection or subscription was established")
)
