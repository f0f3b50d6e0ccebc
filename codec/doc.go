// Package codec holds the pure byte-level pieces of the edge data plane: the HTTP/1.1
// upgrade request parser, WebSocket (RFC 6455) frame decoding and validation with
// incremental UTF-8 checking, JSON-RPC 2.0 envelope classification in the order of
// CONTRACT.md section 2, and response encoding with the contract's byte shapes.
//
// Nothing here does I/O, starts goroutines or logs. Parsers take bytes and return
// (value, consumed, err) or ErrNeedMore; encoders append to a caller-owned buffer.
// Hot-path functions do not allocate.
package codec
