package load

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/gobwas/ws"
)

// Tests of the hot path's shortcuts (fastReply and parseID in Classify,
// putID in Template.Append, the short-frame case of Conn.Next and
// Conn.Ready): each must give exactly what the general code gives, and leave
// every other input to it.

// fastShapes are messages of the shapes fastReply takes, and near misses.
var fastShapes = []string{
	`{"jsonrpc":"2.0","id":1000000123,"result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":1000000123,"result":"xxxxxxxxxxxxxxxx"}`,
	`{"jsonrpc":"2.0","id":0000000000,"result":1}`,
	`{"jsonrpc":"2.0","id":9999999999,"result":null}`,
	`{"jsonrpc":"2.0","id":1000000123,"result":`,
	`{"jsonrpc":"2.0","id":1000000123,"result"`,
	`{"jsonrpc":"2.0","id":1000000123,"method":"edge/echo","params":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":1000000123,"error":{"code":-32601,"message":"no"}}`,
	`{"jsonrpc":"2.0","id":100000012,"result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":10000001234,"result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":100000012x,"result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":10000/0123,"result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":10000:0123,"result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":-100000012,"result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":1000000123, "result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":1000000123,"results":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","id":"1000000123","result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0", "id":1000000123,"result":{"p":"xxxxxxxx"}}`,
	`{"id":1000000123,"jsonrpc":"2.0","result":{"p":"xxxxxxxx"}}`,
	`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"1"}}`,
	`{"jsonrpc":"2.0","id":1000000123,"method":"subscription/closed"}`,
	``,
	`{}`,
}

// mutations returns msg with every byte, one at a time, replaced by each
// of a set of bytes that matter to the parsers (digits, the bytes around
// them, quotes, separators, and a few others); plus msg truncated at
// every length.
func mutations(msg string) []string {
	subst := []byte("0123456789/:;,\"' {}[]\\abcdefghijklmnopqrstuvwxyz\x00\x06\x7f\xff")
	var out []string
	for i := range len(msg) {
		for _, c := range subst {
			b := []byte(msg)
			b[i] = c
			out = append(out, string(b))
		}
	}
	for i := range len(msg) {
		out = append(out, msg[:i])
	}
	return out
}

func TestFastReplyMatchesGeneralPath(t *testing.T) {
	var msgs []string
	for _, s := range fastShapes {
		msgs = append(msgs, s)
		msgs = append(msgs, mutations(s)...)
	}
	fastJ, fastR := 0, 0
	for _, m := range msgs {
		b := []byte(m)
		if got, want := (JSONRPC{}).Classify(b), classifyJSONRPCGeneral(b, ""); got != want {
			t.Fatalf("jsonrpc %q: fast path %+v, general %+v", m, got, want)
		}
		if got, want := (Raw{}).Classify(b), classifyRawGeneral(b); got != want {
			t.Fatalf("raw %q: fast path %+v, general %+v", m, got, want)
		}
		if id, ok := fastReply(b, resultKey); ok {
			fastJ++
			fid, key, fok := fastID(b, jsonrpcPrefix)
			if !fok || fid != id || string(key) != "result" {
				t.Fatalf("%q: fastReply %d, fastID %d %q %v", m, id, fid, key, fok)
			}
		}
		if id, ok := fastReply(b, methodKey); ok {
			fastR++
			fid, key, fok := fastID(b, jsonrpcPrefix)
			if !fok || fid != id || string(key) != "method" {
				t.Fatalf("%q: fastReply %d, fastID %d %q %v", m, id, fid, key, fok)
			}
		}
	}
	// The fast paths must actually be taken by the usual shapes.
	if fastJ < 100 || fastR < 10 {
		t.Fatalf("fast path taken %d (result) and %d (method) times", fastJ, fastR)
	}
	for _, m := range []string{fastShapes[0], fastShapes[1]} {
		if _, ok := fastReply([]byte(m), resultKey); !ok {
			t.Fatalf("%q: not on the fast path", m)
		}
	}
}

func FuzzFastReply(f *testing.F) {
	for _, s := range fastShapes {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := (JSONRPC{}).Classify(b), classifyJSONRPCGeneral(b, ""); got != want {
			t.Fatalf("jsonrpc %q: fast path %+v, general %+v", b, got, want)
		}
		if got, want := (Raw{}).Classify(b), classifyRawGeneral(b); got != want {
			t.Fatalf("raw %q: fast path %+v, general %+v", b, got, want)
		}
	})
}

func TestParseID(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	vals := []uint64{0, 1, 9, 10, 99, 100, 12345678, 99999999, 100000000, 999999999, IDBase, IDBase + 123, 3999999999, 9999999999}
	for range 100000 {
		vals = append(vals, r.Uint64N(maxID))
	}
	for _, v := range vals {
		s := strconv.FormatUint(v, 10)
		for len(s) < IDWidth {
			s = "0" + s
		}
		got, ok := parseID([]byte(s))
		if !ok || got != v {
			t.Fatalf("parseID(%s) = %d %v", s, got, ok)
		}
	}
	// Every single non-digit byte at every position is refused.
	for i := range IDWidth {
		for c := range 256 {
			if c >= '0' && c <= '9' {
				continue
			}
			b := []byte("1234567890")
			b[i] = byte(c)
			if _, ok := parseID(b); ok {
				t.Fatalf("parseID(%q) accepted", b)
			}
		}
	}
}

