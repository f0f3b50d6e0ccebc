package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// testMask is the masking key of the RFC 6455 section 5.7 examples.
var testMask = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// frame describes one client-to-server frame for tests. The zero value of the
// optional fields gives a masked frame with no RSV bits whose header declares
// len(payload).
type frame struct {
	fin      bool
	rsv      byte
	op       ws.OpCode
	payload  []byte
	unmasked bool
	length   int64 // declared length if > 0 (only with a shorter or empty payload)
	mask     [4]byte
}

// bytes encodes f with gobwas/ws's header writer (an encoder independent of
// ParseHeader) and masks the payload.
func (f frame) bytes() []byte {
	h := ws.Header{Fin: f.fin, Rsv: f.rsv, OpCode: f.op, Masked: !f.unmasked, Length: int64(len(f.payload))}
	if f.length > 0 {
		h.Length = f.length
	}
	h.Mask = testMask
	if f.mask != [4]byte{} {
		h.Mask = f.mask
	}
	var buf bytes.Buffer
	if err := ws.WriteHeader(&buf, h); err != nil {
		panic(err)
	}
	p := append([]byte(nil), f.payload...)
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	buf.Write(p)
	return buf.Bytes()
}

func text(s string) frame     { return frame{fin: true, op: ws.OpText, payload: []byte(s)} }
func textFrag(s string) frame { return frame{op: ws.OpText, payload: []byte(s)} }
func cont(fin bool, s string) frame {
	return frame{fin: fin, op: ws.OpContinuation, payload: []byte(s)}
}
func ping(s string) frame { return frame{fin: true, op: ws.OpPing, payload: []byte(s)} }
func pong(s string) frame { return frame{fin: true, op: ws.OpPong, payload: []byte(s)} }
func closeFrame(code uint16, reason string) frame {
	p := binary.BigEndian.AppendUint16(nil, code)
	return frame{fin: true, op: ws.OpClose, payload: append(p, reason...)}
}
func closeRaw(p []byte) frame { return frame{fin: true, op: ws.OpClose, payload: p} }

// stream concatenates frames and returns the offset at which each frame ends.
func stream(frames ...frame) ([]byte, []int) {
	var b []byte
	ends := make([]int, len(frames))
	for i, f := range frames {
		b = append(b, f.bytes()...)
		ends[i] = len(b)
	}
	return b, ends
}

// outcome is what a Reader made of a byte stream.
type outcome struct {
	events []Event // payloads copied
	code   ws.StatusCode
	reason string
	// errAt is the number of stream bytes given to the Reader when it returned its
	// error (-1 without error): for fail-fast checks.
	errAt int
}

func (o outcome) String() string {
	var b bytes.Buffer
	for _, ev := range o.events {
		fmt.Fprintf(&b, "%s(%d,%q) ", ev.Kind, ev.Code, abbrev(ev.Payload))
	}
	if o.code != 0 {
		fmt.Fprintf(&b, "close %d %q at %d", o.code, o.reason, o.errAt)
	}
	return b.String()
}

func abbrev(p []byte) string {
	if len(p) > 40 {
		return fmt.Sprintf("%s...(%d bytes)", p[:40], len(p))
	}
	return string(p)
}

// sameEvents reports whether a and b decoded the same events and error code.
func sameEvents(a, b outcome) bool {
	if len(a.events) != len(b.events) || a.code != b.code || a.reason != b.reason {
		return false
	}
	for i := range a.events {
		x, y := a.events[i], b.events[i]
		if x.Kind != y.Kind || x.Code != y.Code || !bytes.Equal(x.Payload, y.Payload) {
			return false
		}
	}
	return true
}

// feed drives a fresh Reader like the event loop does: bytes arrive in the
// chunks that cuts delimit (increasing offsets into s), are appended to a pending
// buffer, and Next is called until it returns EventNone; consumed bytes are
// discarded. Like the loop, it stops at the first close event or error. It checks
// the Reader's invariants on every call and reports violations with t.Fatalf.
func feed(t fataler, max int64, s []byte, cuts []int) outcome {
	t.Helper()
	s = bytes.Clone(s) // Next unmasks in place
	r := Reader{MaxMessage: max}
	o := outcome{errAt: -1}
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
		for {
			ev, n, err := r.Next(pending)
			if n < 0 || n > len(pending) {
				t.Fatalf("Next consumed %d of %d bytes", n, len(pending))
			}
			if err != nil {
				var ce *CloseError
				if !errors.As(err, &ce) {
					t.Fatalf("Next returned %v, want a *CloseError", err)
				}
				if ev.Kind != EventNone {
					t.Fatalf("Next returned event %s with error %v", ev.Kind, err)
				}
				if _, _, again := r.Next(pending[n:]); again != err {
					t.Fatalf("error not final: got %v after %v", again, err)
				}
				if r.Buffered() != 0 {
					t.Fatalf("Buffered() = %d after error", r.Buffered())
				}
				o.code, o.reason, o.errAt = ce.Code, ce.Reason, end
				return o
			}
			if ev.Kind == EventNone {
				pending = pending[n:]
				if ev2, n2, err2 := r.Next(pending); ev2.Kind != EventNone || n2 != 0 || err2 != nil {
					t.Fatalf("Next left work after EventNone: %s, %d, %v", ev2.Kind, n2, err2)
				}
				break
			}
			ev.Payload = bytes.Clone(ev.Payload)
			if ev.Payload == nil {
				ev.Payload = []byte{}
			}
			o.events = append(o.events, ev)
			pending = pending[n:]
			if ev.Kind == EventClose {
				return o
			}
		}
	}
	return o
}

// fataler is what feed needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// everyByte returns the cuts of octet-wise feeding.
func everyByte(n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = i + 1
	}
	return c
}

// randomCuts returns up to k sorted random cut points in [0, n].
func randomCuts(rng *rand.Rand, n, k int) []int {
	if n == 0 {
		return nil
	}
	c := make([]int, rng.IntN(k+1))
	for i := range c {
		c[i] = rng.IntN(n + 1)
	}
	sortInts(c)
	return c
}

func sortInts(c []int) {
	for i := 1; i < len(c); i++ {
		for j := i; j > 0 && c[j] < c[j-1]; j-- {
			c[j], c[j-1] = c[j-1], c[j]
		}
	}
}

// validPrefix reports whether p can be extended to valid UTF-8: the reference for
// fail-fast checks, by brute force over the continuation bytes that matter.
func validPrefix(p []byte) bool {
	if utf8.Valid(p) {
		return true
	}
	cands := []byte{0x80, 0x90, 0xa0}
	buf := make([]byte, len(p), len(p)+3)
	copy(buf, p)
	for n := 1; n <= 3; n++ {
		total := 1
		for range n {
			total *= len(cands)
		}
		for k := range total {
			q := buf[:len(p)]
			for x := k; len(q) < len(p)+n; x /= len(cands) {
				q = append(q, cands[x%len(cands)])
			}
			if utf8.Valid(q) {
				return true
			}
		}
	}
	return false
}
