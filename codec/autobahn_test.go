package codec

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gobwas/ws"
)

// This file translates the Autobahn|Testsuite fuzzing cases of groups 1-7 (and the
// size limits of group 9) that apply to a server that declines binary messages and
// compression into Reader-level tests (../shared/autobahn-cases.md). Where Autobahn
// expects an echo, the Reader must deliver the message; where it expects the
// connection to fail, the Reader must return a *CloseError with the expected code,
// as soon as the offending byte arrived. Every case is fed whole, frame by frame,
// octet by octet, split at every byte boundary (small cases) and at random
// boundaries, and must decode identically each way.

// failPoint says where in the stream a case must fail.
type failPoint uint8

const (
	failHeader failPoint = iota // at the end of the header of frame bad
	failFrame                   // at the end of frame bad (control frame payload checks)
	failUTF8                    // at the first byte the UTF-8 reference rejects (see utf8FailAt)
)

type wsCase struct {
	id     string
	frames []frame
	chop   int     // Autobahn's own chop size, 0 if none
	max    int64   // Reader.MaxMessage, 0 for the default
	want   []Event // events before the close or failure
	code   ws.StatusCode
	bad    int // failHeader/failFrame: index of the frame that must fail
	at     failPoint
}

func evText(s string) Event { return Event{Kind: EventText, Payload: []byte(s)} }
func evPing(s string) Event { return Event{Kind: EventPing, Payload: []byte(s)} }
func evPong(s string) Event { return Event{Kind: EventPong, Payload: []byte(s)} }
func evClose(code ws.StatusCode, reason string) Event {
	return Event{Kind: EventClose, Code: code, Payload: []byte(reason)}
}

// normalClose is the close frame the fuzzing client ends each case with.
var normalClose = closeFrame(1000, "")

