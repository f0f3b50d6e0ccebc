package codec

import "unicode/utf8"

// UTF8 validates a UTF-8 byte stream that arrives in pieces. It accepts exactly what
// utf8.Valid accepts for the concatenation of the pieces (no surrogates, no overlong
// forms, nothing above U+10FFFF), and it rejects as early as the bytes allow: Write
// fails on the first byte after which no continuation could make the stream valid
// (Autobahn cases 6.4.x, RFC 6455 section 8.1). The zero value is an empty stream.
type UTF8 struct {
	need   uint8 // continuation bytes still expected for the current code point
	lo, hi uint8 // accepted range of the next byte while need > 0
	bad    bool  // sticky: the stream can no longer become valid
}

// Write adds p to the stream. It reports false if the stream so far is not a
// prefix of any valid UTF-8 text; the validator then stays failed.
// Not safe for concurrent use; owned by its Reader.
func (u *UTF8) Write(p []byte) bool {
	if u.bad {
		return false
	}
	// Finish the code point that a previous Write left open.
	for u.need > 0 && len(p) > 0 {
		if !u.step(p[0]) {
			return false
		}
		p = p[1:]
	}
	if len(p) == 0 {
		return true
	}
	// Split p before a code point that it leaves unfinished, so that the head can
	// go through the standard library's fast check and the few tail bytes through
	// the state machine. The head ends on a code point boundary, so it is valid on
	// its own exactly when it is valid as part of the stream.
	cut := len(p)
	for j := len(p) - 1; j >= 0 && j >= len(p)-utf8.UTFMax; j-- {
		c := p[j]
		if c < utf8.RuneSelf {
			break
		}
		if c >= 0xc0 {
			if n := leadLen(c); n > len(p)-j {
				cut = j
			}
			break
		}
	}
	if !utf8.Valid(p[:cut]) {
		u.bad = true
		return false
	}
	for _, c := range p[cut:] {
		if !u.step(c) {
			return false
		}
	}
	return true
}

// Done reports whether the stream written so far is complete, valid UTF-8: false
// if it failed or ends inside a code point.
// Not safe for concurrent use; owned by its Reader.
func (u *UTF8) Done() bool {
	return !u.bad && u.need == 0
}

// Reset starts a new, empty stream.
// Not safe for concurrent use; owned by its Reader.
func (u *UTF8) Reset() {
	*u = UTF8{}
}

// step feeds one byte to the state machine. The accepted ranges are those of
// unicode/utf8 (RFC 3629 section 4): only the second byte of a sequence has a
// range narrower than 0x80-0xBF.
func (u *UTF8) step(c byte) bool {
	if u.need > 0 {
		if c < u.lo || c > u.hi {
			u.bad = true
			return false
		}
		u.need--
		u.lo, u.hi = 0x80, 0xbf
		return true
	}
	switch {
	case c < utf8.RuneSelf:
		return true
	case c >= 0xc2 && c <= 0xdf:
		u.need, u.lo, u.hi = 1, 0x80, 0xbf
	case c == 0xe0:
		u.need, u.lo, u.hi = 2, 0xa0, 0xbf
	case c == 0xed:
		u.need, u.lo, u.hi = 2, 0x80, 0x9f
	case c >= 0xe1 && c <= 0xef:
		u.need, u.lo, u.hi = 2, 0x80, 0xbf
	case c == 0xf0:
		u.need, u.lo, u.hi = 3, 0x90, 0xbf
	case c >= 0xf1 && c <= 0xf3:
		u.need, u.lo, u.hi = 3, 0x80, 0xbf
	case c == 0xf4:
		u.need, u.lo, u.hi = 3, 0x80, 0x8f
	default:
		u.bad = true
		return false
	}
	return true
}

// leadLen returns the length of the sequence that lead byte c starts, or 0 if c
// cannot start a sequence (0xC0, 0xC1, 0xF5-0xFF).
func leadLen(c byte) int {
	switch {
	case c >= 0xc2 && c <= 0xdf:
		return 2
	case c >= 0xe0 && c <= 0xef:
		return 3
	case c >= 0xf0 && c <= 0xf4:
		return 4
	}
	return 0
}
