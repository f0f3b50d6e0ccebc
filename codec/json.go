package codec

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the hand-written JSON scanner behind Classify. It validates
// RFC 8259 text token by token without building values and without allocating:
// no trailing commas, no leading zeros, only the escapes of RFC 8259 section 7,
// no raw control characters in strings, valid UTF-8 in strings (RFC 8259
// section 8.1), nothing but whitespace after the value, and at most
// maxJSONDepth nested arrays and objects. Nesting is tracked with an explicit
// bit stack, never by recursion, so hostile input cannot grow the goroutine
// stack.
//
// The scan functions take the input and a position and return the position
// just past what they consumed, or a negative number when the input is not
// valid JSON there.

// maxJSONDepth caps the nesting of arrays and objects; deeper input is not
// accepted. It equals encoding/json's limit, so the two agree on validity.
const maxJSONDepth = 10000

// jsonStackShort is returned by skipJSONValueStack when its bit stack is too
// small for the input's nesting; the caller retries with a larger one.
const jsonStackShort = -2

// jsonStrSafe[c] reports whether byte c may appear unescaped in a JSON string
// and needs no further check: printable ASCII and DEL, except '"' and '\\'.
// Immutable after package initialisation.
var jsonStrSafe = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// ValidJSON reports whether b is exactly one RFC 8259 JSON text, optionally
// surrounded by whitespace, with valid UTF-8 in its strings and at most 10,000
// levels of nesting. Unlike encoding/json.Valid it rejects invalid UTF-8. It
// does not allocate. Safe for concurrent use.
func ValidJSON(b []byte) bool {
	i := skipJSONSpace(b, 0)
	if i >= len(b) {
		return false
	}
	i = skipJSONValue(b, i, 0)
	return i >= 0 && skipJSONSpace(b, i) == len(b)
}

// skipJSONSpace returns the index of the first byte at or after i that is not
// JSON whitespace (RFC 8259 section 2: space, tab, line feed, carriage return).
// A byte above ' ' ends it after one comparison: that is almost every call.
func skipJSONSpace(b []byte, i int) int {
	const space = 1<<' ' | 1<<'\t' | 1<<'\n' | 1<<'\r'
	for ; i < len(b); i++ {
		if c := b[i]; c > ' ' || space&(1<<c) == 0 {
			return i
		}
	}
	return i
}

// scanJSONString scans the string token whose opening quote is b[i]. It returns
// the index just past the closing quote, or -1, and whether the token holds a
// backslash escape. A string of printable ASCII without escapes, the usual
// case, takes one strStop; anything else continues in scanJSONStringRest.
func scanJSONString(b []byte, i int) (int, bool) {
	if i = strStop(b, i+1); i < len(b) && b[i] == '"' {
		return i + 1, false
	}
	return scanJSONStringRest(b, i)
}

// scanJSONStringRest is scanJSONString from i, the index of the first byte of
// the string that is not jsonStrSafe (len(b) or more if there is none).
func scanJSONStringRest(b []byte, i int) (int, bool) {
	esc := false
	for {
		if i >= len(b) {
			return -1, esc
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return -1, esc
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hex4(b[i+2:i+6]) < 0 {
					return -1, esc
				}
				i += 6
			default:
				return -1, esc
			}
		case c < 0x20:
			return -1, esc
		default: // c >= utf8.RuneSelf
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return -1, esc
			}
			i += size
		}
		i = strStop(b, i)
	}
}

// strStop returns the index of the first byte at or after i (i <= len(b))
// that is not jsonStrSafe, or an index of len(b) or more if there is none. It
// tests eight bytes at a time.
func strStop(b []byte, i int) int {
	s := b[i:]
	j := 0
	for ; j < len(s)-7; j += 8 {
		if m := jsonStrStops(binary.LittleEndian.Uint64(s[j:])); m != 0 {
			return i + j + bits.TrailingZeros64(m)>>3
		}
	}
	// Fewer than eight bytes left: the zero bytes that loadTail puts past
	// the end are stops too.
	return i + j + bits.TrailingZeros64(jsonStrStops(loadTail(b, i+j)))>>3
}

// loadTail returns the bytes b[i:], fewer than eight, in the low bytes of a
// little-endian word whose other bytes are zero. With at least eight bytes of
// input it loads the last eight and shifts out the ones before i.
func loadTail(b []byte, i int) uint64 {
	if len(b) < 8 {
		return loadShort(b, i)
	}
	return binary.LittleEndian.Uint64(b[len(b)-8:]) >> (64 - 8*uint(len(b)-i))
}

// loadShort is loadTail for inputs shorter than eight bytes.
func loadShort(b []byte, i int) uint64 {
	var x uint64
	for k := len(b) - 1; k >= i; k-- {
		x = x<<8 | uint64(b[k])
	}
	return x
}

