package codec

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/gobwas/ws"
	"pgregory.net/rapid"
)

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want ws.Header
		size int
	}{
		{
			name: "masked text 5",
			in:   []byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d},
			want: ws.Header{Fin: true, OpCode: ws.OpText, Masked: true, Mask: testMask, Length: 5},
			size: 6,
		},
		{
			name: "unmasked continuation 0",
			in:   []byte{0x00, 0x00},
			want: ws.Header{OpCode: ws.OpContinuation},
			size: 2,
		},
		{
			name: "rsv bits and reserved opcode are parsed, not judged",
			in:   []byte{0xff, 0x7d},
			want: ws.Header{Fin: true, Rsv: 7, OpCode: 0xf, Length: 125},
			size: 2,
		},
		{
			name: "16-bit length",
			in:   []byte{0x81, 0xfe, 0x01, 0x00, 1, 2, 3, 4},
			want: ws.Header{Fin: true, OpCode: ws.OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Length: 256},
			size: 8,
		},
		{
			name: "64-bit length",
			in:   []byte{0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0},
			want: ws.Header{Fin: true, OpCode: ws.OpBinary, Length: 65536},
			size: 10,
		},
		{
			name: "largest 64-bit length",
			in:   []byte{0x81, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 9, 9, 9, 9},
			want: ws.Header{Fin: true, OpCode: ws.OpText, Masked: true, Mask: [4]byte{9, 9, 9, 9}, Length: 1<<63 - 1},
			size: 14,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append(bytes.Clone(tc.in), 0xaa, 0xbb) // bytes after the header are not read
			h, n, err := ParseHeader(in)
			if err != nil || n != tc.size || h != tc.want {
				t.Fatalf("ParseHeader = %+v, %d, %v; want %+v, %d", h, n, err, tc.want, tc.size)
			}
			ref, err := ws.ReadHeader(bytes.NewReader(tc.in))
			if err != nil || ref != h {
				t.Fatalf("gobwas ReadHeader = %+v, %v; ParseHeader = %+v", ref, err, h)
			}
			for i := range tc.size {
				if _, n, err := ParseHeader(tc.in[:i]); err != ErrNeedMore || n != 0 {
					t.Fatalf("prefix of %d bytes: %d, %v; want 0, ErrNeedMore", i, n, err)
				}
			}
		})
	}
	t.Run("64-bit length with the most significant bit set", func(t *testing.T) {
		_, _, err := ParseHeader([]byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4})
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Code != ws.StatusProtocolError || !errors.Is(err, ErrProtocol) {
			t.Fatalf("err = %v, want a 1002 *CloseError", err)
		}
	})
}

