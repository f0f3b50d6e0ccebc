package codec

import (
	"bytes"
	"reflect"
	"testing"
	"unsafe"
)

// fuzzCuts turns fuzz bytes into increasing cut points within n: each byte is the
// length of the next chunk.
func fuzzCuts(cuts []byte, n int) []int {
	var c []int
	p := 0
	for _, b := range cuts {
		p += int(b)
		if p > n {
			break
		}
		c = append(c, p)
	}
	return c
}

// FuzzReader feeds arbitrary bytes to a Reader whole, split where the fuzzer
// chooses, and (for short inputs) octet by octet. feed checks that Next never
// consumes more than it is given, that errors are final *CloseErrors and that
// nothing is left undone after EventNone; the three feedings must decode the same
// events and fail with the same close code.
func FuzzReader(f *testing.F) {
	for _, c := range autobahnCases() {
		s, ends := stream(c.frames...)
		if len(s) > 1024 {
			continue
		}
		var cuts []byte
		prev := 0
		for _, e := range ends {
			cuts = append(cuts, byte(min(e-prev, 255)))
			prev = e
		}
		f.Add(s, cuts, uint16(c.max))
	}
	f.Add([]byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}, []byte{3, 1, 1}, uint16(5))
	f.Add(text("é").bytes(), []byte{7}, uint16(1))
	f.Add([]byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, []byte(nil), uint16(0))
	f.Fuzz(func(t *testing.T, data, cuts []byte, max uint16) {
		m := int64(max) // 0 means the default
		whole := feed(t, m, data, nil)
		split := feed(t, m, data, fuzzCuts(cuts, len(data)))
		if !sameEvents(whole, split) {
			t.Fatalf("whole %v\nsplit %v", whole, split)
		}
		if len(data) <= 512 {
			if octets := feed(t, m, data, everyByte(len(data))); !sameEvents(whole, octets) {
				t.Fatalf("whole  %v\noctets %v", whole, octets)
			}
		}
	})
}

// FuzzParseRequest checks ParseRequest on arbitrary bytes: no panic, sizes and
// slices within the input, errors from the documented set, and incremental
// calls that agree: prefixes answer ErrNeedMore until some prefix gives an
// answer, and every longer prefix gives the same answer.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(browserUpgrade), []byte{16, 200}, uint16(0))
	f.Add([]byte("GET /ws HTTP/1.1\nHost: h\nUpgrade: websocket\nConnection: upgrade\nSec-WebSocket-Version: 13\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\n\n"), []byte{1, 2, 3}, uint16(0))
	f.Add([]byte("\r\n\r\nGET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"), []byte(nil), uint16(40))
	f.Add([]byte("GET http://h/p?q HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\nrest"), []byte{5}, uint16(0))
	f.Add([]byte("POST /x HTTP/1.0\r\nConnection: keep-alive, Upgrade\r\n\r\n"), []byte{9, 9}, uint16(64))
	f.Fuzz(func(t *testing.T, data, cuts []byte, max uint16) {
		limit := int(max)
		whole, n, err := checkParse(t, data, limit)
		var prefixes []int
		if len(data) <= 300 {
			prefixes = everyByte(len(data))
		} else {
			prefixes = fuzzCuts(cuts, len(data))
		}
		answered := false
		for _, p := range prefixes {
			r, pn, perr := checkParse(t, data[:p], limit)
			if perr == ErrNeedMore {
				if answered {
					t.Fatalf("prefix %d: ErrNeedMore after an answer", p)
				}
				continue
			}
			answered = true
			if perr != err || pn != n || !reflect.DeepEqual(r, whole) {
				t.Fatalf("prefix %d: %d, %v; whole input: %d, %v", p, pn, perr, n, err)
			}
		}
	})
}

// checkParse calls ParseRequest and checks what holds for any input.
func checkParse(t *testing.T, b []byte, max int) (Request, int, error) {
	t.Helper()
	r, n, err := ParseRequest(b, max)
	switch err {
	case nil:
		limit := max
		if limit <= 0 {
			limit = DefaultMaxRequestHead
		}
		if n <= 0 || n > len(b) || n > limit {
			t.Fatalf("n = %d for %d bytes, max %d", n, len(b), max)
		}
		head := b[:n]
		for _, s := range [][]byte{r.Method, r.RawPath, r.Proto, r.Host, r.Upgrade, r.Connection, r.Key,
			r.Version, r.Origin, r.Authorization, r.Extensions, r.Protocol} {
			if !within(s, head) {
				t.Fatalf("field %q is not within the head", s)
			}
		}
		if !within(r.Path, r.RawPath) || len(r.Method) == 0 || len(r.RawPath) == 0 {
			t.Fatalf("request line: %q %q %q", r.Method, r.RawPath, r.Path)
		}
		if CheckUpgrade(&r, string(r.Path)) == 101 {
			if !validKey(r.Key) {
				t.Fatalf("101 with key %q", r.Key)
			}
			if a := AppendAccept(nil, r.Key); !bytes.HasSuffix(a, []byte("=\r\n\r\n")) {
				t.Fatalf("accept %q", a)
			}
		}
	case ErrNeedMore, ErrHeaderTooLarge, ErrBadRequest:
		if n != 0 || !reflect.DeepEqual(r, Request{}) {
			t.Fatalf("%v with n = %d, request %+v", err, n, r)
		}
	default:
		t.Fatalf("unexpected error %v", err)
	}
	return r, n, err
}

// within reports whether s is empty or lies inside b's memory.
func within(s, b []byte) bool {
	if len(s) == 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(b))
}
