package load

import (
	"encoding/binary"

	"github.com/gobwas/ws"
)

// Header is a parsed WebSocket frame header (RFC 6455 section 5.2).
type Header struct {
	Fin    bool
	Op     ws.OpCode
	Masked bool
	Mask   [4]byte
	Len    int // payload length
}

// ParseHeader parses the frame header at the start of b without allocating.
// It returns the header and its length in bytes; ok is false when b does not
// yet hold the whole header. A payload length that does not fit an int is
// reported as ErrFrameTooLarge.
func ParseHeader(b []byte) (h Header, n int, ok bool, err error) {
	if len(b) < 2 {
		return h, 0, false, nil
	}
	h.Fin = b[0]&0x80 != 0
	h.Op = ws.OpCode(b[0] & 0x0f)
	h.Masked = b[1]&0x80 != 0
	n = 2
	switch l := b[1] & 0x7f; l {
	case 126:
		if len(b) < 4 {
			return h, 0, false, nil
		}
		h.Len = int(b[2])<<8 | int(b[3])
		n = 4
	case 127:
		if len(b) < 10 {
			return h, 0, false, nil
		}
		var v uint64
		for _, c := range b[2:10] {
			v = v<<8 | uint64(c)
		}
		if v > 1<<40 {
			return h, 0, false, ErrFrameTooLarge
		}
		h.Len = int(v)
		n = 10
	default:
		h.Len = int(l)
	}
	if h.Masked {
		if len(b) < n+4 {
			return h, 0, false, nil
		}
		copy(h.Mask[:], b[n:n+4])
		n += 4
	}
	return h, n, true, nil
}

// IDWidth is the number of decimal digits of every request id the generator
// sends. Ids are IDBase+seq, so they are always this wide and fit a uint32
// (centrifuge's id type); the digits can be rewritten in place in a
// pre-masked frame.
const IDWidth = 10

// IDBase is the id of sequence number 0.
const IDBase = 1_000_000_000

// idSpan is how many distinct ids there are before they wrap.
const idSpan = 3_000_000_000

// IDOf returns the wire id of sequence number seq.
func IDOf(seq uint64) uint64 { return IDBase + seq%idSpan }

// TimeWidth is the number of digits of the timestamp field of a publish
// template: TimeBase+ns, ns since the generator's epoch (under 2^53, so it
// survives a float64 round trip in peers that decode and re-encode data).
const TimeWidth = 16

// TimeBase is the timestamp field's value at the generator's epoch.
const TimeBase = 1_000_000_000_000_000

// field is one fixed-width decimal number inside a template's payload, stored
// as the wire offsets of its digits and the mask byte applied to each.
type field struct {
	pos  []int
	mask []byte
}

// Template is a pre-masked client message: one frame, or a fragmented run of
// frames, built once with a constant mask. Fixed-width decimal fields (the
// request id, a timestamp) are rewritten in place while appending, so
// building a request costs one copy and a few byte stores.
type Template struct {
	wire   []byte
	fields []field // fields[0] is the id
	// idPos is the wire offset of the id digits when they are contiguous
	// (one frame, or not split by a fragment boundary), -1 otherwise; idMask
	// and idMaskTail are the mask bytes applied to them, as putID XORs them.
	idPos      int
	idMask     uint64
	idMaskTail uint16
}

// NewTemplate frames payload as one text message masked with mask. idOff is
// the payload offset of the IDWidth id digits, or -1 when the message has no
// id; extra lists further fields as (offset, width) pairs. When frag > 0 and
// the payload is longer, it is split into fragments of at most frag bytes
// (RFC 6455 section 5.4).
func NewTemplate(payload []byte, mask [4]byte, frag int, idOff int, extra ...[2]int) *Template {
	t := &Template{}
	type span struct{ off, width int }
	spans := []span{{idOff, IDWidth}}
	for _, e := range extra {
		spans = append(spans, span{e[0], e[1]})
	}
	// payload offset -> wire offset, and payload offset -> mask index within its frame.
	wireOf := make([]int, len(payload))
	maskOf := make([]byte, len(payload))
	if frag <= 0 || frag >= len(payload) {
		frag = len(payload)
	}
	for start := 0; start < len(payload) || start == 0; start += frag {
		end := min(start+frag, len(payload))
		op := ws.OpContinuation
		if start == 0 {
			op = ws.OpText
		}
		h := ws.Header{Fin: end == len(payload), OpCode: op, Masked: true, Mask: mask, Length: int64(end - start)}
		t.wire = appendHeader(t.wire, h)
		base := len(t.wire)
		body := append([]byte(nil), payload[start:end]...)
		for i := range body {
			wireOf[start+i] = base + i
			maskOf[start+i] = mask[i&3]
		}
		ws.Cipher(body, mask, 0)
		t.wire = append(t.wire, body...)
		if end == len(payload) {
			break
		}
	}
	for _, s := range spans {
		var f field
		if s.off >= 0 {
			for i := 0; i < s.width; i++ {
				f.pos = append(f.pos, wireOf[s.off+i])
				f.mask = append(f.mask, maskOf[s.off+i])
			}
		}
		t.fields = append(t.fields, f)
	}
	t.idPos = -1
	if f := t.fields[0]; len(f.pos) == IDWidth && f.pos[IDWidth-1] == f.pos[0]+IDWidth-1 {
		t.idPos = f.pos[0]
		t.idMask = binary.LittleEndian.Uint64(f.mask)
		t.idMaskTail = binary.LittleEndian.Uint16(f.mask[8:])
	}
	return t
}