// TestReaderErrors covers every close-code rule of CONTRACT.md section 1.1 with
// the exact reason where the contract fixes it.
func TestReaderErrors(t *testing.T) {
	big := uint64(1) << 62
	tests := []struct {
		name     string
		frames   []frame
		raw      []byte // used instead of frames if set
		code     ws.StatusCode
		reason   string // checked if set
		sentinel error
	}{
		{name: "unmasked text", frames: frames(frame{fin: true, op: ws.OpText, payload: []byte("hi"), unmasked: true}), code: 1002, sentinel: ErrProtocol},
		{name: "unmasked ping", frames: frames(frame{fin: true, op: ws.OpPing, unmasked: true}), code: 1002, sentinel: ErrProtocol},
		{name: "rsv1", frames: frames(frame{fin: true, rsv: 4, op: ws.OpText, payload: []byte("hi")}), code: 1002, sentinel: ErrProtocol},
		{name: "reserved opcode 3", frames: frames(frame{fin: true, op: 3}), code: 1002, sentinel: ErrProtocol},
		{name: "reserved opcode 0xB", frames: frames(frame{fin: true, op: 0xb}), code: 1002, sentinel: ErrProtocol},
		{name: "fragmented ping", frames: frames(frame{op: ws.OpPing}), code: 1002, sentinel: ErrProtocol},
		{name: "fragmented close", frames: frames(frame{op: ws.OpClose}), code: 1002, sentinel: ErrProtocol},
		{name: "pong of 126 bytes", frames: frames(pong(strings.Repeat("x", 126))), code: 1002, sentinel: ErrProtocol},
		{name: "close of 126 bytes", frames: frames(closeFrame(1000, strings.Repeat("x", 124))), code: 1002, sentinel: ErrProtocol},
		{name: "continuation without start", frames: frames(cont(true, "x")), code: 1002, sentinel: ErrProtocol},
		{name: "continuation after a finished message", frames: frames(text("a"), cont(true, "x")), code: 1002, sentinel: ErrProtocol},
		{name: "text inside fragmented message", frames: frames(textFrag("a"), text("b")), code: 1002, sentinel: ErrProtocol},
		{name: "binary inside fragmented message", frames: frames(textFrag("a"), frame{fin: true, op: ws.OpBinary}), code: 1002, sentinel: ErrProtocol},
		{name: "64-bit length MSB", raw: []byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, code: 1002, sentinel: ErrProtocol},
		{name: "binary", frames: frames(frame{fin: true, op: ws.OpBinary, payload: []byte{1}}), code: 1003, reason: "binary frames are not supported", sentinel: ErrUnsupportedData},
		{name: "empty binary fragment", frames: frames(frame{op: ws.OpBinary}), code: 1003, reason: "binary frames are not supported", sentinel: ErrUnsupportedData},
		{name: "text over the limit", frames: frames(frame{fin: true, op: ws.OpText, length: DefaultMaxMessage + 1}), code: 1009, reason: "message too big", sentinel: ErrMessageTooBig},
		{name: "text of 2^62 bytes", frames: frames(frame{fin: true, op: ws.OpText, length: int64(big)}), code: 1009, reason: "message too big", sentinel: ErrMessageTooBig},
		{name: "fragment of 2^62 bytes", frames: frames(textFrag("abc"), frame{op: ws.OpContinuation, length: int64(big)}), code: 1009, reason: "message too big", sentinel: ErrMessageTooBig},
		{name: "invalid utf-8 text", frames: frames(text("a\xffb")), code: 1007, sentinel: ErrInvalidUTF8},
		{name: "surrogate across fragments", frames: frames(textFrag("a\xed"), cont(true, "\xa0\x80")), code: 1007, sentinel: ErrInvalidUTF8},
		{name: "message ends inside a code point", frames: frames(textFrag("a\xe2\x82"), cont(true, "")), code: 1007, sentinel: ErrInvalidUTF8},
		{name: "close with 1-byte payload", frames: frames(closeRaw([]byte{3})), code: 1002, sentinel: ErrProtocol},
		{name: "close code 1005", frames: frames(closeFrame(1005, "")), code: 1002, sentinel: ErrProtocol},
		{name: "close code 1015", frames: frames(closeFrame(1015, "")), code: 1002, sentinel: ErrProtocol},
		{name: "close code 5000", frames: frames(closeFrame(5000, "")), code: 1002, sentinel: ErrProtocol},
		{name: "close reason invalid utf-8", frames: frames(closeFrame(1000, "\xc0\xaf")), code: 1007, sentinel: ErrInvalidUTF8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.raw
			if s == nil {
				s, _ = stream(tc.frames...)
			}
			for _, cuts := range [][]int{nil, everyByte(len(s))} {
				o := feed(t, 0, s, cuts)
				if o.code == 0 {
					t.Fatalf("got %v, want a close error", o)
				}
				err := error(&CloseError{Code: o.code, Reason: o.reason})
				if o.code != tc.code || tc.reason != "" && o.reason != tc.reason {
					t.Fatalf("got close %d %q, want %d %q", o.code, o.reason, tc.code, tc.reason)
				}
				if !errors.Is(err, tc.sentinel) {
					t.Fatalf("errors.Is(%v, %v) = false", err, tc.sentinel)
				}
			}
		})
	}
}

