package codec

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// lineEvent is one line the LineReader reported: "ok:<line>" or "long".
type lineEvent string

func okLine(s string) lineEvent { return lineEvent("ok:" + s) }

const tooLong lineEvent = "long"

// lineOutcome is what a LineReader made of a byte stream.
type lineOutcome struct {
	events []lineEvent
	// rest is the input left in the caller's buffer at the end: a line
	// still waiting for its newline (never more than Max+1 bytes).
	rest string
}

func (o lineOutcome) String() string {
	ev := make([]string, len(o.events))
	for i, e := range o.events {
		ev[i] = abbrev([]byte(e))
	}
	return fmt.Sprintf("%q rest %q", ev, abbrev([]byte(o.rest)))
}

// feedLines drives a fresh LineReader as the gateway does (loop.conn.lines,
// loop.streamLoop.input): bytes arrive in the chunks that cuts delimit
// (increasing offsets into s) and are appended to a pending buffer; Next is
// called until it returns LineNone with nothing consumed; consumed bytes are
// discarded. It checks the reader's invariants on every call:
//   - consumed is within [0, len(pending)];
//   - a LineOK line aliases the front of pending and ends just before the
//     consumed "\n" (or "\r\n"), is at most Max bytes and holds no "\n";
//   - LineTooLong and LineNone carry no line;
//   - after each chunk is processed the caller holds at most Max+1 bytes: an
//     over-long line is never buffered while it is skipped.
func feedLines(t fataler, max int, s []byte, cuts []int) lineOutcome {
	t.Helper()
	r := LineReader{Max: max}
	var o lineOutcome
	var pending []byte
	prev := 0
	for i := 0; i <= len(cuts); i++ {
		end := len(s)
		if i < len(cuts) {
			end = cuts[i]
		}
		if end < prev {
			continue
		}
		pending = append(pending, s[prev:end]...)
		prev = end
		for calls := 0; ; calls++ {
			if calls > len(s)+2 {
				t.Fatalf("Next does not settle: %d calls on %d pending bytes", calls, len(pending))
			}
			line, kind, n := r.Next(pending)
			if n < 0 || n > len(pending) {
				t.Fatalf("Next consumed %d of %d bytes", n, len(pending))
			}
			switch kind {
			case LineOK:
				if len(line) > max {
					t.Fatalf("LineOK line of %d bytes, Max %d", len(line), max)
				}
				if len(line) > 0 && &line[0] != &pending[0] {
					t.Fatalf("LineOK line does not alias the front of the input")
				}
				if bytes.IndexByte(line, '\n') >= 0 {
					t.Fatalf("LineOK line %q holds a newline", line)
				}
				term := string(pending[len(line):n])
				if term != "\n" && term != "\r\n" {
					t.Fatalf("LineOK line %q consumed %d bytes ending %q, want the line and its newline", line, n, term)
				}
				o.events = append(o.events, okLine(string(line)))
			case LineTooLong:
				if line != nil {
					t.Fatalf("LineTooLong with line %q", line)
				}
				if n == 0 {
					t.Fatalf("LineTooLong consumed nothing")
				}
				o.events = append(o.events, tooLong)
			case LineNone:
				if line != nil {
					t.Fatalf("LineNone with line %q", line)
				}
			default:
				t.Fatalf("Next returned kind %d", kind)
			}
			pending = pending[n:]
			if kind == LineNone && n == 0 {
				break
			}
		}
		if len(pending) > max+1 {
			t.Fatalf("caller holds %d bytes after a chunk, Max %d: the reader holds an over-long line", len(pending), max)
		}
		if bytes.IndexByte(pending, '\n') >= 0 {
			t.Fatalf("LineNone with a newline in the remaining input %q", pending)
		}
	}
	o.rest = string(pending)
	return o
}

// modelLines is the reference: CONTRACT.md section 1.2 by plain splitting.
// Each "\n"-terminated line loses one trailing "\r" and is OK up to max bytes,
// else too long. A final unterminated fragment is too long once it can no
// longer become an acceptable line (more than max bytes, unless it is max
// bytes and a "\r" that a "\n" may still follow); otherwise it is the rest.
func modelLines(max int, s []byte) lineOutcome {
	var o lineOutcome
	parts := bytes.Split(s, []byte{'\n'})
	for _, p := range parts[:len(parts)-1] {
		p = bytes.TrimSuffix(p, []byte{'\r'})
		if len(p) > max {
			o.events = append(o.events, tooLong)
		} else {
			o.events = append(o.events, okLine(string(p)))
		}
	}
	frag := parts[len(parts)-1]
	if len(frag) > max+1 || (len(frag) == max+1 && frag[max] != '\r') {
		o.events = append(o.events, tooLong)
	} else {
		o.rest = string(frag)
	}
	return o
}

