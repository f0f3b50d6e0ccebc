package codec

import (
	"encoding/binary"

	"github.com/gobwas/ws"
)

// AppendFrameHeader appends the header of a server-to-client frame with opcode op
// and payload length n to dst: FIN set, no RSV bits, unmasked (RFC 6455 section
// 5.1: a server must not mask), length in the shortest encoding (section 5.2).
// n must not be negative.
// Safe for concurrent use.
func AppendFrameHeader(dst []byte, op ws.OpCode, n int) []byte {
	b0 := 0x80 | byte(op&0x0f)
	switch {
	case n <= 125:
		return append(dst, b0, byte(n))
	case n <= 0xffff:
		dst = append(dst, b0, 126)
		return binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, b0, 127)
		return binary.BigEndian.AppendUint64(dst, uint64(n))
	}
}

// AppendFrame appends one whole server-to-client frame (header and payload, FIN
// set, unmasked) with opcode op to dst.
// Safe for concurrent use.
func AppendFrame(dst []byte, op ws.OpCode, payload []byte) []byte {
	dst = AppendFrameHeader(dst, op, len(payload))
	return append(dst, payload...)
}