func frames(fs ...frame) []frame { return fs }
func events(es ...Event) []Event { return es }

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func autobahnCases() []wsCase {
	var cs []wsCase
	add := func(c wsCase) { cs = append(cs, c) }

	// 1.1 Text messages of the lengths around the 7/16/64-bit length encodings.
	for i, n := range []int{0, 125, 126, 127, 128, 65535, 65536} {
		p := strings.Repeat("*", n)
		add(wsCase{id: fmt.Sprintf("1.1.%d", i+1), frames: frames(text(p), normalClose), want: events(evText(p), evClose(1000, ""))})
	}
	p64k := strings.Repeat("*", 65536)
	add(wsCase{id: "1.1.8", frames: frames(text(p64k), normalClose), chop: 997, want: events(evText(p64k), evClose(1000, ""))})

	// 1.2 Binary messages: declined with 1003 as soon as the header is parsed.
	for i, n := range []int{0, 125, 126, 127, 128, 65535, 65536, 65536} {
		c := wsCase{id: fmt.Sprintf("1.2.%d", i+1), frames: frames(frame{fin: true, op: ws.OpBinary, payload: bytes.Repeat([]byte{0xfe}, n)}, normalClose), code: 1003}
		if i == 7 {
			c.chop = 997
		}
		add(c)
	}

	// 2. Pings and pongs.
	add(wsCase{id: "2.1", frames: frames(ping(""), normalClose), want: events(evPing(""), evClose(1000, ""))})
	add(wsCase{id: "2.2", frames: frames(ping("Hello, world!"), normalClose), want: events(evPing("Hello, world!"), evClose(1000, ""))})
	bin := "\x00\xff\xfe\xfd\xfc\xfb\x00\xff"
	add(wsCase{id: "2.3", frames: frames(ping(bin), normalClose), want: events(evPing(bin), evClose(1000, ""))})
	p125 := strings.Repeat("\xfe", 125)
	add(wsCase{id: "2.4", frames: frames(ping(p125), normalClose), want: events(evPing(p125), evClose(1000, ""))})
	add(wsCase{id: "2.5", frames: frames(ping(strings.Repeat("\xfe", 126)), normalClose), code: 1002})
	add(wsCase{id: "2.6", frames: frames(ping(p125), normalClose), chop: 1, want: events(evPing(p125), evClose(1000, ""))})
	add(wsCase{id: "2.7", frames: frames(pong(""), normalClose), want: events(evPong(""), evClose(1000, ""))})
	add(wsCase{id: "2.8", frames: frames(pong("unsolicited pong payload"), normalClose), want: events(evPong("unsolicited pong payload"), evClose(1000, ""))})
	add(wsCase{id: "2.9", frames: frames(pong("unsolicited pong payload"), ping("sent after unsolicited pong"), normalClose),
		want: events(evPong("unsolicited pong payload"), evPing("sent after unsolicited pong"), evClose(1000, ""))})
	for i, chop := range []int{0, 1} {
		var fs []frame
		var want []Event
		for j := range 10 {
			s := fmt.Sprintf("payload-%d", j)
			fs = append(fs, ping(s))
			want = append(want, evPing(s))
		}
		add(wsCase{id: fmt.Sprintf("2.%d", 10+i), frames: append(fs, normalClose), chop: chop, want: append(want, evClose(1000, ""))})
	}

	// 3. Reserved bits: no extension is negotiated, so any RSV bit fails.
	hello := "Hello, world!"
	add(wsCase{id: "3.1", frames: frames(frame{fin: true, rsv: 1, op: ws.OpText, payload: []byte(hello)}, normalClose), code: 1002})
	for i, rsv := range []byte{2, 3, 4} {
		add(wsCase{id: fmt.Sprintf("3.%d", i+2), frames: frames(text(hello), frame{fin: true, rsv: rsv, op: ws.OpText, payload: []byte(hello)}, ping(""), normalClose),
			chop: []int{0, 0, 1}[i], want: events(evText(hello)), code: 1002, bad: 1})
	}
	add(wsCase{id: "3.5", frames: frames(frame{fin: true, rsv: 5, op: ws.OpBinary, payload: []byte{0, 1, 2}}, normalClose), code: 1002})
	add(wsCase{id: "3.6", frames: frames(frame{fin: true, rsv: 6, op: ws.OpPing, payload: []byte(hello)}, normalClose), code: 1002})
	add(wsCase{id: "3.7", frames: frames(frame{fin: true, rsv: 7, op: ws.OpClose}, normalClose), code: 1002})

	// 4. Reserved opcodes.
	for i, op := range []ws.OpCode{3, 4, 5, 6, 7, 11, 12, 13, 14, 15} {
		group, n := "4.1", i+1
		if op >= 11 {
			group, n = "4.2", i-4
		}
		var payload []byte
		if n%2 == 0 || n > 3 {
			payload = []byte("reserved opcode payload")
		}
		c := wsCase{id: fmt.Sprintf("%s.%d", group, n), code: 1002}
		if n <= 2 {
			c.frames = frames(frame{fin: true, op: op, payload: payload}, normalClose)
		} else {
			c.frames = frames(text(hello), frame{fin: true, op: op, payload: payload}, ping(""), normalClose)
			c.want, c.bad = events(evText(hello)), 1
		}
		add(c)
	}

	// 5. Fragmentation.
	for i, op := range []ws.OpCode{ws.OpPing, ws.OpPong} {
		add(wsCase{id: fmt.Sprintf("5.%d", i+1), frames: frames(frame{op: op, payload: []byte("fragment1")}, frame{fin: true, op: ws.OpContinuation, payload: []byte("fragment2")}, normalClose), code: 1002})
	}
	for i, chop := range []int{0, -1, 1} {
		add(wsCase{id: fmt.Sprintf("5.%d", i+3), frames: frames(textFrag("fragment1"), cont(true, "fragment2"), normalClose), chop: chop,
			want: events(evText("fragment1fragment2"), evClose(1000, ""))})
		add(wsCase{id: fmt.Sprintf("5.%d", i+6), frames: frames(textFrag("fragment1"), ping("ping payload"), cont(true, "fragment2"), normalClose), chop: chop,
			want: events(evPing("ping payload"), evText("fragment1fragment2"), evClose(1000, ""))})
		add(wsCase{id: fmt.Sprintf("5.%d", i+9), frames: frames(cont(true, "non-continuation payload"), text(hello), normalClose), chop: chop, code: 1002})
		add(wsCase{id: fmt.Sprintf("5.%d", i+12), frames: frames(cont(false, "non-continuation payload"), text(hello), normalClose), chop: chop, code: 1002})
	}
	add(wsCase{id: "5.15", frames: frames(textFrag("fragment1"), cont(true, "fragment2"), cont(false, "fragment3"), text("fragment4"), normalClose),
		want: events(evText("fragment1fragment2")), code: 1002, bad: 2})
	for i, fin := range []bool{false, true} {
		var fs []frame
		for range 2 {
			fs = append(fs, cont(fin, "fragment1"), textFrag("fragment2"), cont(true, "fragment3"))
		}
		add(wsCase{id: fmt.Sprintf("5.%d", 16+i), frames: append(fs, normalClose), code: 1002})
	}
	add(wsCase{id: "5.18", frames: frames(textFrag("fragment1"), text("fragment2"), normalClose), code: 1002, bad: 1})
	for i, chop := range []int{0, 1} {
		add(wsCase{id: fmt.Sprintf("5.%d", 19+i), chop: chop,
			frames: frames(textFrag("fragment1"), cont(false, "fragment2"), ping("pongme 1!"), cont(false, "fragment3"), cont(false, "fragment4"), ping("pongme 2!"), cont(true, "fragment5"), normalClose),
			want:   events(evPing("pongme 1!"), evPing("pongme 2!"), evText("fragment1fragment2fragment3fragment4fragment5"), evClose(1000, ""))})
	}

	// 6.1-6.4 UTF-8 with fragments; 6.5-6.23 single-frame payloads (autobahnUTF8).
	add(wsCase{id: "6.1.1", frames: frames(text(""), normalClose), want: events(evText(""), evClose(1000, ""))})
	add(wsCase{id: "6.1.2", frames: frames(textFrag(""), cont(false, ""), cont(true, ""), normalClose), want: events(evText(""), evClose(1000, ""))})
	add(wsCase{id: "6.1.3", frames: frames(textFrag(""), cont(false, "middle frame payload"), cont(true, ""), normalClose),
		want: events(evText("middle frame payload"), evClose(1000, ""))})
	m621 := string(mustHex("48656c6c6f2dc2b540c39fc3b6c3a4c3bcc3a0c3a12d5554462d382121"))
	add(wsCase{id: "6.2.1", frames: frames(text(m621), normalClose), want: events(evText(m621), evClose(1000, ""))})
	add(wsCase{id: "6.2.2", frames: frames(textFrag(string(mustHex("48656c6c6f2dc2b540c39fc3b6c3a4"))), cont(true, string(mustHex("c3bcc3a0c3a12d5554462d382121"))), normalClose),
		want: events(evText(m621), evClose(1000, ""))})
	add(wsCase{id: "6.2.3", frames: append(octetFrames(m621), normalClose), want: events(evText(m621), evClose(1000, ""))})
	m624 := string(mustHex("cebae1bdb9cf83cebcceb5"))
	add(wsCase{id: "6.2.4", frames: append(octetFrames(m624), normalClose), want: events(evText(m624), evClose(1000, ""))})
	m63 := string(mustHex("cebae1bdb9cf83cebcceb5eda080656469746564"))
	add(wsCase{id: "6.3.1", frames: frames(text(m63), normalClose), code: 1007, at: failUTF8})
	add(wsCase{id: "6.3.2", frames: append(octetFrames(m63), normalClose), code: 1007, at: failUTF8})
	// 6.4.x: the fail-fast cases; 6.4.3/6.4.4 send one frame in three chops,
	// which feed() covers with its every-byte and every-cut feeding.
	add(wsCase{id: "6.4.1", frames: frames(textFrag(string(mustHex("cebae1bdb9cf83cebcceb5"))), cont(false, string(mustHex("f4908080"))), cont(true, string(mustHex("656469746564"))), normalClose), code: 1007, at: failUTF8})
	add(wsCase{id: "6.4.2", frames: frames(textFrag(string(mustHex("cebae1bdb9cf83cebcceb5f4"))), cont(false, string(mustHex("90"))), cont(true, string(mustHex("8080656469746564"))), normalClose), code: 1007, at: failUTF8})
	add(wsCase{id: "6.4.3", frames: frames(text(string(mustHex("cebae1bdb9cf83cebcceb5"+"f4908080"+"656469746564"))), normalClose), code: 1007, at: failUTF8})
	add(wsCase{id: "6.4.4", frames: frames(text(string(mustHex("cebae1bdb9cf83cebcceb5f4"+"90"+"8080656469746564"))), normalClose), code: 1007, at: failUTF8})
	for _, u := range autobahnUTF8 {
		s := string(mustHex(u.hex))
		if u.valid {
			add(wsCase{id: u.id, frames: frames(text(s), normalClose), want: events(evText(s), evClose(1000, ""))})
		} else {
			add(wsCase{id: u.id, frames: frames(text(s), normalClose), code: 1007, at: failUTF8})
		}
	}

	// 7. Close handling. Like the event loop, feed() stops at the first close.
	add(wsCase{id: "7.1.1", frames: frames(text(hello), normalClose), want: events(evText(hello), evClose(1000, ""))})
	add(wsCase{id: "7.1.2", frames: frames(normalClose, normalClose), want: events(evClose(1000, ""))})
	add(wsCase{id: "7.1.3", frames: frames(normalClose, ping(hello)), want: events(evClose(1000, ""))})
	add(wsCase{id: "7.1.4", frames: frames(normalClose, text(hello)), want: events(evClose(1000, ""))})
	add(wsCase{id: "7.1.5", frames: frames(textFrag("fragment1"), normalClose, cont(true, "fragment2")), want: events(evClose(1000, ""))})
	p256k := strings.Repeat("BAsd7&jh", 256<<10/8)
	add(wsCase{id: "7.1.6", frames: frames(text(p256k), normalClose, ping(hello)), want: events(evText(p256k), evClose(1000, ""))})
	add(wsCase{id: "7.3.1", frames: frames(closeRaw(nil)), want: events(evClose(ws.StatusNoStatusRcvd, ""))})
	add(wsCase{id: "7.3.2", frames: frames(closeRaw([]byte("a"))), code: 1002, at: failFrame})
	add(wsCase{id: "7.3.3", frames: frames(normalClose), want: events(evClose(1000, ""))})
	add(wsCase{id: "7.3.4", frames: frames(closeFrame(1000, "Hello World!")), want: events(evClose(1000, "Hello World!"))})
	add(wsCase{id: "7.3.5", frames: frames(closeFrame(1000, strings.Repeat("*", 123))), want: events(evClose(1000, strings.Repeat("*", 123)))})
	add(wsCase{id: "7.3.6", frames: frames(closeFrame(1000, strings.Repeat("*", 124))), code: 1002})
	add(wsCase{id: "7.5.1", frames: frames(closeFrame(1000, string(mustHex("cebae1bdb9cf83cebcceb5eda080656469746564")))), code: 1007, at: failFrame})
	for i, code := range []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
		add(wsCase{id: fmt.Sprintf("7.7.%d", i+1), frames: frames(closeFrame(code, "")), want: events(evClose(ws.StatusCode(code), ""))})
	}
	for i, code := range []uint16{0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999} {
		add(wsCase{id: fmt.Sprintf("7.9.%d", i+1), frames: frames(closeFrame(code, "")), code: 1002, at: failFrame})
	}
	// 7.13.x are informational ("undefined by the spec"); we fail them as codes
	// RFC 6455 section 7.4.2 does not define.
	add(wsCase{id: "7.13.1", frames: frames(closeFrame(5000, "")), code: 1002, at: failFrame})
	add(wsCase{id: "7.13.2", frames: frames(closeFrame(65535, "")), code: 1002, at: failFrame})

	// 9.1/9.3 against the default 1 MiB limit (CONTRACT.md section 1.1): exactly
	// the limit is echoed, anything bigger fails with 1009 at the header that
	// crosses it.
	p1m := strings.Repeat("*", 1<<20)
	add(wsCase{id: "9.1.3", frames: frames(text(p1m), normalClose), want: events(evText(p1m), evClose(1000, ""))})
	add(wsCase{id: "9.1.4", frames: frames(text(strings.Repeat("*", 4<<20)), normalClose), code: 1009})
	var frags []frame
	for i := range (4 << 20) / 65536 {
		frags = append(frags, frame{fin: i == 63, op: map[bool]ws.OpCode{true: ws.OpText, false: ws.OpContinuation}[i == 0], payload: []byte(strings.Repeat("*", 65536))})
	}
	add(wsCase{id: "9.3.6", frames: append(frags, normalClose), code: 1009, bad: 16})
	return cs
}