func sameLines(a, b lineOutcome) bool {
	return slices.Equal(a.events, b.events) && a.rest == b.rest
}

// TestLineReader checks the NDJSON splitter of CONTRACT.md section 1.2 on
// inputs that arrive in the given chunks.
func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 9)
	tests := []struct {
		name   string
		max    int
		chunks []string
		want   []lineEvent
		rest   string
	}{
		{name: "one line", max: 8, chunks: []string{"abc\n"}, want: []lineEvent{okLine("abc")}},
		{name: "no newline yet", max: 8, chunks: []string{"abc"}, rest: "abc"},
		{name: "CRLF stripped", max: 8, chunks: []string{"abc\r\n"}, want: []lineEvent{okLine("abc")}},
		{name: "only one CR stripped", max: 8, chunks: []string{"abc\r\r\n"}, want: []lineEvent{okLine("abc\r")}},
		{name: "CR inside a line kept", max: 8, chunks: []string{"a\rb\n"}, want: []lineEvent{okLine("a\rb")}},
		{name: "lone CR is not a line end", max: 8, chunks: []string{"a\rb\r"}, rest: "a\rb\r"},
		{name: "empty lines", max: 8, chunks: []string{"\n\r\n\n"}, want: []lineEvent{okLine(""), okLine(""), okLine("")}},
		{name: "empty line between lines", max: 8, chunks: []string{"a\n\nb\n"}, want: []lineEvent{okLine("a"), okLine(""), okLine("b")}},
		{name: "exactly Max", max: 8, chunks: []string{"12345678\n"}, want: []lineEvent{okLine("12345678")}},
		{name: "exactly Max with CR", max: 8, chunks: []string{"12345678\r\n"}, want: []lineEvent{okLine("12345678")}},
		{name: "exactly Max then CR waits for LF", max: 8, chunks: []string{"12345678\r"}, rest: "12345678\r"},
		{name: "exactly Max then CR then LF later", max: 8, chunks: []string{"12345678\r", "\n"}, want: []lineEvent{okLine("12345678")}},
		{name: "exactly Max split before CR", max: 8, chunks: []string{"12345678", "\r", "\n"}, want: []lineEvent{okLine("12345678")}},
		{name: "Max then CR then text is too long", max: 8, chunks: []string{"12345678\r", "x\nok\n"}, want: []lineEvent{tooLong, okLine("ok")}},
		{name: "Max+1 in one buffer", max: 8, chunks: []string{"123456789\nok\n"}, want: []lineEvent{tooLong, okLine("ok")}},
		{name: "Max+1 with CR in one buffer", max: 8, chunks: []string{"123456789\r\nok\n"}, want: []lineEvent{tooLong, okLine("ok")}},
		{name: "Max+1 without newline reported at once", max: 8, chunks: []string{"123456789"}, want: []lineEvent{tooLong}},
		{name: "Max+1 then resync", max: 8, chunks: []string{"123456789", "abc", "def\nok\n"}, want: []lineEvent{tooLong, okLine("ok")}},
		{name: "Max+1 CR CR is too long", max: 8, chunks: []string{"12345678\r\r\n"}, want: []lineEvent{tooLong}},
		{name: "over-long reported once across many chunks", max: 8, chunks: []string{long, long, long, long, "\n", "ok\n"}, want: []lineEvent{tooLong, okLine("ok")}},
		{name: "over-long then partial next line", max: 8, chunks: []string{long + "\nab"}, want: []lineEvent{tooLong}, rest: "ab"},
		{name: "two over-long lines", max: 8, chunks: []string{long + "\n" + long + "\n"}, want: []lineEvent{tooLong, tooLong}},
		{name: "over-long line then an empty line", max: 8, chunks: []string{long, "\n\n"}, want: []lineEvent{tooLong, okLine("")}},
		{name: "newline right after the skip starts", max: 8, chunks: []string{long, "\n", "a\n"}, want: []lineEvent{tooLong, okLine("a")}},
		{name: "line split across many calls", max: 64, chunks: []string{`{"js`, `onrpc`, `":"2.0",`, `"id":1`, `}`, "\r", "\n"}, want: []lineEvent{okLine(`{"jsonrpc":"2.0","id":1}`)}},
		{name: "many lines in one buffer", max: 8, chunks: []string{"a\nbb\r\nccc\n\ndddd\nee"}, want: []lineEvent{okLine("a"), okLine("bb"), okLine("ccc"), okLine(""), okLine("dddd")}, rest: "ee"},
		{name: "Max 1", max: 1, chunks: []string{"a\nab\n\r\nb\r\n"}, want: []lineEvent{okLine("a"), tooLong, okLine(""), okLine("b")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s []byte
			var cuts []int
			for _, c := range tt.chunks {
				s = append(s, c...)
				cuts = append(cuts, len(s))
			}
			want := lineOutcome{events: tt.want, rest: tt.rest}
			if got := feedLines(t, tt.max, s, cuts); !sameLines(got, want) {
				t.Errorf("chunks %q:\ngot  %v\nwant %v", tt.chunks, got, want)
			}
			// The same stream whole and octet by octet gives the same lines,
			// and so does the reference model.
			if got := feedLines(t, tt.max, s, nil); !sameLines(got, want) {
				t.Errorf("whole %q:\ngot  %v\nwant %v", s, got, want)
			}
			if got := feedLines(t, tt.max, s, everyByte(len(s))); !sameLines(got, want) {
				t.Errorf("octets %q:\ngot  %v\nwant %v", s, got, want)
			}
			if got := modelLines(tt.max, s); !sameLines(got, want) {
				t.Errorf("model disagrees with the table on %q:\nmodel %v\nwant  %v", s, got, want)
			}
		})
	}
}

