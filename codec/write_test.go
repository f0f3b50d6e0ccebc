package codec

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

func TestAppendFrameHeader(t *testing.T) {
	tests := []struct {
		name string
		op   ws.OpCode
		n    int
		want []byte
	}{
		{name: "empty text", op: ws.OpText, n: 0, want: []byte{0x81, 0x00}},
		{name: "125", op: ws.OpText, n: 125, want: []byte{0x81, 125}},
		{name: "126", op: ws.OpText, n: 126, want: []byte{0x81, 126, 0x00, 0x7e}},
		{name: "65535", op: ws.OpText, n: 65535, want: []byte{0x81, 126, 0xff, 0xff}},
		{name: "65536", op: ws.OpText, n: 65536, want: []byte{0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0}},
		{name: "pong", op: ws.OpPong, n: 3, want: []byte{0x8a, 3}},
		{name: "close", op: ws.OpClose, n: 2, want: []byte{0x88, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AppendFrameHeader([]byte("x"), tc.op, tc.n)
			if !bytes.Equal(got, append([]byte("x"), tc.want...)) {
				t.Fatalf("got % x, want x % x", got, tc.want)
			}
			h, err := ws.ReadHeader(bytes.NewReader(got[1:]))
			want := ws.Header{Fin: true, OpCode: tc.op, Length: int64(tc.n)}
			if err != nil || h != want {
				t.Fatalf("gobwas reads %+v, %v; want %+v", h, err, want)
			}
		})
	}
}

func TestAppendFrame(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 70000} {
		p := bytes.Repeat([]byte{'z'}, n)
		got := AppendFrame(nil, ws.OpText, p)
		f, err := ws.ReadFrame(bytes.NewReader(got))
		if err != nil || !f.Header.Fin || f.Header.Masked || f.Header.OpCode != ws.OpText || !bytes.Equal(f.Payload, p) {
			t.Fatalf("%d bytes: gobwas reads %+v, %v", n, f.Header, err)
		}
		// Same bytes as gobwas's own encoder.
		want, _ := ws.CompileFrame(ws.NewTextFrame(p))
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: differs from ws.CompileFrame", n)
		}
	}
}

func TestAppendClose(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes; 123 is inside a rune
	tests := []struct {
		name   string
		code   ws.StatusCode
		reason string
		want   []byte
	}{
		{name: "binary", code: 1003, reason: "binary frames are not supported", want: append([]byte{0x88, 33, 0x03, 0xeb}, "binary frames are not supported"...)},
		{name: "too big", code: 1009, reason: "message too big", want: append([]byte{0x88, 17, 0x03, 0xf1}, "message too big"...)},
		{name: "no reason", code: 1001, want: []byte{0x88, 2, 0x03, 0xe9}},
		{name: "private code", code: 4401, reason: "connection identity expired", want: append([]byte{0x88, 29, 0x11, 0x31}, "connection identity expired"...)},
		{name: "no status", code: ws.StatusNoStatusRcvd, reason: "ignored", want: []byte{0x88, 0}},
		{name: "exactly 123", code: 1000, reason: strings.Repeat("a", 123), want: append([]byte{0x88, 125, 0x03, 0xe8}, strings.Repeat("a", 123)...)},
		{name: "truncated", code: 1000, reason: strings.Repeat("a", 200), want: append([]byte{0x88, 125, 0x03, 0xe8}, strings.Repeat("a", 123)...)},
		{name: "truncated on a rune boundary", code: 1000, reason: long, want: append([]byte{0x88, 124, 0x03, 0xe8}, long[:122]...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AppendClose(nil, tc.code, tc.reason)
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("got  % x\nwant % x", got, tc.want)
			}
			f, err := ws.ReadFrame(bytes.NewReader(got))
			if err != nil || len(f.Payload) > ws.MaxControlFramePayloadSize || len(f.Payload) >= 2 && !utf8.Valid(f.Payload[2:]) {
				t.Fatalf("not a valid close frame: %+v, %v", f.Header, err)
			}
		})
	}
}

func BenchmarkAppendFrame(b *testing.B) {
	p := bytes.Repeat([]byte{'r'}, 200)
	dst := make([]byte, 0, 512)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		dst = AppendFrame(dst[:0], ws.OpText, p)
	}
}