// octetFrames fragments s into frames of one byte each (Autobahn 6.2.3, 6.3.2).
func octetFrames(s string) []frame {
	var fs []frame
	for i := range len(s) {
		op := ws.OpContinuation
		if i == 0 {
			op = ws.OpText
		}
		fs = append(fs, frame{fin: i == len(s)-1, op: op, payload: []byte{s[i]}})
	}
	return fs
}

// failAt returns the stream offset at which c must fail when fed octet by octet.
func (c wsCase) failAt(s []byte, ends []int) int {
	start := 0
	if c.bad > 0 {
		start = ends[c.bad-1]
	}
	switch c.at {
	case failHeader:
		_, n, err := ParseHeader(s[start:])
		if err != nil {
			panic(fmt.Sprintf("%s: %v", c.id, err))
		}
		return start + n
	case failFrame:
		return ends[c.bad]
	}
	// failUTF8: the first byte of the message after which it cannot be valid, or
	// the end of its last frame if it only ends inside a code point.
	var msg []byte
	var offs []int
	last := 0
	for i, f := range c.frames {
		if f.op != ws.OpText && f.op != ws.OpContinuation {
			continue
		}
		payloadStart := ends[i] - len(f.payload)
		for j := range f.payload {
			offs = append(offs, payloadStart+j)
		}
		msg = append(msg, f.payload...)
		last = ends[i]
		if f.fin {
			break
		}
	}
	if k := firstInvalid(msg); k >= 0 {
		return offs[k] + 1
	}
	return last
}