// TestReaderValidCloseCodes checks every 16-bit close code against the rule of
// ValidCloseCode, and that ws.CheckCloseFrameData differs only where documented.
func TestReaderValidCloseCodes(t *testing.T) {
	for code := range 1 << 16 {
		c := ws.StatusCode(code)
		valid := code >= 1000 && code <= 1003 || code >= 1007 && code <= 1014 || code >= 3000 && code <= 4999
		if ValidCloseCode(c) != valid {
			t.Fatalf("ValidCloseCode(%d) = %v", code, !valid)
		}
		gobwas := ws.CheckCloseFrameData(c, "") == nil
		documented := code >= 1012 && code <= 1014 || code >= 5000
		if gobwas != valid && !documented {
			t.Errorf("gobwas/ws and ValidCloseCode disagree on %d beyond the documented codes", code)
		}
		if code%97 != 0 && code != 1005 && code != 1015 && code != 999 && code != 5000 {
			continue // the full Reader path for a sample
		}
		o := feed(t, 0, closeFrame(uint16(code), "bye").bytes(), nil)
		if valid && (len(o.events) != 1 || o.events[0].Code != c || string(o.events[0].Payload) != "bye") {
			t.Errorf("close %d: got %v, want a close event", code, o)
		}
		if !valid && o.code != ws.StatusProtocolError {
			t.Errorf("close %d: got %v, want 1002", code, o)
		}
	}
}

// TestReaderMaxMessage checks CONTRACT.md section 1.1: exactly MaxMessage bytes
// are accepted, MaxMessage+1 are refused with 1009, unfragmented or in many
// fragments, and the refusal needs only the frame header.
func TestReaderMaxMessage(t *testing.T) {
	const max = 1000
	for _, size := range []int{1, 7, 125, 126, 999, 1000} { // fragment sizes
		for _, total := range []int{max, max + 1} {
			t.Run(fmt.Sprintf("%d bytes in fragments of %d", total, size), func(t *testing.T) {
				msg := strings.Repeat("é", total/2) + strings.Repeat("x", total%2)
				var fs []frame
				for i := 0; i < total; i += size {
					end := min(i+size, total)
					op := ws.OpContinuation
					if i == 0 {
						op = ws.OpText
					}
					fs = append(fs, frame{fin: end == total, op: op, payload: []byte(msg[i:end])})
				}
				s, ends := stream(fs...)
				for _, cuts := range [][]int{nil, ends, everyByte(len(s))} {
					o := feed(t, max, s, cuts)
					if total == max {
						if o.code != 0 || len(o.events) != 1 || string(o.events[0].Payload) != msg {
							t.Fatalf("exactly MaxMessage: got %v", o)
						}
						continue
					}
					if o.code != ws.StatusMessageTooBig || len(o.events) != 0 {
						t.Fatalf("MaxMessage+1: got %v, want 1009", o)
					}
				}
				if total == max {
					return
				}
				// The frame that crosses the limit fails with its header alone.
				k := (max) / size // index of the crossing frame
				start := 0
				if k > 0 {
					start = ends[k-1]
				}
				_, hn, _ := ParseHeader(s[start:])
				o := feed(t, max, s[:start+hn], everyByte(start+hn))
				if o.code != ws.StatusMessageTooBig || o.errAt != start+hn {
					t.Fatalf("header only: got %v, want 1009 at %d", o, start+hn)
				}
				var r Reader
				r.MaxMessage = max
				in := bytes.Clone(s[:start+hn-1])
				ev, n, err := r.Next(in)
				if ev.Kind != EventNone || err != nil || n != start {
					t.Fatalf("before the header completes: %s, %d, %v; want none, %d, nil", ev.Kind, n, err, start)
				}
				before := r.Buffered()
				if before > keepBuf && before > 2*max {
					t.Fatalf("Buffered() = %d before the crossing header", before)
				}
				_, _, err = r.Next(bytes.Clone(s[start : start+hn]))
				if !errors.Is(err, ErrMessageTooBig) {
					t.Fatalf("err = %v, want 1009", err)
				}
			})
		}
	}
	t.Run("zero MaxMessage means the contract default", func(t *testing.T) {
		ok := feed(t, 0, frame{fin: true, op: ws.OpText, payload: bytes.Repeat([]byte{'x'}, DefaultMaxMessage)}.bytes(), nil)
		if ok.code != 0 || len(ok.events) != 1 {
			t.Fatalf("got %v", ok)
		}
		tooBig := feed(t, 0, frame{fin: true, op: ws.OpText, length: DefaultMaxMessage + 1}.bytes(), nil)
		if tooBig.code != ws.StatusMessageTooBig {
			t.Fatalf("got %v", tooBig)
		}
	})
}

