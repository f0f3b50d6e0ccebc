package upstream

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
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
		{name: "user and password", url: "nats://u:p%40ss@h:1/svc", addr: "nats://u:p%40ss@h:1", prefix: "svc"},
		{name: "token", url: "nats://t0k3n@h:1/svc", addr: "nats://t0k3n@h:1", prefix: "svc"},
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
		{"a.b\tc", false},
		{"a.b\n", false},
		{"a.\rb", false},
	} {
		if got := validToken(tt.s); got != tt.ok {
			t.Errorf("validToken(%q) = %v, want %v", tt.s, got, tt.ok)
		}
	}
	// It runs for every forwarded call.
	if n := testing.AllocsPerRun(100, func() { validToken("run.submit.x") }); n != 0 {
		t.Errorf("validToken allocates %v times", n)
	}
}

// natsCall is a backend.Call that records how it finished.
type natsCall struct {
	method string
	err    chan error
}

func (c *natsCall) Method() string         { return c.method }
func (c *natsCall) Params() []byte         { return []byte(`{}`) }
func (c *natsCall) Stream() backend.Stream { return nil }
func (c *natsCall) Finish(_ []byte, err error) {
	c.err <- err
}

// TestInboxOverflowFailsTheLink: when nats.go reports that it dropped
// messages of the link's inbox (a slow consumer), every call on the link
// fails UPSTREAM_UNAVAILABLE at once instead of waiting for an answer that
// may be gone; an overflow of another subscription changes nothing.
func TestInboxOverflowFailsTheLink(t *testing.T) {
	r, err := ParseURL("nats://127.0.0.1:1/svc")
	if err != nil {
		t.Fatal(err)
	}
	u := New("n", []Replica{r}, Config{})
	l := u.links[0]
	l.open()
	c := &natsCall{method: "edge/echo", err: make(chan error, 1)}
	l.forward(c, 0)
	if l.inboxOverflowed(&nats.Subscription{Subject: "other.>"}, nats.ErrSlowConsumer) ||
		l.inboxOverflowed(&nats.Subscription{Subject: l.nats.inbox + ".>"}, nats.ErrBadSubject) {
		t.Fatal("failed the link for another subscription or another error")
	}
	if !l.inboxOverflowed(&nats.Subscription{Subject: l.nats.inbox + ".>"}, nats.ErrSlowConsumer) {
		t.Fatal("the inbox overflow did not fail the link")
	}
	if err := <-c.err; !errors.Is(err, backend.ErrUpstreamUnavailable) {
		t.Fatalf("the call finished with %v, want UPSTREAM_UNAVAILABLE", err)
	}
	if !l.open() {
		t.Fatal("the link does not open again")
	}
}
