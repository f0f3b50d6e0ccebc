package codec

import (
	"encoding/binary"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// maxCloseReason is the longest close reason that fits a control frame: 125 bytes
// of payload minus the 2-byte status code (RFC 6455 section 5.5).
const maxCloseReason = ws.MaxControlFramePayloadSize - 2

// ValidCloseCode reports whether a peer may put code on the wire in a close frame
// (RFC 6455 section 7.4, IANA "WebSocket Close Code Number Registry"): 1000-1003,
// 1007-1014 and 3000-4999. 0-999, 1004 (reserved), 1005, 1006 and 1015 (never sent
// on the wire), unassigned 1016-2999 and anything from 5000 up are protocol errors
// (Autobahn cases 7.7.x and 7.9.x).
//
// This differs from ws.CheckCloseFrameData, which rejects the registered codes
// 1012 (service restart), 1013 (try again later) and 1014 (bad gateway), and
// accepts codes from 5000 up, which RFC 6455 section 7.4.2 does not define.
// Safe for concurrent use.
func ValidCloseCode(code ws.StatusCode) bool {
	switch {
	case code >= 1000 && code <= 1003:
		return true
	case code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// parseClose validates the (unmasked) payload of a close frame and returns the
// close event (RFC 6455 section 5.5.1): an empty body is code 1005; a 1-byte body
// or an invalid code is a protocol error; the reason must be valid UTF-8.
func parseClose(p []byte) (Event, error) {
	switch len(p) {
	case 0:
		return Event{Kind: EventClose, Payload: p, Code: ws.StatusNoStatusRcvd}, nil
	case 1:
		return Event{}, protocolError("close frame with a 1-byte payload")
	}
	code := ws.StatusCode(binary.BigEndian.Uint16(p))
	if !ValidCloseCode(code) {
		return Event{}, protocolError("invalid close code")
	}
	reason := p[2:]
	if !utf8.Valid(reason) {
		return Event{}, invalidUTF8("invalid utf-8 in close reason")
	}
	return Event{Kind: EventClose, Payload: reason, Code: code}, nil
}

// AppendClose appends a server close frame (unmasked, FIN set) with code and
// reason to dst. The reason is cut to the 123 bytes that fit a control frame, on a
// UTF-8 code point boundary so the peer does not fail the close with 1007.
// Code 1005 (ws.StatusNoStatusRcvd), which must not be sent (RFC 6455 section
// 7.4.1), gives a close frame with an empty body.
// Safe for concurrent use.
func AppendClose(dst []byte, code ws.StatusCode, reason string) []byte {
	if code == ws.StatusNoStatusRcvd {
		return AppendFrameHeader(dst, ws.OpClose, 0)
	}
	if len(reason) > maxCloseReason {
		n := maxCloseReason
		for n > 0 && !utf8.RuneStart(reason[n]) {
			n--
		}
		reason = reason[:n]
	}
	dst = AppendFrameHeader(dst, ws.OpClose, 2+len(reason))
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	return append(dst, reason...)
}