// TestReaderFastPath checks that a whole unfragmented text frame is returned in
// place, without buffering.
func TestReaderFastPath(t *testing.T) {
	b := text(`{"jsonrpc":"2.0","id":1,"method":"get"}`).bytes()
	var r Reader
	ev, n, err := r.Next(b)
	if err != nil || n != len(b) || ev.Kind != EventText || string(ev.Payload) != `{"jsonrpc":"2.0","id":1,"method":"get"}` {
		t.Fatalf("Next = %s %q, %d, %v", ev.Kind, ev.Payload, n, err)
	}
	if &ev.Payload[0] != &b[2+4] {
		t.Fatal("payload does not alias the input")
	}
	if r.Buffered() != 0 {
		t.Fatalf("Buffered() = %d", r.Buffered())
	}
}

// TestReaderDeferUTF8 checks that with DeferUTF8 only a whole unfragmented
// text frame skips the UTF-8 check (marked Unchecked, invalid bytes and all),
// while split and fragmented messages are still checked as they arrive.
func TestReaderDeferUTF8(t *testing.T) {
	bad := "{\"a\":\"\xff\"}"
	t.Run("whole frame", func(t *testing.T) {
		for _, msg := range []string{`{"a":"é"}`, bad} {
			b := text(msg).bytes()
			r := Reader{DeferUTF8: true}
			ev, n, err := r.Next(b)
			if err != nil || n != len(b) || ev.Kind != EventText || !ev.Unchecked || string(ev.Payload) != msg {
				t.Fatalf("%q: Next = %s unchecked=%v %q, %d, %v", msg, ev.Kind, ev.Unchecked, ev.Payload, n, err)
			}
		}
	})
	t.Run("split frame", func(t *testing.T) {
		b := text(bad).bytes()
		r := Reader{DeferUTF8: true}
		_, n, err := r.Next(bytes.Clone(b[:len(b)-2])) // up to the bad byte
		if err == nil {
			t.Fatalf("split frame with a bad byte: no error (consumed %d)", n)
		}
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Code != ws.StatusInvalidFramePayloadData {
			t.Fatalf("err = %v, want 1007", err)
		}
	})
	t.Run("fragmented", func(t *testing.T) {
		b, _ := stream(textFrag(`{"a":"`), cont(true, "\xff\"}"))
		r := Reader{DeferUTF8: true}
		var err error
		for off := 0; off < len(b) && err == nil; {
			var n int
			var ev Event
			ev, n, err = r.Next(b[off:])
			if ev.Kind == EventText {
				t.Fatalf("fragmented message with a bad byte delivered (unchecked=%v)", ev.Unchecked)
			}
			off += n
		}
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Code != ws.StatusInvalidFramePayloadData {
			t.Fatalf("err = %v, want 1007", err)
		}
	})
	t.Run("off by default", func(t *testing.T) {
		var r Reader
		if _, _, err := r.Next(text(bad).bytes()); err == nil {
			t.Fatal("a whole frame with a bad byte passed without DeferUTF8")
		}
	})
}

