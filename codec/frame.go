package codec

import (
	"encoding/binary"
	"strconv"

	"github.com/gobwas/ws"
)

// DefaultMaxMessage is the largest text message a Reader accepts when its MaxMessage
// is not set (CONTRACT.md section 1.1: 1,048,576 bytes).
const DefaultMaxMessage = 1 << 20

// MaxHeaderSize is the size of the longest RFC 6455 frame header: 2 fixed bytes,
// an 8-byte extended length and a 4-byte masking key.
const MaxHeaderSize = ws.MaxHeaderSize

// ParseHeader parses one RFC 6455 frame header (RFC 6455 section 5.2) at the start
// of b. It returns the header and its encoded size, or ErrNeedMore when b is shorter
// than the whole header. It validates only the encoding: a 64-bit length with the
// most significant bit set is a *CloseError with code 1002. Header.Rsv holds the
// three RSV bits as gobwas/ws does (RSV1 is 0x4). Whether the header is acceptable
// in the connection's state is decided by Reader.Next.
// Safe for concurrent use.
func ParseHeader(b []byte) (ws.Header, int, error) {
	var h ws.Header
	if len(b) < 2 {
		return h, 0, ErrNeedMore
	}
	h.Fin = b[0]&0x80 != 0
	h.Rsv = (b[0] & 0x70) >> 4
	h.OpCode = ws.OpCode(b[0] & 0x0f)
	h.Masked = b[1]&0x80 != 0
	n := 2
	switch l := b[1] & 0x7f; l {
	case 126:
		if len(b) < n+2 {
			return h, 0, ErrNeedMore
		}
		h.Length = int64(binary.BigEndian.Uint16(b[n:]))
		n += 2
	case 127:
		if len(b) < n+8 {
			return h, 0, ErrNeedMore
		}
		v := binary.BigEndian.Uint64(b[n:])
		if v>>63 != 0 {
			// RFC 6455 section 5.2: "the most significant bit MUST be 0".
			return h, 0, protocolError("frame length with the most significant bit set")
		}
		h.Length = int64(v)
		n += 8
	default:
		h.Length = int64(l)
	}
	if h.Masked {
		if len(b) < n+4 {
			return h, 0, ErrNeedMore
		}
		copy(h.Mask[:], b[n:n+4])
		n += 4
	}
	return h, n, nil
}

// CloseError is a frame decoding failure that must close the connection with Code
// (1002, 1003, 1007 or 1009) and Reason in the server's close frame
// (RFC 6455 section 7.4.1, CONTRACT.md section 1.1). It wraps ErrProtocol,
// ErrUnsupportedData, ErrInvalidUTF8 or ErrMessageTooBig according to Code.
type CloseError struct {
	Code   ws.StatusCode
	Reason string
}

// Error implements error.
func (e *CloseError) Error() string {
	return "codec: websocket close " + strconv.Itoa(int(e.Code)) + ": " + e.Reason
}

// Unwrap returns the sentinel error that corresponds to e.Code, or nil.
func (e *CloseError) Unwrap() error {
	switch e.Code {
	case ws.StatusProtocolError:
		return ErrProtocol
	case ws.StatusUnsupportedData:
		return ErrUnsupportedData
	case ws.StatusInvalidFramePayloadData:
		return ErrInvalidUTF8
	case ws.StatusMessageTooBig:
		return ErrMessageTooBig
	}
	return nil
}

func protocolError(reason string) *CloseError {
	return &CloseError{Code: ws.StatusProtocolError, Reason: reason}
}

func invalidUTF8(reason string) *CloseError {
	return &CloseError{Code: ws.StatusInvalidFramePayloadData, Reason: reason}
}

// ErrInvalidText is the close error for a text message that is not valid
// UTF-8 (1007), for callers that check an Event.Unchecked message themselves.
var ErrInvalidText = invalidUTF8(reasonBadText)

// Close reasons the Reader reports with the codes CONTRACT.md section 1.1 fixes.
const (
	reasonBinary  = "binary frames are not supported"
	reasonTooBig  = "message too big"
	reasonBadText = "invalid utf-8 in text message"
)

// EventKind says what Reader.Next found.
type EventKind uint8

// Event kinds.
const (
	// EventNone: no complete event yet; call Next again once more bytes arrived.
	EventNone EventKind = iota
	// EventText: a whole (reassembled) text message in Event.Payload.
	EventText
	// EventPing: a ping; Event.Payload is its application data.
	EventPing
	// EventPong: a pong; Event.Payload is its application data.
	EventPong
	// EventClose: a valid close frame; Event.Code and Event.Payload (the reason).
	EventClose
)

// String returns the kind's name, for tests and logs.
func (k EventKind) String() string {
	switch k {
	case EventNone:
		return "none"
	case EventText:
		return "text"
	case EventPing:
		return "ping"
	case EventPong:
		return "pong"
	case EventClose:
		return "close"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one decoded unit of the client-to-server stream.
type Event struct {
	Kind EventKind
	// Payload is, for EventText, the whole reassembled message; for EventPing and
	// EventPong, the application data; for EventClose, the reason (without the code).
	// It aliases the input or the Reader's buffer (see Reader.Next) and may be nil
	// when empty.
	Payload []byte
	// Code is, for EventClose only, the peer's status code, or 1005
	// (ws.StatusNoStatusRcvd) when the close frame had no body (RFC 6455 section 7.1.5).
	Code ws.StatusCode
	// Unchecked is set on an EventText whose UTF-8 check was left to the
	// caller (Reader.DeferUTF8).
	Unchecked bool
}