// TestLineReaderSkipAdvances checks the exact results of Next while an
// over-long line streams in: it is reported once, every byte of it is
// consumed as it arrives (nothing is held), and the bytes after its newline
// are left for the next call.
func TestLineReaderSkipAdvances(t *testing.T) {
	r := LineReader{Max: 4}
	type step struct {
		in       string
		line     string
		kind     LineKind
		consumed int
	}
	steps := []step{
		{in: "abc", kind: LineNone, consumed: 0},            // could still be a line
		{in: "abcd", kind: LineNone, consumed: 0},           // exactly Max
		{in: "abcd\r", kind: LineNone, consumed: 0},         // Max and a CR: "\n" may follow
		{in: "abcd\ref", kind: LineTooLong, consumed: 7},    // reported, all consumed
		{in: "ghij", kind: LineNone, consumed: 4},           // skipped as it comes
		{in: "", kind: LineNone, consumed: 0},               // nothing to do
		{in: "kl\nxy\n", kind: LineNone, consumed: 3},       // end of the long line
		{in: "xy\n", line: "xy", kind: LineOK, consumed: 3}, // the next line is served
		{in: "", kind: LineNone, consumed: 0},
	}
	for i, s := range steps {
		line, kind, n := r.Next([]byte(s.in))
		if string(line) != s.line || kind != s.kind || n != s.consumed {
			t.Fatalf("step %d Next(%q) = %q, %d, %d; want %q, %d, %d", i, s.in, line, kind, n, s.line, s.kind, s.consumed)
		}
	}
}

// TestLineReaderReset checks that Reset drops a skip in progress.
func TestLineReaderReset(t *testing.T) {
	r := LineReader{Max: 2}
	if _, kind, _ := r.Next([]byte("abcd")); kind != LineTooLong {
		t.Fatalf("kind %d, want LineTooLong", kind)
	}
	r.Reset()
	if line, kind, n := r.Next([]byte("ok\n")); kind != LineOK || string(line) != "ok" || n != 3 {
		t.Fatalf("after Reset: %q, %d, %d; want \"ok\", LineOK, 3", line, kind, n)
	}
}

// FuzzLines feeds arbitrary bytes to a LineReader whole, split where the
// fuzzer chooses and (for short inputs) octet by octet. feedLines checks that
// Next never panics, consumes within bounds, and never holds more than Max+1
// bytes; all three feedings must give the same line sequence as the
// reference split of modelLines.
func FuzzLines(f *testing.F) {
	f.Add([]byte("a\nbb\r\nccc\n\ndddd\nee"), []byte{1, 2, 3}, uint8(3))
	f.Add([]byte("12345678\r\n123456789\r\nok\n"), []byte{9, 1}, uint8(7))
	f.Add([]byte("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n\r\n"), []byte{5, 5, 5, 5}, uint8(4))
	f.Add([]byte("abcd\r\r\n\r\r\r\n"), []byte{4, 1, 1}, uint8(3))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`+"\n"), []byte{10, 20}, uint8(255))
	f.Fuzz(func(t *testing.T, data, cuts []byte, max uint8) {
		m := int(max) + 1 // Max must be positive
		want := modelLines(m, data)
		if whole := feedLines(t, m, data, nil); !sameLines(whole, want) {
			t.Fatalf("whole %v\nmodel %v", whole, want)
		}
		if split := feedLines(t, m, data, fuzzCuts(cuts, len(data))); !sameLines(split, want) {
			t.Fatalf("split %v\nmodel %v", split, want)
		}
		if len(data) <= 512 {
			if octets := feedLines(t, m, data, everyByte(len(data))); !sameLines(octets, want) {
				t.Fatalf("octets %v\nmodel  %v", octets, want)
			}
		}
	})
}