// TestReaderBuffers checks that a connection keeps no big buffer after a message
// and that Reset releases everything.
func TestReaderBuffers(t *testing.T) {
	for _, size := range []int{10, keepBuf, keepBuf + 1, 64 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			msg := strings.Repeat("y", size)
			s := text(msg).bytes()
			var r Reader
			// Half the frame: absorbed into the buffer.
			ev, n, err := r.Next(bytes.Clone(s[:len(s)/2]))
			if ev.Kind != EventNone || err != nil || n != len(s)/2 {
				t.Fatalf("first half: %s, %d, %v", ev.Kind, n, err)
			}
			if r.Buffered() == 0 {
				t.Fatal("nothing buffered for a split frame")
			}
			ev, n, err = r.Next(bytes.Clone(s[len(s)/2:]))
			if ev.Kind != EventText || err != nil || n != len(s)-len(s)/2 || string(ev.Payload) != msg {
				t.Fatalf("second half: %s, %d, %v", ev.Kind, n, err)
			}
			if r.Buffered() > keepBuf {
				t.Fatalf("Buffered() = %d after the message, want <= %d", r.Buffered(), keepBuf)
			}
			r.Reset()
			if r.Buffered() != 0 {
				t.Fatalf("Buffered() = %d after Reset", r.Buffered())
			}
		})
	}
}

// TestReaderControlFrameWaits checks that a control frame is returned only whole,
// consuming nothing before, and that it does not disturb a message in progress.
func TestReaderControlFrameWaits(t *testing.T) {
	frag := textFrag("abc").bytes()
	p := ping("are you there").bytes()
	var r Reader
	in := append(bytes.Clone(frag), p[:len(p)-1]...)
	ev, n, err := r.Next(in)
	if ev.Kind != EventNone || err != nil || n != len(frag) {
		t.Fatalf("partial ping: %s, %d, %v; want none, %d", ev.Kind, n, err, len(frag))
	}
	in = bytes.Clone(p)
	ev, n, err = r.Next(in)
	if ev.Kind != EventPing || err != nil || n != len(p) || string(ev.Payload) != "are you there" {
		t.Fatalf("whole ping: %s %q, %d, %v", ev.Kind, ev.Payload, n, err)
	}
	ev, _, err = r.Next(cont(true, "def").bytes())
	if ev.Kind != EventText || err != nil || string(ev.Payload) != "abcdef" {
		t.Fatalf("message after ping: %s %q, %v", ev.Kind, ev.Payload, err)
	}
}

// TestReaderProperty: random UTF-8-ish messages, randomly fragmented, with
// control frames in between, fed in random chunks: valid messages arrive intact,
// invalid ones fail with 1007 at the chunk that carries the offending byte, and
// messages over the limit fail with 1009 at the crossing header.
func TestReaderProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := int64(rapid.IntRange(1, 64).Draw(t, "max"))
		var fs []frame
		var want []Event
		wantCode := ws.StatusCode(0)
		failAt := -1
		pos := 0
		nmsg := rapid.IntRange(1, 4).Draw(t, "messages")
		for m := 0; m < nmsg && wantCode == 0; m++ {
			msg := utf8Bytes().Draw(t, "msg")
			nfrag := rapid.IntRange(1, 4).Draw(t, "fragments")
			cuts := rapid.SliceOfN(rapid.IntRange(0, len(msg)), nfrag-1, nfrag-1).Draw(t, "frag cuts")
			sortInts(cuts)
			cuts = append(cuts, len(msg))
			bad := firstInvalid(msg)
			prev := 0
			for i, c := range cuts {
				if rapid.Bool().Draw(t, "ping between") && i > 0 {
					f := ping(fmt.Sprint(i))
					fs = append(fs, f)
					want = append(want, evPing(fmt.Sprint(i)))
					pos += len(f.bytes())
				}
				op := ws.OpContinuation
				if i == 0 {
					op = ws.OpText
				}
				f := frame{fin: i == len(cuts)-1, op: op, payload: msg[prev:c]}
				fb := f.bytes()
				hs := len(fb) - len(f.payload)
				fs = append(fs, f)
				switch {
				case int64(c) > max:
					wantCode, failAt = ws.StatusMessageTooBig, pos+hs
				case bad >= prev && bad < c:
					wantCode, failAt = ws.StatusInvalidFramePayloadData, pos+hs+bad-prev+1
				case f.fin && !utf8.Valid(msg):
					wantCode, failAt = ws.StatusInvalidFramePayloadData, pos+len(fb)
				}
				pos += len(fb)
				prev = c
				if wantCode != 0 {
					break
				}
			}
			if wantCode == 0 {
				want = append(want, evText(string(msg)))
			}
		}
		s, _ := stream(fs...)
		chunks := rapid.SliceOfN(rapid.IntRange(0, len(s)), 0, 10).Draw(t, "chunks")
		sortInts(chunks)
		got := feed(t, max, s, chunks)
		exp := outcome{events: want, code: wantCode, reason: got.reason}
		if !sameEvents(got, exp) {
			t.Fatalf("got  %v\nwant %v", got, exp)
		}
		if wantCode != 0 {
			// The error comes with the first chunk that reaches failAt.
			at := len(s)
			for _, c := range chunks {
				if c >= failAt {
					at = c
					break
				}
			}
			if got.errAt != at {
				t.Fatalf("failed after %d bytes, want %d (offending byte at %d)", got.errAt, at, failAt)
			}
		}
	})
}