// jsonNonDigits returns a mask whose lowest set bit is the high bit of the
// first byte of x (little-endian) that is not an ASCII digit, or 0 if all
// eight are digits. Bits above the lowest may be spurious (carries).
func jsonNonDigits(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	d := x ^ (lo * '0')                  // digits become 0..9, every other byte 10..255
	return ((d + lo*(0x80-10)) | d) & hi // high bit: d >= 10 (d >= 0x80 via d itself)
}

// jsonStrStops returns a mask whose lowest set bit is the high bit of the first
// byte of x (little-endian) that is not jsonStrSafe, or 0 if all eight are
// safe. Bits above the lowest may be spurious (borrows); they are never used.
//
// Per byte, x-0x20 sets the high bit below 0x20, (x^'"')-1 at '"' and
// (x^'\\')-1 at '\\'; each also sets it for some bytes of 0x80 and above,
// which x flags anyway. A borrow only leaves a byte that is a stop itself, so
// nothing below the first stop is flagged.
func jsonStrStops(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	ctl := x - lo*0x20             // bytes < 0x20
	q := (x ^ (lo * '"')) - lo     // bytes == '"'
	bs := (x ^ (lo * '\\')) - lo   // bytes == '\\'
	return (ctl | q | bs | x) & hi // x: bytes >= 0x80
}

// hex4 decodes the four hex digits of a \u escape, or returns -1.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// scanJSONNumber scans the number token starting at b[i] (RFC 8259 section 6).
// It returns the index just past it, or -1, and whether it is an integer
// (no fraction, no exponent).
func scanJSONNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
		if i >= len(b) {
			return -1, false
		}
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i++
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return -1, false
	}
	isInt := true
	if i < len(b) && b[i] == '.' {
		isInt = false
		i++
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == j {
			return -1, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		isInt = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == j {
			return -1, false
		}
	}
	return i, isInt
}

// scanJSONLiteral scans true, false or null at b[i].
func scanJSONLiteral(b []byte, i int) int {
	var lit string
	switch b[i] {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	case 'n':
		lit = "null"
	default:
		return -1
	}
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// skipJSONValue validates the value starting at b[i] (no leading whitespace),
// which sits inside depth open arrays or objects, and returns the index just
// past it, or -1.
func skipJSONValue(b []byte, i, depth int) int {
	var stack [2]uint64 // 128 levels cover every sane message
	j := skipJSONValueStack(b, i, depth, stack[:])
	if j == jsonStackShort {
		return skipJSONValueDeep(b, i, depth)
	}
	return j
}

// skipJSONValueDeep is skipJSONValue's slow path for deeply nested input, with
// a bit stack large enough for maxJSONDepth levels.
func skipJSONValueDeep(b []byte, i, depth int) int {
	var stack [(maxJSONDepth + 63) / 64]uint64
	return skipJSONValueStack(b, i, depth, stack[:])
}

// skipJSONValueStack is the iterative value scanner. stack holds one bit per
// open container of this call (1 for an object, 0 for an array); it returns
// jsonStackShort when the input nests deeper than stack can record.
func skipJSONValueStack(b []byte, i, depth int, stack []uint64) int {
	n := 0 // containers opened by this call and not yet closed
	for {
		// A value starts at b[i]; the caller checked i < len(b).
		switch c := b[i]; c {
		case '{', '[':
			if depth+n >= maxJSONDepth {
				return -1
			}
			if n == len(stack)*64 {
				return jsonStackShort
			}
			i = skipJSONSpace(b, i+1)
			if i >= len(b) {
				return -1
			}
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			if b[i] == closer { // empty container: nothing to push
				i++
				break
			}
			w, bit := n>>6, uint64(1)<<(n&63)
			n++
			if c == '[' {
				stack[w] &^= bit
				continue
			}
			stack[w] |= bit
			if i = skipJSONMemberKey(b, i); i < 0 {
				return -1
			}
			continue
		case '"':
			i, _ = scanJSONString(b, i)
		case 't', 'f', 'n':
			i = scanJSONLiteral(b, i)
		default:
			i, _ = scanJSONNumber(b, i)
		}
		// After a complete value: close containers until the next value.
		for {
			if i < 0 {
				return -1
			}
			if n == 0 {
				return i
			}
			i = skipJSONSpace(b, i)
			if i >= len(b) {
				return -1
			}
			top := n - 1
			obj := stack[top>>6]&(uint64(1)<<(top&63)) != 0
			c := b[i]
			if c == ',' {
				i = skipJSONSpace(b, i+1)
				if i >= len(b) {
					return -1
				}
				if obj {
					i = skipJSONMemberKey(b, i)
					if i < 0 {
						return -1
					}
				}
				break
			}
			if obj && c == '}' || !obj && c == ']' {
				i++
				n--
				continue
			}
			return -1
		}
	}
}

// skipJSONMemberKey scans `"key" :` starting at b[i] and the whitespace after
// it, returning the index of the member's value (guaranteed < len(b)) or -1.
func skipJSONMemberKey(b []byte, i int) int {
	if b[i] != '"' {
		return -1
	}
	i, _ = scanJSONString(b, i)
	if i < 0 {
		return -1
	}
	i = skipJSONSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	i = skipJSONSpace(b, i+1)
	if i >= len(b) {
		return -1
	}
	return i
}

// nextUnquotedRune decodes the string content rune at tok[i] (tok is a valid
// string token), honouring escapes. It returns the rune and the index after
// it. A lone UTF-16 surrogate escape (one not completing a pair) is returned
// as the surrogate itself, which is not a valid rune: utf8.EncodeRune and
// AppendRune write it as U+FFFD, as encoding/json decodes it, while IDKey
// keeps it apart (appendWTF8Surrogate).
func nextUnquotedRune(tok []byte, i int) (rune, int) {
	c := tok[i]
	if c != '\\' {
		if c < utf8.RuneSelf {
			return rune(c), i + 1
		}
		r, size := utf8.DecodeRune(tok[i:])
		return r, i + size
	}
	switch tok[i+1] {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
	default: // '"', '\\', '/'
		return rune(tok[i+1]), i + 2
	}
	r := hex4(tok[i+2 : i+6])
	i += 6
	if !utf16.IsSurrogate(r) {
		return r, i
	}
	if i+6 <= len(tok) && tok[i] == '\\' && tok[i+1] == 'u' {
		if r2 := hex4(tok[i+2 : i+6]); r2 >= 0 {
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				return d, i + 6
			}
		}
	}
	return r, i
}

