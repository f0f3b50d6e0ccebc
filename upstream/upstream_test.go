package upstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestParseURL: the --upstream URLs of CONTRACT.md section 10.
func TestParseURL(t *testing.T) {
	tests := []struct {
		name, in string
		want     Replica
		wantErr  string // a substring of the error; "" for none
	}{
		{"exec", "exec:edge --stdio", Replica{Kind: Exec, URL: "exec:edge --stdio", Argv: []string{"edge", "--stdio"}}, ""},
		{"exec quoted", `exec:/bin/my tool "a b" c`, Replica{Kind: Exec, URL: `exec:/bin/my tool "a b" c`, Argv: []string{"/bin/my", "tool", "a b", "c"}}, ""},
		{"exec no command", "exec:   ", Replica{}, "no command"},
		{"exec unterminated quote", `exec:edge "--stdio`, Replica{}, "unterminated"},
		{"tcp", "tcp://127.0.0.1:9000", Replica{Kind: TCP, URL: "tcp://127.0.0.1:9000", Addr: "127.0.0.1:9000"}, ""},
		{"tcp slash", "tcp://127.0.0.1:9000/", Replica{Kind: TCP, URL: "tcp://127.0.0.1:9000/", Addr: "127.0.0.1:9000"}, ""},
		{"tcp path", "tcp://127.0.0.1:9000/x", Replica{}, "no path"},
		{"tcp no port", "tcp://127.0.0.1", Replica{}, "HOST:PORT"},
		{"tcp no host", "tcp://", Replica{}, "HOST:PORT"},
		{"ws", "ws://h:80/rpc", Replica{Kind: WebSocket, URL: "ws://h:80/rpc", Addr: "h:80"}, ""},
		{"ws ipv6", "ws://[::1]:80/", Replica{Kind: WebSocket, URL: "ws://[::1]:80/", Addr: "[::1]:80"}, ""},
		{"http", "http://h:8080/rpc", Replica{Kind: HTTP, URL: "http://h:8080/rpc", Addr: "h:8080"}, ""},
		{"nats", "nats://h:4222/p", Replica{Kind: NATS, URL: "nats://h:4222/p", Addr: "nats://h:4222", Prefix: "p"}, ""},
		{"https", "https://h:443/", Replica{}, "want exec:"},
		{"unknown scheme", "udp://h:1", Replica{}, "want exec:"},
		{"no scheme", "h:1", Replica{}, "HOST:PORT"},
		{"bad url", "ws://h:1/%zz", Replica{}, "invalid URL escape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseURL(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseURL(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseURL(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestReplicaCredentialsMasked: a replica's URL keeps its userinfo for the
// dial, but String and ParseURL's errors, which reach logs and stderr, show
// it masked (CONTRACT.md section 12).
func TestReplicaCredentialsMasked(t *testing.T) {
	for _, tt := range []struct{ in, shown string }{
		{"ws://u:hunter2@h:80/rpc", "ws://u:***@h:80/rpc"},
		{"http://u:hunter2@h:80/rpc", "http://u:***@h:80/rpc"},
		{"tcp://u:hunter2@h:80", "tcp://u:***@h:80"},
		{"nats://u:hunter2@h:4222/p", "nats://u:***@h:4222/p"},
		{"nats://hunter2@h:4222/p", "nats://***@h:4222/p"},
	} {
		r, err := ParseURL(tt.in)
		if err != nil {
			t.Fatalf("ParseURL(%q): %v", tt.in, err)
		}
		if r.URL != tt.in {
			t.Errorf("ParseURL(%q).URL = %q, want it as given", tt.in, r.URL)
		}
		if got := r.String(); got != tt.shown {
			t.Errorf("ParseURL(%q).String() = %q, want %q", tt.in, got, tt.shown)
		}
		if got := fmt.Sprintf("%v %+v", r, r); strings.Contains(got, "hunter2") {
			t.Errorf("formatted replica shows the password: %s", got)
		}
	}
	for _, in := range []string{"ws://u:hunter2@h:1/%zz", "ftp://u:hunter2@h:1/", "ws://u:hunter2@h/", "tcp://u:hunter2@h:1/x",
		"nats://u:hunter2@h:1/a.*", "nats://u:hunt/er2@h:1/p"} {
		_, err := ParseURL(in)
		if err == nil {
			t.Fatalf("ParseURL(%q): no error", in)
		}
		if strings.Contains(err.Error(), "hunt") || !strings.Contains(err.Error(), "u:***@") {
			t.Errorf("ParseURL(%q): error %q shows the password or no masked URL", in, err)
		}
	}
	for _, in := range []string{"ws://u:hunter2@h:1/", "memory=ws://u:hunter2@h:1/"} {
		if _, err := ParseSpec(in); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseSpec(%q): error %v, want one without the password", in, err)
		}
	}
}

// TestSplitWords: exec command lines split on spaces with double quotes
// grouping, and no shell (CONTRACT.md section 10).
func TestSplitWords(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
		wantErr  bool
	}{
		{"empty", "", nil, false},
		{"spaces only", "   ", nil, false},
		{"words", "a bb  ccc", []string{"a", "bb", "ccc"}, false},
		{"leading and trailing spaces", "  a b  ", []string{"a", "b"}, false},
		{"quoted group", `a "b c" d`, []string{"a", "b c", "d"}, false},
		{"empty quotes are a word", `a "" b`, []string{"a", "", "b"}, false},
		{"quotes inside a word", `a"b c"d e`, []string{"ab cd", "e"}, false},
		{"tabs are not separators", "a\tb c", []string{"a\tb", "c"}, false},
		{"shell characters pass", `echo $HOME | x; y`, []string{"echo", "$HOME", "|", "x;", "y"}, false},
		{"unterminated", `a "b`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := splitWords(tt.in)
			if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("splitWords(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestParseSpec: --upstream NAME=URL; the name memory is the embedded
// backend's.
func TestParseSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    Spec
		wantErr bool
	}{
		{"e=tcp://h:1", Spec{Name: "e", URL: "tcp://h:1"}, false},
		{"e=exec:a=b", Spec{Name: "e", URL: "exec:a=b"}, false},
		{"=tcp://h:1", Spec{}, true},
		{"e=", Spec{}, true},
		{"e", Spec{}, true},
		{"memory=tcp://h:1", Spec{}, true},
	}
	for _, tt := range tests {
		got, err := ParseSpec(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestParseRoute: --route PATTERN=NAME, where '*' may only end the pattern.
func TestParseRoute(t *testing.T) {
	tests := []struct {
		in      string
		want    Route
		wantErr bool
	}{
		{"run/*=engine", Route{Pattern: "run/*", Target: "engine"}, false},
		{"*=memory", Route{Pattern: "*", Target: "memory"}, false},
		{"get=e", Route{Pattern: "get", Target: "e"}, false},
		{"a=b=c", Route{Pattern: "a", Target: "b=c"}, false},
		{"*x=e", Route{}, true},
		{"a**=e", Route{}, true},
		{"=e", Route{}, true},
		{"get=", Route{}, true},
		{"get", Route{}, true},
	}
	for _, tt := range tests {
		got, err := ParseRoute(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseRoute(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("Route.String() = %q, want %q", got.String(), tt.in)
		}
	}
}

// TestRouteMatches: a pattern is an exact method name, or a prefix ending in
// '*'.
func TestRouteMatches(t *testing.T) {
	tests := []struct {
		pattern, method string
		want            bool
	}{
		{"get", "get", true},
		{"get", "get2", false},
		{"get", "ge", false},
		{"run/*", "run/submit", true},
		{"run/*", "run/", true},
		{"run/*", "run", false},
		{"run/*", "rerun/x", false},
		{"*", "anything", true},
		{"*", "", true},
		{"edge/*", "edge/echo", true},
	}
	for _, tt := range tests {
		if got := (Route{Pattern: tt.pattern, Target: "e"}).Matches(tt.method); got != tt.want {
			t.Errorf("Route %q Matches(%q) = %v, want %v", tt.pattern, tt.method, got, tt.want)
		}
	}
}

// TestSetLookup: routes are tried in order, first match wins; an unmatched
// method goes to the first upstream; memory routes and edge/topic,
// edge/publish stay edge's own; a route to an unknown name is refused.
func TestSetLookup(t *testing.T) {
	specs := []Spec{{"a", "tcp://127.0.0.1:1"}, {"b", "tcp://127.0.0.1:2"}, {"a", "tcp://127.0.0.1:3"}}
	routes := []Route{{"run/status", "memory"}, {"run/*", "b"}, {"edge/*", "b"}}
	set, err := NewSet(specs, routes, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(set.Upstreams()); n != 2 || set.Upstreams()[0].Name() != "a" {
		t.Fatalf("upstreams %d, first %q; want a and b, replicas merged", n, set.Upstreams()[0].Name())
	}
	if _, total := set.Upstreams()[0].Connected(); total != 2*DefaultConns {
		t.Fatalf("upstream a has %d connections, want %d (two replicas)", total, 2*DefaultConns)
	}
	for method, want := range map[string]string{
		"run/status": "", "run/submit": "b", "get": "a", "edge/echo": "b", "edge/topic": "", "edge/publish": "",
	} {
		f := set.Forwarder(method)
		got := ""
		if f != nil {
			got = f.(*Upstream).Name()
		}
		if got != want {
			t.Errorf("Forwarder(%q) = %q, want %q", method, got, want)
		}
	}
	if _, err := NewSet(specs, []Route{{"x", "nope"}}, Config{}); err == nil {
		t.Fatal("a route to an unknown upstream was accepted")
	}
	if _, err := NewSet([]Spec{{"a", "udp://h:1"}}, nil, Config{}); err == nil {
		t.Fatal("a bad URL was accepted")
	}
	if empty, _ := NewSet(nil, nil, Config{}); !empty.Empty() || empty.Forwarder("get") != nil {
		t.Fatal("a set without upstreams forwards")
	}
}

// TestBackoffBounds: the wait before attempt n is d/2..d with d = BackoffMin
// doubled n times and capped at BackoffMax (CONTRACT.md section 10: 100ms to
// [10s], with jitter), also for attempt counts that would overflow a
// doubling.
func TestBackoffBounds(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{BackoffMin: time.Millisecond, BackoffMax: time.Second},
		{BackoffMin: time.Second, BackoffMax: time.Millisecond}, // max wins
		{BackoffMin: 3 * time.Millisecond, BackoffMax: 3 * time.Millisecond},
	} {
		u := New("t", nil, cfg)
		lo, hi := u.cfg.BackoffMin, u.cfg.BackoffMax
		if lo > hi || lo <= 0 {
			t.Fatalf("config %+v: bounds %v..%v", cfg, lo, hi)
		}
		seenHigh, seenLow := false, false
		for n := range 100 {
			d := lo
			for i := 0; i < n && d < hi; i++ {
				d *= 2
			}
			d = min(d, hi)
			for range 200 {
				b := u.backoff(n)
				if b < d/2 || b > d {
					t.Fatalf("config %+v: backoff(%d) = %v, want %v..%v", cfg, n, b, d/2, d)
				}
				seenLow = seenLow || b < d*3/4
				seenHigh = seenHigh || b > d*3/4
			}
		}
		if !seenLow || !seenHigh {
			t.Fatalf("config %+v: no jitter across the range (low %v, high %v)", cfg, seenLow, seenHigh)
		}
	}
}

// TestConfigDefaults: zero values mean the documented defaults.
func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	want := Config{Conns: DefaultConns, HTTPConns: DefaultHTTPConns, Timeout: DefaultTimeout, BackoffMin: DefaultBackoffMin, BackoffMax: DefaultBackoffMax,
		MaxMessageBytes: DefaultMaxMessageBytes, MaxHeaderBytes: DefaultMaxHeaderBytes, MaxPendingBytes: DefaultMaxPendingBytes, WriteStallTimeout: DefaultWriteStall, KillTimeout: DefaultKillTimeout, StderrRate: DefaultStderrRate, Logger: c.Logger}
	if c != want || c.Logger == nil {
		t.Fatalf("defaults %+v, want %+v", c, want)
	}
	if DefaultBackoffMin != 100*time.Millisecond || DefaultBackoffMax != 10*time.Second || DefaultTimeout != 30*time.Second || DefaultConns != 2 {
		t.Fatal("defaults differ from CONTRACT.md section 10")
	}
}

// TestSupervisorBackoff: a connection that is lost at once is redialled
// after waits that double from BackoffMin to BackoffMax, each with jitter in
// its upper half (CONTRACT.md section 10), and Close stops the redialling.
// The supervisor runs in a synctest bubble, so the waits are measured on the
// bubble's clock; the upstream is a listener outside the bubble that answers
// edge's probe (so that the connection counts as up) and closes every
// connection it accepts.
func TestSupervisorBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			answerProbe(c)
			c.Close()
		}
	}()
	synctest.Test(t, func(t *testing.T) {
		rec := &connectLog{}
		u := New("t", []Replica{{Kind: TCP, URL: "tcp://" + ln.Addr().String(), Addr: ln.Addr().String()}},
			Config{Conns: 1, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second, Logger: slog.New(rec)})
		u.Start()
		const dials = 8
		// Each dial, its failure and the wait after it take no time on
		// the bubble's clock but the wait: dials+1 connections need at
		// most the sum of the longest waits.
		for rec.count() < dials+1 {
			time.Sleep(time.Second) // advances the bubble's clock only
		}
		u.Close()
		at := rec.times()
		d := 100 * time.Millisecond
		for i := 1; i <= dials; i++ {
			if gap := at[i].Sub(at[i-1]); gap < d/2 || gap > d {
				t.Errorf("wait before connection %d: %v, want %v..%v", i+1, gap, d/2, d)
			}
			d = min(2*d, time.Second)
		}
	})
}

// connectLog is a slog.Handler that records when "upstream connected" was
// logged.
type connectLog struct {
	mu sync.Mutex
	at []time.Time
}

func (c *connectLog) Enabled(context.Context, slog.Level) bool { return true }
func (c *connectLog) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *connectLog) WithGroup(string) slog.Handler            { return c }
func (c *connectLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "upstream connected" {
		c.mu.Lock()
		c.at = append(c.at, r.Time)
		c.mu.Unlock()
	}
	return nil
}

func (c *connectLog) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

func (c *connectLog) times() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...)
}

// testUpstream is an Upstream for tests of a single link: no replicas, logs
// discarded unless w is given.
func testUpstream(w io.Writer, cfg Config) *Upstream {
	if w == nil {
		w = io.Discard
	}
	cfg.Logger = slog.New(slog.NewTextHandler(w, nil))
	return New("t", nil, cfg)
}
