package codec

import "errors"

// Sentinel errors of package codec. Compare with errors.Is.
var (
	// ErrNeedMore reports that the input ends before a complete unit (request head,
	// frame header, control frame) and the caller should retry with more bytes.
	ErrNeedMore = errors.New("codec: need more data")
	// ErrHeaderTooLarge reports an HTTP request head larger than the configured cap.
	ErrHeaderTooLarge = errors.New("codec: request header too large")
	// ErrBadRequest reports a malformed HTTP request head.
	ErrBadRequest = errors.New("codec: malformed http request")

	// ErrProtocol is what a *CloseError with code 1002 wraps: the peer violated
	// RFC 6455 framing (RFC 6455 section 7.4.1).
	ErrProtocol = errors.New("codec: websocket protocol error")
	// ErrUnsupportedData is what a *CloseError with code 1003 wraps: the peer sent a
	// binary message, which the gateway does not accept (CONTRACT.md section 1.1).
	ErrUnsupportedData = errors.New("codec: binary frames are not supported")
	// ErrInvalidUTF8 is what a *CloseError with code 1007 wraps: a text message or a
	// close reason is not valid UTF-8 (RFC 6455 section 8.1).
	ErrInvalidUTF8 = errors.New("codec: invalid utf-8 in text message or close reason")
	// ErrMessageTooBig is what a *CloseError with code 1009 wraps: a text message is
	// larger than Reader.MaxMessage after reassembly.
	ErrMessageTooBig = errors.New("codec: message too big")
)
