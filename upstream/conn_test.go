package upstream

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gobwas/ws"
)

// TestWSReaderHugeFrameLengths is the regression test of two crashes a
// WebSocket upstream could cause with a frame header alone (CONTRACT.md
// section 10: nothing an upstream sends can crash edge). The reader
// allocated a control frame's payload at the length its header claimed, so
// a ping claiming 2^63-1 bytes panicked in makeslice (and one claiming a few
// GiB allocated them); and it checked a continuation against the message
// limit as len(msg)+length, which overflowed for a length near 2^63 and
// panicked in growslice. A control frame is final and carries at most 125
// bytes (RFC 6455 section 5.5): anything else fails the connection.
func TestWSReaderHugeFrameLengths(t *testing.T) {
	huge := []byte{127, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	gib := []byte{127, 0, 0, 0, 1, 0, 0, 0, 0} // 4 GiB
	tests := []struct {
		name    string
		in      []byte
		wantErr error // nil: the input's end (io.EOF or io.ErrUnexpectedEOF)
	}{
		{"ping claiming 2^63-1 bytes", append([]byte{0x89}, huge...), ws.ErrProtocolControlPayloadOverflow},
		{"ping claiming 4 GiB", append([]byte{0x89}, gib...), ws.ErrProtocolControlPayloadOverflow},
		{"ping claiming 126 bytes", append([]byte{0x89, 126, 0, 126}, make([]byte, 126)...), ws.ErrProtocolControlPayloadOverflow},
		{"close claiming 2^63-1 bytes", append([]byte{0x88}, huge...), ws.ErrProtocolControlPayloadOverflow},
		{"fragmented ping", []byte{0x09, 1, 'p'}, ws.ErrProtocolControlNotFinal},
		{"continuation claiming 2^63-1 bytes after one byte",
			append([]byte{0x01, 1, '{', 0x80}, huge...), nil},
		{"text claiming 2^63-1 bytes", append([]byte{0x81}, huge...), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := testUpstream(nil, Config{MaxMessageBytes: 1 << 10})
			l := newLink(u, "t", appendClientFrame, true)
			l.open()
			err := (&wsConn{r: bytes.NewReader(tt.in), max: 1 << 10}).read(l)
			switch {
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("read: %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Fatalf("read: %v, want the end of the input", err)
			}
		})
	}
}

// TestReadLinesLimits: NDJSON lines from an upstream are split on \n with a
// trailing \r stripped; a line over the limit is dropped and counted, also
// one longer than the read buffer, and reading resumes after it; a last
// line without a newline still counts.
func TestReadLinesLimits(t *testing.T) {
	const max = 100
	u := testUpstream(nil, Config{MaxMessageBytes: max})
	l := newLink(u, "t", nil, false)
	l.open()
	c, c2 := &recCall{method: "edge/echo"}, &recCall{method: "edge/echo"}
	l.forward(c)
	l.forward(c2)
	in := strings.Repeat("x", max+1) + "\n" + // over the limit
		strings.Repeat("y", 200<<10) + "\n" + // over the limit and the 64 KiB read buffer
		"\r\n\n" + // empty lines: nothing
		`{"jsonrpc":"2.0","id":1,"result":{"ok":1}}` + "\r\n" +
		`{"jsonrpc":"2.0","id":2,"result":{"ok":2}}` // no newline at the end
	if err := readLines(strings.NewReader(in), max, l); !errors.Is(err, io.EOF) {
		t.Fatalf("readLines: %v, want EOF", err)
	}
	if len(c.result) != 1 || c.result[0] != `{"ok":1}` || len(c2.result) != 1 || c2.result[0] != `{"ok":2}` {
		t.Fatalf("calls finished with %q and %q, want one result each", c.result, c2.result)
	}
	if n := u.Dropped(); n != 2 {
		t.Fatalf("Dropped() = %d, want 2 (the two long lines)", n)
	}
}