// TestPutID checks Template.Append's word-at-a-time id against setField,
// the general writer, for one-frame and fragmented templates.
func TestPutID(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	vals := []uint64{0, 1, 9, 10, 99, 100, 9999, 10000, 99999999, 100000000, IDBase, IDBase + 123, IDOf(idSpan - 1), maxID - 1, maxID, maxID + 5, 1<<64 - 1}
	for range 100000 {
		vals = append(vals, r.Uint64N(maxID))
	}
	req, off := JSONRPC{}.Echo(Params(16))
	for _, frag := range []int{0, 7, 30, 1000} {
		mask := [4]byte{byte(r.Uint32()), byte(r.Uint32()), 0x30, 0xff}
		tm := NewTemplate(req, mask, frag, off)
		contiguous := tm.idPos >= 0
		if frag == 0 && !contiguous {
			t.Fatal("one-frame template without the fast path")
		}
		if frag == 30 && contiguous {
			t.Fatal("the id is split at 30, yet contiguous")
		}
		for _, v := range vals {
			got := tm.Append(nil, v)
			want := append([]byte(nil), tm.wire...)
			setField(want, &tm.fields[0], v)
			if !bytes.Equal(got, want) {
				t.Fatalf("frag %d id %d: Append differs from setField", frag, v)
			}
		}
	}
}

// TestConnShortFrames runs frames around the short-frame shortcut (payloads
// of 0..125 bytes, unmasked, final text) through Next and Ready, whole and a
// byte at a time, and checks them against ws.ReadFrame.
func TestConnShortFrames(t *testing.T) {
	type frame struct {
		hdr ws.Header
		p   []byte
	}
	var frames []frame
	add := func(h ws.Header, p []byte) {
		h.Length = int64(len(p))
		if h.Masked {
			q := append([]byte(nil), p...)
			ws.Cipher(q, h.Mask, 0)
			p = q
		}
		frames = append(frames, frame{h, p})
	}
	for _, n := range []int{0, 1, 2, 60, 124, 125, 126, 127, 300} {
		add(ws.Header{Fin: true, OpCode: ws.OpText}, bytes.Repeat([]byte{'a' + byte(n%26)}, n))
	}
	add(ws.Header{Fin: true, OpCode: ws.OpBinary}, []byte("binary"))
	add(ws.Header{Fin: true, OpCode: ws.OpText, Masked: true, Mask: [4]byte{9, 8, 7, 6}}, []byte("masked"))
	add(ws.Header{Fin: true, OpCode: ws.OpText, Rsv: 4}, []byte("rsv1"))
	add(ws.Header{Fin: false, OpCode: ws.OpText}, []byte("frag"))
	add(ws.Header{Fin: true, OpCode: ws.OpContinuation}, []byte("ment"))
	add(ws.Header{Fin: true, OpCode: ws.OpText}, []byte("after"))
	var wire bytes.Buffer
	for _, f := range frames {
		ws.WriteHeader(&wire, f.hdr)
		wire.Write(f.p)
	}
	want := []string{}
	for _, f := range frames[:len(frames)-3] {
		p := append([]byte(nil), f.p...)
		if f.hdr.Masked {
			ws.Cipher(p, f.hdr.Mask, 0)
		}
		want = append(want, string(p))
	}
	want = append(want, "fragment", "after")
	for _, chunk := range []int{1, 3, 1 << 20} {
		t.Run("chunk "+strconv.Itoa(chunk), func(t *testing.T) {
			fc := &fakeConn{in: wire.Bytes(), chunk: chunk}
			c := &Conn{nc: fc, br: bufio.NewReaderSize(fc, 4096), d: JSONRPC{}, mask: [4]byte{1, 2, 3, 4}}
			for i, w := range want {
				got, err := c.Next()
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if string(got) != w {
					t.Fatalf("message %d = %q, want %q", i, short(string(got)), short(w))
				}
				// Ready: whether the next frame is whole in the buffer.
				rest, _ := c.br.Peek(c.br.Buffered())
				rest = rest[c.pend:]
				whole := false
				if h, hl, ok, err := ParseHeader(rest); err == nil && ok {
					whole = hl+h.Len <= len(rest)
				}
				if c.Ready() != whole {
					t.Fatalf("after message %d: Ready %v, want %v", i, !whole, whole)
				}
				if chunk == 1<<20 && i < len(want)-1 && !whole {
					t.Fatalf("after message %d: all in the buffer, yet not Ready", i)
				}
			}
		})
	}
}
