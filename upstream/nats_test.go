package upstream

import (
	"strings"
	"testing"
)

// TestParseNATSURL: nats://HOST:PORT/PREFIX names the server and the
// workers' subject prefix (CONTRACT.md section 13); a prefix that is no
// plain subject is refused.
func TestParseNATSURL(t *testing.T) {
	for _, tt := range []struct {
		name, url         string
		addr, prefix, err string
	}{
		{name: "plain", url: "nats://127.0.0.1:4222/svc", addr: "nats://127.0.0.1:4222", prefix: "svc"},
		{name: "dotted prefix", url: "nats://h:1/a.b", addr: "nats://h:1", prefix: "a.b"},
		{name: "no prefix", url: "nats://h:1", err: "PREFIX"},
		{name: "slash prefix", url: "nats://h:1/", err: "PREFIX"},
		{name: "wildcard", url: "nats://h:1/a.*", err: "PREFIX"},
		{name: "empty token", url: "nats://h:1/a..b", err: "PREFIX"},
		{name: "path", url: "nats://h:1/a/b", err: "PREFIX"},
		{name: "no port", url: "nats://h/svc", err: "HOST:PORT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseURL(tt.url)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseURL(%q) = %+v, %v; want an error about %s", tt.url, r, err, tt.err)
				}
				return
			}
			if err != nil || r.Kind != NATS || r.Addr != tt.addr || r.Prefix != tt.prefix {
				t.Fatalf("ParseURL(%q) = %+v, %v", tt.url, r, err)
			}
		})
	}
}

// TestValidToken: what may follow "PREFIX." in a published subject.
func TestValidToken(t *testing.T) {
	for _, tt := range []struct {
		s  string
		ok bool
	}{
		{"edge/echo", true},
		{"run.submit", true},
		{"", false},
		{"a..b", false},
		{".a", false},
		{"a.", false},
		{"*", false},
		{"a.>", false},
		{"a b", false},
		{"$cancel.x", false},
		{"x.$cancel", true},
	} {
		if got := validToken(tt.s); got != tt.ok {
			t.Errorf("validToken(%q) = %v, want %v", tt.s, got, tt.ok)
		}
	}
}
