package codec

import (
	"net/netip"
	"testing"
)

func TestForwardedClient(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	trusted := func(a netip.Addr) bool {
		for _, p := range proxies {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	for _, tt := range []struct {
		xff  string
		want string // "": not ok
	}{
		{"192.0.2.7", "192.0.2.7:0"},
		{"192.0.2.7, 10.0.0.2", "192.0.2.7:0"},
		{"6.6.6.6, 192.0.2.7, 10.0.0.2,10.1.1.1", "192.0.2.7:0"}, // the client's own claim is ignored
		{"6.6.6.6,192.0.2.7", "192.0.2.7:0"},
		{"10.0.0.3, 10.0.0.2", "10.0.0.3:0"}, // every hop trusted: the leftmost
		{"192.0.2.7:5678, 10.0.0.2", "192.0.2.7:5678"},
		{"[2001:db8::7]:443, [fd00::1]", "[2001:db8::7]:443"},
		{"2001:db8::7, fd00::2", "[2001:db8::7]:0"},
		{"::ffff:192.0.2.7", "192.0.2.7:0"},
		{" \t192.0.2.7 \t", "192.0.2.7:0"},
		{"garbage, 192.0.2.7", "192.0.2.7:0"}, // not reached
		{"192.0.2.7, unknown", ""},
		{"192.0.2.7, garbage, 10.0.0.2", ""},
		{"", ""},
		{"192.0.2.7,", ""},
		{"fe80::1%eth0", ""},
		{"[192.0.2.7]:80", ""},
		{"192.0.2.7:99999", ""},
	} {
		got, ok := ForwardedClient([]byte(tt.xff), trusted)
		if tt.want == "" {
			if ok {
				t.Errorf("%q: got %v, want not ok", tt.xff, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddrPort(tt.want) {
			t.Errorf("%q: got %v %v, want %s", tt.xff, got, ok, tt.want)
		}
	}
}

// TestForwardedForJoined: repeated X-Forwarded-For headers are one list in
// order (a proxy such as HAProxy adds a header line of its own rather than
// extending the client's).
func TestForwardedForJoined(t *testing.T) {
	head := "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 6.6.6.6\r\nx-forwarded-for: 192.0.2.7, 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n\r\n"
	r, _, err := ParseRequest([]byte(head), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(r.ForwardedFor); got != "6.6.6.6, 192.0.2.7, 10.0.0.1, 10.0.0.2" {
		t.Fatalf("ForwardedFor %q", got)
	}
}