// unquotedEquals reports whether the valid string token tok (with quotes)
// decodes to exactly s. It does not allocate.
func unquotedEquals(tok []byte, s string) bool {
	if len(tok) < 2 {
		return false
	}
	in := tok[1 : len(tok)-1]
	// Escapes only shrink when decoded: a shorter token cannot match, one of
	// the same length has no escapes and compares directly.
	switch {
	case len(in) < len(s):
		return false
	case len(in) == len(s):
		return string(in) == s
	}
	var buf [utf8.UTFMax]byte
	j := 0
	for i := 0; i < len(in); {
		if in[i] != '\\' {
			if j >= len(s) || in[i] != s[j] {
				return false
			}
			i++
			j++
			continue
		}
		var r rune
		r, i = nextUnquotedRune(in, i)
		n := utf8.EncodeRune(buf[:], r)
		if len(s)-j < n || string(buf[:n]) != s[j:j+n] {
			return false
		}
		j += n
	}
	return j == len(s)
}

// AppendUnquote appends the decoded content of the JSON string token tok
// (including its quotes) to dst. It reports false, with dst unchanged, when tok
// is not exactly one valid string token. Lone UTF-16 surrogate escapes decode
// to U+FFFD, as in encoding/json. It does not allocate when dst has room.
// Safe for concurrent use.
func AppendUnquote(dst, tok []byte) ([]byte, bool) {
	return appendUnquote(dst, tok, false)
}

// appendUnquote is AppendUnquote; with wtf8, a lone surrogate escape is
// appended as the three-byte generalized UTF-8 sequence of the surrogate code
// point (WTF-8) instead of U+FFFD.
func appendUnquote(dst, tok []byte, wtf8 bool) ([]byte, bool) {
	if len(tok) < 2 || tok[0] != '"' {
		return dst, false
	}
	end, esc := scanJSONString(tok, 0)
	if end != len(tok) {
		return dst, false
	}
	in := tok[1 : len(tok)-1]
	if !esc {
		return append(dst, in...), true
	}
	for i := 0; i < len(in); {
		start := i
		for i < len(in) && in[i] != '\\' {
			i++
		}
		dst = append(dst, in[start:i]...)
		if i < len(in) {
			var r rune
			r, i = nextUnquotedRune(in, i)
			if wtf8 && utf16.IsSurrogate(r) {
				dst = appendWTF8Surrogate(dst, r)
			} else {
				dst = utf8.AppendRune(dst, r)
			}
		}
	}
	return dst, true
}

// appendWTF8Surrogate appends the surrogate code point r (U+D800..U+DFFF) in
// the three-byte form UTF-8 would give it if it allowed surrogates: ED A0..BF
// 80..BF. Valid UTF-8 never contains these bytes, and a string token is valid
// UTF-8 (scanJSONString checks), so they cannot collide with any character
// spelled raw or escaped; and since pairs are decoded first, a high surrogate
// written this way is never followed by a low one, so the form is unique.
func appendWTF8Surrogate(dst []byte, r rune) []byte {
	return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
}
