package codec

import "bytes"

// LineKind says what LineReader.Next found.
type LineKind uint8

// Line kinds.
const (
	// LineNone: no complete line yet; call Next again once more bytes arrived.
	LineNone LineKind = iota
	// LineOK: a complete line (without "\n" and a trailing "\r").
	LineOK
	// LineTooLong: a line longer than Max; it is skipped up to its newline and
	// reported once (CONTRACT.md section 1.2: -32700, then resync).
	LineTooLong
)

// LineReader splits an NDJSON byte stream into lines (CONTRACT.md section
// 1.2). Lines alias the input, so nothing is buffered: a partial line stays in
// the caller's buffer until its newline arrives, and a line over Max is
// reported as soon as Max bytes have arrived without a newline and then
// discarded as it streams in, without being held. Pure: no I/O.
type LineReader struct {
	// Max is the largest accepted line in bytes, without its "\n" (> 0).
	Max int

	skipping bool // inside an over-long line, discarding up to its newline
	scanned  int  // bytes at the front of the pending input known to hold no newline
}

// Next consumes bytes from the front of b and returns the next line. consumed
// is how many bytes of b are used up; the caller discards exactly that many
// after it is done with line, which aliases b. With LineNone, consumed may be
// positive (the tail of an over-long line being skipped).
func (r *LineReader) Next(b []byte) (line []byte, kind LineKind, consumed int) {
	from := min(r.scanned, len(b))
	i := bytes.IndexByte(b[from:], '\n')
	if r.skipping {
		if i < 0 {
			r.scanned = 0
			return nil, LineNone, len(b)
		}
		r.skipping, r.scanned = false, 0
		return nil, LineNone, from + i + 1
	}
	if i < 0 {
		// A line of Max bytes may still be followed by "\r\n".
		if len(b) > r.Max+1 || (len(b) == r.Max+1 && b[r.Max] != '\r') {
			// Over-long and no newline yet: report now, skip the rest as it comes.
			r.skipping, r.scanned = true, 0
			return nil, LineTooLong, len(b)
		}
		r.scanned = len(b)
		return nil, LineNone, 0
	}
	end := from + i
	r.scanned = 0
	line = b[:end]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > r.Max {
		return nil, LineTooLong, end + 1
	}
	return line, LineOK, end + 1
}

// Reset drops all state.
func (r *LineReader) Reset() { r.skipping, r.scanned = false, 0 }