// Len is the number of wire bytes of one message built from t.
func (t *Template) Len() int { return len(t.wire) }

// Append appends one message with the given id to dst and returns it. It does
// not allocate when dst has room. Safe for concurrent use (t is read-only).
func (t *Template) Append(dst []byte, id uint64) []byte {
	n := len(dst)
	dst = append(dst, t.wire...)
	if t.idPos >= 0 && id < maxID {
		putID(dst[n+t.idPos:], id, t.idMask, t.idMaskTail)
	} else {
		setField(dst[n:], &t.fields[0], id)
	}
	return dst
}

// maxID bounds the ids putID writes: every id has IDWidth digits.
const maxID = 10_000_000_000

// putID writes id (below maxID) as IDWidth digits, leading zeros included,
// XORed with mask (the first eight) and tail (the last two): what setField
// writes for a contiguous field, with a few multiplications (SWAR) instead of
// a loop over digit pairs.
func putID(b []byte, id uint64, mask uint64, tail uint16) {
	_ = b[IDWidth-1]
	hi, lo := id/100, id%100 // hi: the first 8 digits
	// Two 4-digit groups in 32-bit lanes, the leading group in the low lane
	// (the lowest address once stored little-endian).
	v := hi/10000 | (hi%10000)<<32
	q := (v * 10486 >> 20) & 0x0000007f0000007f // lane/100 (exact below 10000)
	v = q | (v-q*100)<<16                       // 2-digit groups in 16-bit lanes
	q = (v * 103 >> 10) & 0x000f000f000f000f    // lane/10 (exact below 100)
	v = q | (v-q*10)<<8                         // digits in bytes
	binary.LittleEndian.PutUint64(b, (v|0x3030303030303030)^mask)
	t := uint16(lo/10) | uint16(lo%10)<<8
	binary.LittleEndian.PutUint16(b[8:], (t|0x3030)^tail)
}

// AppendWith is Append with values for the extra fields, in NewTemplate order.
func (t *Template) AppendWith(dst []byte, id uint64, vals ...uint64) []byte {
	n := len(dst)
	dst = append(dst, t.wire...)
	setField(dst[n:], &t.fields[0], id)
	for i, v := range vals {
		setField(dst[n:], &t.fields[i+1], v)
	}
	return dst
}

// digitPairs holds "00".."99", so that setField divides once per two digits.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

func setField(msg []byte, f *field, v uint64) {
	pos, mask := f.pos, f.mask[:len(f.pos)]
	i := len(pos) - 1
	for ; i >= 1; i -= 2 {
		q := v / 100
		r := (v - q*100) * 2
		msg[pos[i]] = digitPairs[r+1] ^ mask[i]
		msg[pos[i-1]] = digitPairs[r] ^ mask[i-1]
		v = q
	}
	if i == 0 {
		msg[pos[0]] = byte('0'+v%10) ^ mask[0]
	}
}

// appendHeader appends the wire form of a client frame header.
func appendHeader(dst []byte, h ws.Header) []byte {
	b0 := byte(h.OpCode)
	if h.Fin {
		b0 |= 0x80
	}
	b1 := byte(0)
	if h.Masked {
		b1 = 0x80
	}
	switch l := h.Length; {
	case l < 126:
		dst = append(dst, b0, b1|byte(l))
	case l <= 0xffff:
		dst = append(dst, b0, b1|126, byte(l>>8), byte(l))
	default:
		dst = append(dst, b0, b1|127)
		for s := 56; s >= 0; s -= 8 {
			dst = append(dst, byte(l>>s))
		}
	}
	if h.Masked {
		dst = append(dst, h.Mask[:]...)
	}
	return dst
}

// AppendControl appends a masked control or single text frame carrying
// payload (a pong, a close, a one-off message). It does not allocate when dst
// has room.
func AppendControl(dst []byte, op ws.OpCode, payload []byte, mask [4]byte) []byte {
	dst = appendHeader(dst, ws.Header{Fin: true, OpCode: op, Masked: true, Mask: mask, Length: int64(len(payload))})
	n := len(dst)
	dst = append(dst, payload...)
	ws.Cipher(dst[n:], mask, 0)
	return dst
}