func TestAutobahn(t *testing.T) {
	for _, c := range autobahnCases() {
		t.Run(c.id, func(t *testing.T) {
			s, ends := stream(c.frames...)
			want := outcome{events: c.want, code: c.code, errAt: -1}
			check := func(mode string, cuts []int) outcome {
				t.Helper()
				got := feed(t, c.max, s, cuts)
				if got.code != 0 {
					want.reason = got.reason // reasons are checked in TestReaderErrors
				}
				if !sameEvents(got, want) {
					t.Fatalf("%s feeding:\n got  %v\n want %v", mode, got, want)
				}
				return got
			}
			check("whole", nil)
			check("frame-wise", ends)
			if c.chop > 1 {
				var cuts []int
				for i := c.chop; i < len(s); i += c.chop {
					cuts = append(cuts, i)
				}
				check(fmt.Sprintf("%d-octet", c.chop), cuts)
			}
			got := check("octet-wise", everyByte(len(s)))
			if c.code != 0 {
				if at := c.failAt(s, ends); got.errAt != at {
					t.Errorf("octet-wise: failed after %d bytes, want %d (fail fast)", got.errAt, at)
				}
			}
			if len(s) <= 4096 {
				for i := range len(s) + 1 {
					check(fmt.Sprintf("split at %d", i), []int{i})
				}
			}
			rng := rand.New(rand.NewPCG(uint64(len(s)), 1))
			runs := 50
			if len(s) > 1<<16 {
				runs = 3
			}
			for range runs {
				cuts := randomCuts(rng, len(s), 20)
				check(fmt.Sprintf("random cuts %v", cuts), cuts)
			}
		})
	}
}

