package codec

import (
	"encoding/binary"
	"slices"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// keepBuf is the largest reassembly buffer a Reader keeps for the next message.
// Bigger buffers are dropped once their message is delivered, so an idle
// connection holds at most this much (STYLE.md: idle connections stay ~1 KiB).
const keepBuf = 512

// Reader decodes the client-to-server frames of one WebSocket connection, server
// side (RFC 6455 section 5): every frame must be masked, no extension is
// negotiated, text messages are reassembled from fragments and validated as
// UTF-8, binary messages are refused (CONTRACT.md section 1.1).
//
// Set MaxMessage before the first call to Next; the rest of the zero value is a
// fresh connection. Buffers are allocated only while a message is split across
// calls or fragmented.
type Reader struct {
	// MaxMessage is the largest accepted reassembled text message in bytes;
	// exactly MaxMessage is accepted. Zero or less means DefaultMaxMessage.
	MaxMessage int64

	// Loop-owned, like the Reader itself. (Ordered by size: a Reader is in
	// every idle connection.)

	// The data frame whose payload is being absorbed into buf (inFrame).
	remaining int64 // payload bytes of the frame not absorbed yet

	// The text message being reassembled: its first frame's header was consumed
	// and the frame with FIN set has not completed yet (inMessage).
	msgLen int64 // sum of the declared lengths of the message's frames so far
	buf    []byte

	err error // sticky: the first *CloseError, returned by every later call

	// DeferUTF8, when set, leaves the UTF-8 check of a text message that
	// arrives whole in one unfragmented frame to the caller: Next returns it
	// with Event.Unchecked set. A caller that validates the message anyway
	// (a JSON parser that checks UTF-8, as Classify does) then pays for one
	// pass instead of two; it must fail the connection with ErrInvalidText
	// when the message is not valid UTF-8, before acting on it. Fragmented
	// and split messages are still checked here, failing as soon as the
	// offending byte arrives.
	DeferUTF8 bool

	inFrame   bool
	fin       bool
	inMessage bool
	// maskOff is the frame's payload bytes unmasked so far, mod 4:
	// ws.Cipher's offset. A byte, in the padding after the flags: a
	// Reader is 80 bytes, not 88.
	maskOff uint8
	mask    [4]byte
	text    UTF8
}

// Next consumes bytes from the front of b and returns the next event.
//
// consumed is how many bytes of b are used up; the caller discards exactly that
// many once it is done with ev.Payload, and passes the bytes that follow (plus any
// that arrived since) to the next call. ev.Payload aliases b (unmasked in place:
// Next writes to b) or the Reader's buffer; it is valid until the next call to
// Next or Reset. When no complete event is available Next returns EventNone,
// possibly with consumed > 0 (payload absorbed into its buffer); the caller then
// waits for more bytes. A control frame is returned only once its whole payload is
// in b. Errors are *CloseError values and are final: every later call returns the
// same error.
//
// Checks, in RFC 6455 terms: unmasked frame, RSV bits, reserved opcode, fragmented
// or >125-byte control frame, continuation without a message, new data frame
// inside a fragmented message, invalid close payload -> 1002 (sections 5.1-5.5,
// 7.4); binary frame -> 1003 as soon as its header is parsed; text message over
// MaxMessage -> 1009, decided from the frame header before any of its payload is
// buffered; invalid UTF-8 in a message or close reason -> 1007, as soon as the
// offending byte is seen (section 8.1).
// Must be called on the connection's event loop.
func (r *Reader) Next(b []byte) (ev Event, consumed int, err error) {
	if r.err != nil {
		return Event{}, 0, r.err
	}
	off := 0
	for {
		if r.inFrame {
			n := len(b) - off
			if int64(n) > r.remaining {
				n = int(r.remaining)
			}
			if n > 0 {
				start := len(r.buf)
				if cap(r.buf)-start < n {
					r.grow(n)
				}
				r.buf = append(r.buf, b[off:off+n]...)
				p := r.buf[start:]
				ws.Cipher(p, r.mask, int(r.maskOff))
				r.maskOff = uint8((int(r.maskOff) + n) & 3)
				r.remaining -= int64(n)
				off += n
				if !r.text.Write(p) {
					return r.fail(invalidUTF8(reasonBadText), off)
				}
			}
			if r.remaining > 0 {
				return Event{}, off, nil
			}
			r.inFrame = false
			if !r.fin {
				continue
			}
			if !r.text.Done() {
				return r.fail(invalidUTF8(reasonBadText), off)
			}
			return Event{Kind: EventText, Payload: r.endMessage()}, off, nil
		}

		// The common frame first: a whole unfragmented masked text message
		// of under 126 bytes, outside a fragmented message. Its two header
		// bytes and mask key say everything that ParseHeader and check would
		// work out (FIN, no RSV bits, text, masked, a 7-bit length).
		if rest := b[off:]; !r.inMessage && len(rest) >= 6 && rest[0] == 0x80|byte(ws.OpText) && rest[1]&0x80 != 0 {
			if n := int(rest[1] & 0x7f); n < 126 && 6+n <= len(rest) && int64(n) <= r.maxMessage() {
				p := rest[6 : 6+n]
				unmaskShort(p, rest[2:6])
				if r.DeferUTF8 {
					return Event{Kind: EventText, Payload: p, Unchecked: true}, off + 6 + n, nil
				}
				if !utf8.Valid(p) {
					return r.fail(invalidUTF8(reasonBadText), off)
				}
				return Event{Kind: EventText, Payload: p}, off + 6 + n, nil
			}
		}
		h, hn, err := ParseHeader(b[off:])
		if err == ErrNeedMore {
			return Event{}, off, nil
		}
		if err != nil {
			return r.fail(err, off)
		}
		if err := r.check(h); err != nil {
			return r.fail(err, off)
		}
		if h.OpCode.IsControl() {
			// At most 125 bytes (checked): wait until the whole frame is here.
			end := off + hn + int(h.Length)
			if end > len(b) {
				return Event{}, off, nil
			}
			p := b[off+hn : end]
			ws.Cipher(p, h.Mask, 0)
			switch h.OpCode {
			case ws.OpPing:
				return Event{Kind: EventPing, Payload: p}, end, nil
			case ws.OpPong:
				return Event{Kind: EventPong, Payload: p}, end, nil
			}
			ev, err := parseClose(p)
			if err != nil {
				return r.fail(err, off)
			}
			return ev, end, nil
		}

		// Text or continuation frame (check refused the rest). The message limit
		// is decided here, before any of the frame's payload is buffered.
		if h.Length > r.maxMessage()-r.msgLen {
			return r.fail(&CloseError{Code: ws.StatusMessageTooBig, Reason: reasonTooBig}, off)
		}
		if h.OpCode == ws.OpText && h.Fin && int64(len(b)-off-hn) >= h.Length {
			// Fast path: a whole unfragmented message, unmasked in place.
			end := off + hn + int(h.Length)
			p := b[off+hn : end]
			ws.Cipher(p, h.Mask, 0)
			if r.DeferUTF8 {
				return Event{Kind: EventText, Payload: p, Unchecked: true}, end, nil
			}
			if !utf8.Valid(p) {
				return r.fail(invalidUTF8(reasonBadText), off)
			}
			return Event{Kind: EventText, Payload: p}, end, nil
		}
		off += hn
		r.inFrame = true
		r.fin = h.Fin
		r.mask = h.Mask
		r.maskOff = 0
		r.remaining = h.Length
		r.msgLen += h.Length
		r.inMessage = true
	}
}

// unmaskShort unmasks p (at most 125 bytes, from the start of a frame's
// payload) with the 4-byte key: eight bytes at a time, the key repeated,
// then byte by byte. For payloads this short it is cheaper than ws.Cipher,
// which is built for long ones.
func unmaskShort(p, key []byte) {
	k := uint64(binary.LittleEndian.Uint32(key))
	k |= k << 32
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)^k)
		p = p[8:]
	}
	for i := range p {
		p[i] ^= byte(k >> (8 * (i & 3)))
	}
}

