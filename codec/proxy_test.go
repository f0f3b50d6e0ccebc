package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// proxyV2 builds a version 2 header: cmd 0 LOCAL or 1 PROXY, fam the
// family and transport byte, body the addresses and TLVs.
func proxyV2(cmd, fam byte, body []byte) []byte {
	b := append([]byte(nil), proxyV2Sig...)
	b = append(b, 0x20|cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

// v2inet is the body of a TCP over IPv4 header from src:sport.
func v2inet(src string, sport uint16, tlv int) []byte {
	a := netip.MustParseAddr(src).As4()
	b := append(a[:], 10, 0, 0, 1)
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, 8080)
	return append(b, make([]byte, tlv)...)
}

func v2inet6(src string, sport uint16) []byte {
	a := netip.MustParseAddr(src).As16()
	d := netip.MustParseAddr("::1").As16()
	b := append(a[:], d[:]...)
	b = binary.BigEndian.AppendUint16(b, sport)
	return binary.BigEndian.AppendUint16(b, 443)
}

func TestParseProxyHeader(t *testing.T) {
	longestTCP := "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"
	longest := "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"
	if len(longest) != MaxProxyV1 {
		t.Fatalf("the longest v1 header is %d bytes, want %d", len(longest), MaxProxyV1)
	}
	ap := netip.MustParseAddrPort
	for _, tt := range []struct {
		name string
		in   []byte
		want ProxyHeader // zero: ErrBadProxyHeader
	}{
		{"v1 tcp4", []byte("PROXY TCP4 192.0.2.7 10.0.0.1 51000 8080\r\n"), ProxyHeader{Version: 1, Source: ap("192.0.2.7:51000")}},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::7 ::1 1 443\r\n"), ProxyHeader{Version: 1, Source: ap("[2001:db8::7]:1")}},
		{"v1 tcp6 mapped v4", []byte("PROXY TCP6 ::ffff:192.0.2.7 ::1 0 443\r\n"), ProxyHeader{Version: 1, Source: ap("192.0.2.7:0")}},
		{"v1 longest tcp", []byte(longestTCP), ProxyHeader{Version: 1, Source: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")}},
		{"v1 longest", []byte(longest), ProxyHeader{Version: 1, Local: true}},
		{"v1 unknown", []byte("PROXY UNKNOWN\r\n"), ProxyHeader{Version: 1, Local: true}},
		{"v1 unknown with addresses", []byte("PROXY UNKNOWN ffff::1 ::1 1 2\r\n"), ProxyHeader{Version: 1, Local: true}},
		{"v1 tcp4 with a v6 address", []byte("PROXY TCP4 ::1 10.0.0.1 1 2\r\n"), ProxyHeader{}},
		{"v1 tcp6 with a v4 address", []byte("PROXY TCP6 192.0.2.7 ::1 1 2\r\n"), ProxyHeader{}},
		{"v1 zone", []byte("PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n"), ProxyHeader{}},
		{"v1 leading zero port", []byte("PROXY TCP4 192.0.2.7 10.0.0.1 080 2\r\n"), ProxyHeader{}},
		{"v1 port too big", []byte("PROXY TCP4 192.0.2.7 10.0.0.1 65536 2\r\n"), ProxyHeader{}},
		{"v1 bare LF", []byte("PROXY TCP4 192.0.2.7 10.0.0.1 1 2\n"), ProxyHeader{}},
		{"v1 double space", []byte("PROXY TCP4  192.0.2.7 10.0.0.1 1 2\r\n"), ProxyHeader{}},
		{"v1 missing field", []byte("PROXY TCP4 192.0.2.7 10.0.0.1 1\r\n"), ProxyHeader{}},
		{"v1 extra field", []byte("PROXY TCP4 192.0.2.7 10.0.0.1 1 2 3\r\n"), ProxyHeader{}},
		{"v1 udp", []byte("PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n"), ProxyHeader{}},
		{"v1 lower case", []byte("proxy TCP4 192.0.2.7 10.0.0.1 1 2\r\n"), ProxyHeader{}},
		{"v1 too long", append([]byte("PROXY UNKNOWN "), bytes.Repeat([]byte{'x'}, 100)...), ProxyHeader{}},
		{"v1 control byte", []byte("PROXY TCP4 192.0.2.7\x00"), ProxyHeader{}},
		{"http instead", []byte("GET / HTTP/1.1\r\n\r\n"), ProxyHeader{}},
		{"v2 tcp4", proxyV2(1, 0x11, v2inet("192.0.2.7", 51000, 0)), ProxyHeader{Version: 2, Source: ap("192.0.2.7:51000")}},
		{"v2 tcp4 with TLVs", proxyV2(1, 0x11, v2inet("192.0.2.7", 7, 40)), ProxyHeader{Version: 2, Source: ap("192.0.2.7:7")}},
		{"v2 tcp6", proxyV2(1, 0x21, v2inet6("2001:db8::7", 9)), ProxyHeader{Version: 2, Source: ap("[2001:db8::7]:9")}},
		{"v2 local", proxyV2(0, 0x00, nil), ProxyHeader{Version: 2, Local: true}},
		{"v2 local with addresses", proxyV2(0, 0x11, v2inet("192.0.2.7", 1, 0)), ProxyHeader{Version: 2, Local: true}},
		{"v2 unix", proxyV2(1, 0x31, make([]byte, 216)), ProxyHeader{Version: 2, Local: true}},
		{"v2 unspec", proxyV2(1, 0x00, nil), ProxyHeader{Version: 2, Local: true}},
		{"v2 tcp4 short body", proxyV2(1, 0x11, v2inet("192.0.2.7", 1, 0)[:11]), ProxyHeader{}},
		{"v2 version 1", append(append([]byte(nil), proxyV2Sig...), 0x11, 0x11, 0, 0), ProxyHeader{}},
		{"v2 command 2", proxyV2(2, 0x11, v2inet("192.0.2.7", 1, 0)), ProxyHeader{}},
		{"v2 bad family", proxyV2(1, 0x41, v2inet("192.0.2.7", 1, 0)), ProxyHeader{}},
		{"v2 over max", proxyV2(1, 0x11, v2inet("192.0.2.7", 1, DefaultMaxProxyV2)), ProxyHeader{}},
		{"v2 bad signature", append([]byte("\r\n\r\n\x00\r\nQUIX\n"), 0x21, 0x11, 0, 0), ProxyHeader{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tail := []byte("GET / HTTP/1.1\r\n")
			in := append(append([]byte(nil), tt.in...), tail...)
			h, n, err := ParseProxyHeader(in, 0)
			if tt.want == (ProxyHeader{}) {
				if !errors.Is(err, ErrBadProxyHeader) {
					t.Fatalf("got %+v %d %v, want ErrBadProxyHeader", h, n, err)
				}
				return
			}
			if err != nil || h != tt.want || n != len(tt.in) {
				t.Fatalf("got %+v %d %v, want %+v %d", h, n, err, tt.want, len(tt.in))
			}
			// Split delivery: every proper prefix asks for more.
			for i := range len(tt.in) {
				if _, _, err := ParseProxyHeader(tt.in[:i], 0); !errors.Is(err, ErrNeedMore) {
					t.Fatalf("prefix of %d bytes: %v, want ErrNeedMore", i, err)
				}
			}
		})
	}
}

// TestParseProxyHeaderEarlyReject: a connection that does not start with a
// header is refused by its first bytes, not after a bound's worth.
func TestParseProxyHeaderEarlyReject(t *testing.T) {
	for _, in := range []string{"G", "PROXI", "\r\n\r\n\x01", "PROXY TCP4 \x01"} {
		if _, _, err := ParseProxyHeader([]byte(in), 0); !errors.Is(err, ErrBadProxyHeader) {
			t.Errorf("%q: %v, want ErrBadProxyHeader", in, err)
		}
	}
	// A v1 header is bounded at 107 bytes even without a line end.
	in := append([]byte("PROXY UNKNOWN "), bytes.Repeat([]byte{'x'}, MaxProxyV1-14-1)...)
	if _, _, err := ParseProxyHeader(in, 0); !errors.Is(err, ErrNeedMore) {
		t.Fatalf("106 bytes: %v, want ErrNeedMore", err)
	}
	if _, _, err := ParseProxyHeader(append(in, 'x'), 0); !errors.Is(err, ErrBadProxyHeader) {
		t.Fatalf("107 bytes without a line end: %v, want ErrBadProxyHeader", err)
	}
	// A v2 header longer than max is refused by its length field.
	h := proxyV2(1, 0x11, v2inet("192.0.2.7", 1, 100))
	if _, _, err := ParseProxyHeader(h[:16], 64); !errors.Is(err, ErrBadProxyHeader) {
		t.Fatalf("v2 over max: %v, want ErrBadProxyHeader from the fixed part", err)
	}
}

// FuzzParseProxyHeader: whatever the input, a header found whole is found
// the same way at the same size from the header alone, every proper prefix
// of it asks for more, and no result exceeds the bounds; a byte-by-byte
// feed reaches the same verdict as the whole input.
func FuzzParseProxyHeader(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.7 10.0.0.1 51000 8080\r\nGET"))
	f.Add([]byte("PROXY TCP6 2001:db8::7 ::1 1 443\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(proxyV2(1, 0x11, v2inet("192.0.2.7", 51000, 3)))
	f.Add(proxyV2(1, 0x21, v2inet6("2001:db8::7", 9)))
	f.Add(proxyV2(0, 0x00, nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 512
		h, n, err := ParseProxyHeader(in, max)
		switch {
		case err == nil:
			if n <= 0 || n > len(in) || n > max && n > MaxProxyV1 || h.Version != 1 && h.Version != 2 || h.Local == h.Source.IsValid() {
				t.Fatalf("got %+v %d from %q", h, n, in)
			}
			if h.Version == 1 && n > MaxProxyV1 {
				t.Fatalf("v1 header of %d bytes", n)
			}
			if h2, n2, err2 := ParseProxyHeader(in[:n], max); err2 != nil || h2 != h || n2 != n {
				t.Fatalf("the header alone: %+v %d %v, want %+v %d", h2, n2, err2, h, n)
			}
		case errors.Is(err, ErrNeedMore), errors.Is(err, ErrBadProxyHeader):
			if n != 0 {
				t.Fatalf("%v with size %d", err, n)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
		// Byte by byte, as a slow client delivers it: ErrNeedMore until the
		// whole input's verdict.
		end := len(in)
		if err == nil {
			end = n
		}
		for i := 0; i < end; i++ {
			_, _, e := ParseProxyHeader(in[:i], max)
			if errors.Is(e, ErrBadProxyHeader) {
				if err == nil || errors.Is(err, ErrNeedMore) {
					t.Fatalf("prefix of %d bytes refused, the whole input: %v", i, err)
				}
				return // refused early: fine
			}
			if e != nil && !errors.Is(e, ErrNeedMore) || e == nil {
				t.Fatalf("prefix of %d bytes: %v, want ErrNeedMore", i, e)
			}
		}
	})
}