// benchFrame returns a masked text frame with an n-byte JSON-ish payload.
func benchFrame(n int) []byte {
	p := []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"s":"`)
	for len(p) < n-2 {
		p = append(p, "abcdefghijklmnopqrstuvwxyz"[len(p)%26])
	}
	p = append(p, `"}`...)
	return frame{fin: true, op: ws.OpText, payload: p[:n], mask: [4]byte{0xa1, 0xb2, 0xc3, 0xd4}}.bytes()
}

// BenchmarkReaderNext measures the fast path: one whole masked text frame per
// call. Each iteration first copies the masked frame into the input buffer (as a
// socket read would), since Next unmasks in place.
func BenchmarkReaderNext(b *testing.B) {
	for _, c := range []struct {
		n         int
		deferUTF8 bool
	}{{64, false}, {1024, false}, {64, true}} {
		n := c.n
		name := fmt.Sprintf("%dB", n)
		if c.deferUTF8 {
			name += "-deferUTF8" // as the gateway reads
		}
		b.Run(name, func(b *testing.B) {
			src := benchFrame(n)
			in := make([]byte, len(src))
			r := Reader{DeferUTF8: c.deferUTF8}
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(in, src)
				ev, c, err := r.Next(in)
				if err != nil || ev.Kind != EventText || c != len(in) {
					b.Fatal(ev.Kind, c, err)
				}
			}
		})
	}
}

// BenchmarkReaderNextSplit measures the buffered path: a 1 KiB frame that
// arrives in two reads.
func BenchmarkReaderNextSplit(b *testing.B) {
	src := benchFrame(1024)
	in := make([]byte, len(src))
	half := len(src) / 2
	var r Reader
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		copy(in, src)
		if _, _, err := r.Next(in[:half]); err != nil {
			b.Fatal(err)
		}
		ev, _, err := r.Next(in[half:])
		if err != nil || ev.Kind != EventText {
			b.Fatal(ev.Kind, err)
		}
	}
}

// TestReaderRandomStreams feeds random frame sequences (valid and not) whole and
// in random chunks and requires identical results.
func TestReaderRandomStreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		s := randomStream(rng)
		whole := feed(t, 40, s, nil)
		for range 5 {
			cuts := randomCuts(rng, len(s), 10)
			if split := feed(t, 40, s, cuts); !sameEvents(whole, split) {
				t.Fatalf("stream %d %x cut at %v:\n whole %v\n split %v", i, s, cuts, whole, split)
			}
		}
	}
}