// minGrow is the smallest capacity the reassembly buffer grows by.
const minGrow = 4096

// grow makes room in buf for n more bytes that arrived. It doubles what has
// arrived (at least minGrow), so a message reassembled from many fragments is
// copied O(1) times per byte, but it never reserves more than twice what
// arrived, nor past the message limit: the declared length is the peer's
// word, not memory it has spent.
func (r *Reader) grow(n int) {
	extra := int64(max(len(r.buf)+n, minGrow))
	if limit := r.maxMessage() - int64(len(r.buf)); extra > limit {
		extra = max(limit, int64(n))
	}
	r.buf = slices.Grow(r.buf, int(extra))
}

// fail makes err final: the Reader keeps returning it and drops its buffer.
func (r *Reader) fail(err error, consumed int) (Event, int, error) {
	r.err = err
	r.buf = nil
	return Event{}, consumed, err
}

// check applies the RFC 6455 rules that depend on the connection's state to a
// parsed header (sections 5.1, 5.2, 5.4, 5.5; CONTRACT.md section 1.1).
func (r *Reader) check(h ws.Header) error {
	switch {
	case h.Rsv != 0:
		return protocolError("reserved bits set without a negotiated extension")
	case h.OpCode.IsReserved():
		return protocolError("reserved opcode")
	case !h.Masked:
		return protocolError("unmasked client frame")
	case h.OpCode.IsControl():
		if !h.Fin {
			return protocolError("fragmented control frame")
		}
		if h.Length > ws.MaxControlFramePayloadSize {
			return protocolError("control frame payload over 125 bytes")
		}
		return nil
	case h.OpCode == ws.OpContinuation:
		if !r.inMessage {
			return protocolError("continuation frame without a message to continue")
		}
		return nil
	case r.inMessage:
		return protocolError("new data frame inside a fragmented message")
	case h.OpCode == ws.OpBinary:
		return &CloseError{Code: ws.StatusUnsupportedData, Reason: reasonBinary}
	}
	return nil
}

// endMessage ends the reassembled message and returns its bytes. They stay valid
// until the next call: a small buffer is reused by the next message, a big one is
// left to the garbage collector once the caller drops the payload.
func (r *Reader) endMessage() []byte {
	p := r.buf
	if cap(r.buf) > keepBuf {
		r.buf = nil
	} else {
		r.buf = r.buf[:0]
	}
	r.inMessage = false
	r.msgLen = 0
	r.text.Reset()
	return p
}

func (r *Reader) maxMessage() int64 {
	if r.MaxMessage <= 0 {
		return DefaultMaxMessage
	}
	return r.MaxMessage
}

// Reset drops all state and releases the buffer, for a closed or reused
// connection. MaxMessage is kept.
// Must be called on the connection's event loop.
func (r *Reader) Reset() {
	*r = Reader{MaxMessage: r.MaxMessage}
}

// Buffered reports how many bytes of memory the Reader holds in its reassembly
// buffer (its capacity, for memory accounting; 0 between messages unless a small
// buffer is kept for reuse).
// Must be called on the connection's event loop.
func (r *Reader) Buffered() int {
	return cap(r.buf)
}