// autobahnUTF8 holds cases 6.5.1-6.23.7: one text frame each (generated from
// ../shared/autobahn-cases.md).
var autobahnUTF8 = []struct {
	id    string
	hex   string
	valid bool
}{
	{id: "6.5.1", hex: "68656c6c6f24776f726c64", valid: true},
	{id: "6.5.2", hex: "68656c6c6fc2a2776f726c64", valid: true},
	{id: "6.5.3", hex: "68656c6c6fe282ac776f726c64", valid: true},
	{id: "6.5.4", hex: "68656c6c6ff0a4ada2776f726c64", valid: true},
	{id: "6.5.5", hex: "cebae1bdb9cf83cebcceb5", valid: true},
	{id: "6.6.1", hex: "ce", valid: false},
	{id: "6.6.2", hex: "ceba", valid: true},
	{id: "6.6.3", hex: "cebae1", valid: false},
	{id: "6.6.4", hex: "cebae1bd", valid: false},
	{id: "6.6.5", hex: "cebae1bdb9", valid: true},
	{id: "6.6.6", hex: "cebae1bdb9cf", valid: false},
	{id: "6.6.7", hex: "cebae1bdb9cf83", valid: true},
	{id: "6.6.8", hex: "cebae1bdb9cf83ce", valid: false},
	{id: "6.6.9", hex: "cebae1bdb9cf83cebc", valid: true},
	{id: "6.6.10", hex: "cebae1bdb9cf83cebcce", valid: false},
	{id: "6.6.11", hex: "cebae1bdb9cf83cebcceb5", valid: true},
	{id: "6.7.1", hex: "00", valid: true},
	{id: "6.7.2", hex: "c280", valid: true},
	{id: "6.7.3", hex: "e0a080", valid: true},
	{id: "6.7.4", hex: "f0908080", valid: true},
	{id: "6.8.1", hex: "f888808080", valid: false},
	{id: "6.8.2", hex: "fc8480808080", valid: false},
	{id: "6.9.1", hex: "7f", valid: true},
	{id: "6.9.2", hex: "dfbf", valid: true},
	{id: "6.9.3", hex: "efbfbf", valid: true},
	{id: "6.9.4", hex: "f48fbfbf", valid: true},
	{id: "6.10.1", hex: "f7bfbfbf", valid: false},
	{id: "6.10.2", hex: "fbbfbfbfbf", valid: false},
	{id: "6.10.3", hex: "fdbfbfbfbfbf", valid: false},
	{id: "6.11.1", hex: "ed9fbf", valid: true},
	{id: "6.11.2", hex: "ee8080", valid: true},
	{id: "6.11.3", hex: "efbfbd", valid: true},
	{id: "6.11.4", hex: "f48fbfbf", valid: true},
	{id: "6.11.5", hex: "f4908080", valid: false},
	{id: "6.12.1", hex: "80", valid: false},
	{id: "6.12.2", hex: "bf", valid: false},
	{id: "6.12.3", hex: "80bf", valid: false},
	{id: "6.12.4", hex: "80bf80", valid: false},
	{id: "6.12.5", hex: "80bf80bf", valid: false},
	{id: "6.12.6", hex: "80bf80bf80", valid: false},
	{id: "6.12.7", hex: "80bf80bf80bf", valid: false},
	{id: "6.12.8", hex: "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbe", valid: false},
	{id: "6.13.1", hex: "c020c120c220c320c420c520c620c720c820c920ca20cb20cc20cd20ce20cf20d020d120d220d320d420d520d620d720d820d920da20db20dc20dd20de20", valid: false},
	{id: "6.13.2", hex: "e020e120e220e320e420e520e620e720e820e920ea20eb20ec20ed20ee20", valid: false},
	{id: "6.13.3", hex: "f020f120f220f320f420f520f620", valid: false},
	{id: "6.13.4", hex: "f820f920fa20", valid: false},
	{id: "6.13.5", hex: "fc20", valid: false},
	{id: "6.14.1", hex: "c0", valid: false},
	{id: "6.14.2", hex: "e080", valid: false},
	{id: "6.14.3", hex: "f08080", valid: false},
	{id: "6.14.4", hex: "f8808080", valid: false},
	{id: "6.14.5", hex: "fc80808080", valid: false},
	{id: "6.14.6", hex: "df", valid: false},
	{id: "6.14.7", hex: "efbf", valid: false},
	{id: "6.14.8", hex: "f7bfbf", valid: false},
	{id: "6.14.9", hex: "fbbfbfbf", valid: false},
	{id: "6.14.10", hex: "fdbfbfbfbf", valid: false},
	{id: "6.15.1", hex: "c0e080f08080f8808080fc80808080dfefbff7bfbffbbfbfbffdbfbfbfbf", valid: false},
	{id: "6.16.1", hex: "fe", valid: false},
	{id: "6.16.2", hex: "ff", valid: false},
	{id: "6.16.3", hex: "fefeffff", valid: false},
	{id: "6.17.1", hex: "c0af", valid: false},
	{id: "6.17.2", hex: "e080af", valid: false},
	{id: "6.17.3", hex: "f08080af", valid: false},
	{id: "6.17.4", hex: "f8808080af", valid: false},
	{id: "6.17.5", hex: "fc80808080af", valid: false},
	{id: "6.18.1", hex: "c1bf", valid: false},
	{id: "6.18.2", hex: "e09fbf", valid: false},
	{id: "6.18.3", hex: "f08fbfbf", valid: false},
	{id: "6.18.4", hex: "f887bfbfbf", valid: false},
	{id: "6.18.5", hex: "fc83bfbfbfbf", valid: false},
	{id: "6.19.1", hex: "c080", valid: false},
	{id: "6.19.2", hex: "e08080", valid: false},
	{id: "6.19.3", hex: "f0808080", valid: false},
	{id: "6.19.4", hex: "f880808080", valid: false},
	{id: "6.19.5", hex: "fc8080808080", valid: false},
	{id: "6.20.1", hex: "eda080", valid: false},
	{id: "6.20.2", hex: "edadbf", valid: false},
	{id: "6.20.3", hex: "edae80", valid: false},
	{id: "6.20.4", hex: "edafbf", valid: false},
	{id: "6.20.5", hex: "edb080", valid: false},
	{id: "6.20.6", hex: "edbe80", valid: false},
	{id: "6.20.7", hex: "edbfbf", valid: false},
	{id: "6.21.1", hex: "eda080edb080", valid: false},
	{id: "6.21.2", hex: "eda080edbfbf", valid: false},
	{id: "6.21.3", hex: "edadbfedb080", valid: false},
	{id: "6.21.4", hex: "edadbfedbfbf", valid: false},
	{id: "6.21.5", hex: "edae80edb080", valid: false},
	{id: "6.21.6", hex: "edae80edbfbf", valid: false},
	{id: "6.21.7", hex: "edafbfedb080", valid: false},
	{id: "6.21.8", hex: "edafbfedbfbf", valid: false},
	{id: "6.22.1", hex: "efbfbe", valid: true},
	{id: "6.22.2", hex: "efbfbf", valid: true},
	{id: "6.22.3", hex: "f09fbfbe", valid: true},
	{id: "6.22.4", hex: "f09fbfbf", valid: true},
	{id: "6.22.5", hex: "f0afbfbe", valid: true},
	{id: "6.22.6", hex: "f0afbfbf", valid: true},
	{id: "6.22.7", hex: "f0bfbfbe", valid: true},
	{id: "6.22.8", hex: "f0bfbfbf", valid: true},
	{id: "6.22.9", hex: "f18fbfbe", valid: true},
	{id: "6.22.10", hex: "f18fbfbf", valid: true},
	{id: "6.22.11", hex: "f19fbfbe", valid: true},
	{id: "6.22.12", hex: "f19fbfbf", valid: true},
	{id: "6.22.13", hex: "f1afbfbe", valid: true},
	{id: "6.22.14", hex: "f1afbfbf", valid: true},
	{id: "6.22.15", hex: "f1bfbfbe", valid: true},
	{id: "6.22.16", hex: "f1bfbfbf", valid: true},
	{id: "6.22.17", hex: "f28fbfbe", valid: true},
	{id: "6.22.18", hex: "f28fbfbf", valid: true},
	{id: "6.22.19", hex: "f29fbfbe", valid: true},
	{id: "6.22.20", hex: "f29fbfbf", valid: true},
	{id: "6.22.21", hex: "f2afbfbe", valid: true},
	{id: "6.22.22", hex: "f2afbfbf", valid: true},
	{id: "6.22.23", hex: "f2bfbfbe", valid: true},
	{id: "6.22.24", hex: "f2bfbfbf", valid: true},
	{id: "6.22.25", hex: "f38fbfbe", valid: true},
	{id: "6.22.26", hex: "f38fbfbf", valid: true},
	{id: "6.22.27", hex: "f39fbfbe", valid: true},
	{id: "6.22.28", hex: "f39fbfbf", valid: true},
	{id: "6.22.29", hex: "f3afbfbe", valid: true},
	{id: "6.22.30", hex: "f3afbfbf", valid: true},
	{id: "6.22.31", hex: "f3bfbfbe", valid: true},
	{id: "6.22.32", hex: "f3bfbfbf", valid: true},
	{id: "6.22.33", hex: "f48fbfbe", valid: true},
	{id: "6.22.34", hex: "f48fbfbf", valid: true},
	{id: "6.23.1", hex: "efbfb9", valid: true},
	{id: "6.23.2", hex: "efbfba", valid: true},
	{id: "6.23.3", hex: "efbfbb", valid: true},
	{id: "6.23.4", hex: "efbfbc", valid: true},
	{id: "6.23.5", hex: "efbfbd", valid: true},
	{id: "6.23.6", hex: "efbfbe", valid: true},
	{id: "6.23.7", hex: "efbfbf", valid: true},
}