// randomStream builds a mostly well-formed stream of frames with random flaws.
func randomStream(rng *rand.Rand) []byte {
	ops := []ws.OpCode{ws.OpText, ws.OpText, ws.OpContinuation, ws.OpContinuation, ws.OpPing, ws.OpPong, ws.OpClose, ws.OpBinary, 3, 0xb}
	var s []byte
	for range rng.IntN(6) + 1 {
		f := frame{fin: rng.IntN(3) > 0, op: ops[rng.IntN(len(ops))]}
		f.payload = make([]byte, rng.IntN(30))
		for i := range f.payload {
			const alphabet = "ab\xc3\xa9\xe2\x82\xac\xed\xff"
			f.payload[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if f.op == ws.OpClose && len(f.payload) >= 2 {
			f.payload[0], f.payload[1] = 0x03, 0xe8
		}
		if rng.IntN(20) == 0 {
			f.rsv = 1
		}
		if rng.IntN(30) == 0 {
			f.unmasked = true
		}
		f.mask = [4]byte{byte(rng.IntN(256)), 1, 2, 3}
		s = append(s, f.bytes()...)
	}
	return s
}

// TestReaderShortFrameFastPath checks the short-frame shortcut of Next
// against the general path: every first header byte (FIN, RSV bits, every
// opcode) with every 7-bit length, masked and not, a valid and an invalid
// UTF-8 payload, after a fragment start or not, and message limits below
// and above the length. Whole (the shortcut may apply) and in two pieces cut
// after the first payload byte (it cannot: the frame is not whole, so the
// general path absorbs it) must give the same events and close code.
func TestReaderShortFrameFastPath(t *testing.T) {
	payload := func(n int, valid bool) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = 'a' + byte(i%26)
		}
		if !valid && n > 0 {
			p[n/2] = 0xff
		}
		return p
	}
	mask := []byte{0x37, 0xfa, 0x21, 0x3d}
	start := frame{fin: false, op: ws.OpText, payload: []byte("ab")}.bytes()
	cases := 0
	for b0 := range 256 {
		for _, n := range []int{1, 3, 4, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100, 124, 125} {
			for _, masked := range []bool{true, false} {
				for _, valid := range []bool{true, false} {
					p := payload(n, valid)
					f := []byte{byte(b0), byte(n)}
					if masked {
						f[1] |= 0x80
						f = append(f, mask...)
						for i, c := range p {
							f = append(f, c^mask[i&3])
						}
					} else {
						f = append(f, p...)
					}
					for _, fragmented := range []bool{false, true} {
						s := f
						if fragmented {
							s = append(bytes.Clone(start), f...)
						}
						for _, max := range []int64{0, int64(n), int64(max(n-1, 1))} {
							cut := len(s) - len(f) + len(f) - n + 1 // after the first payload byte
							whole := feed(t, max, s, nil)
							split := feed(t, max, s, []int{cut})
							if !sameEvents(whole, split) {
								t.Fatalf("header % x, %d bytes, fragmented %v, max %d:\nwhole %v\nsplit %v",
									f[:2], n, fragmented, max, whole, split)
							}
							cases++
						}
					}
				}
			}
		}
	}
	t.Logf("%d cases", cases)
}

// TestUnmaskShort compares unmaskShort with ws.Cipher for every length it
// serves and keys with every byte distinct.
func TestUnmaskShort(t *testing.T) {
	for _, key := range [][]byte{{1, 2, 3, 4}, {0xff, 0, 0x80, 0x7f}, {0, 0, 0, 0}} {
		for n := range 126 {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i*7 + 3)
			}
			want := bytes.Clone(p)
			ws.Cipher(want, [4]byte(key), 0)
			unmaskShort(p, key)
			if !bytes.Equal(p, want) {
				t.Fatalf("key % x, %d bytes: got % x, want % x", key, n, p, want)
			}
		}
	}
}

// TestReaderSize keeps the Reader at 80 bytes: every idle WebSocket
// connection holds one (issue 21). maskOff was an int (88 bytes); a new
// field goes in the padding after the flags, or is weighed against it.
func TestReaderSize(t *testing.T) {
	if got := unsafe.Sizeof(Reader{}); got > 80 {
		t.Errorf("codec.Reader is %d bytes, want at most 80", got)
	}
}
