package main

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
)

// TestParseFlagsDefaults: with no flags every limit has its documented
// default.
func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := loadConfig(nil, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.opts
	c := o.loop
	for _, f := range []struct {
		name      string
		got, want int
	}{
		{"max-message-bytes", c.MaxMessageBytes, loop.DefaultMaxMessageBytes},
		{"max-header-bytes", c.MaxHeaderBytes, loop.DefaultMaxHeaderBytes},
		{"read-buffer-bytes", c.ReadBufferBytes, loop.DefaultReadBufferBytes},
		{"spare-output-bytes", c.SpareOutputBytes, loop.DefaultSpareOutput},
		{"outbound-soft-bytes", c.OutboundSoftBytes, loop.DefaultOutboundSoft},
		{"outbound-hard-bytes", c.OutboundHardBytes, loop.DefaultOutboundHard},
		{"max-parked-bytes", c.MaxParkedBytes, 256 << 20},
		{"max-conn-tasks", o.maxConn, rpc.DefaultMaxConnTasks},
		{"subscription-buffer", o.subBuffer, rpc.DefaultSubscriptionBuffer},
		{"upstream-conns", o.upstream.Conns, upstream.DefaultConns},
		{"upstream-http-conns", o.upstream.HTTPConns, 64},
		{"upstream-timeout (s)", int(o.upstream.Timeout.Seconds()), 30},
		{"upstream-backoff-max (s)", int(o.upstream.BackoffMax.Seconds()), 10},
		{"max-batch", o.maxBatch, 100},
		{"handshake-queue", c.HandshakeQueue, loop.DefaultHandshakeQueue},
		{"log-buffer-bytes", o.logBuffer, loop.DefaultLogBufferBytes},
		{"upstream-stderr-rate", o.upstream.StderrRate, upstream.DefaultStderrRate},
		{"upstream-max-pending-bytes", o.upstream.MaxPendingBytes, 16 << 20},
		{"upstream-write-stall-timeout (s)", int(o.upstream.WriteStallTimeout.Seconds()), 10},
		{"handshake-silent-timeout (s)", int(c.HandshakeSilentTimeout.Seconds()), 3},
	} {
		if f.got != f.want {
			t.Errorf("--%s defaults to %d, want %d", f.name, f.got, f.want)
		}
	}
}

// TestParseFlagsRejectsNegativeLimits: a negative limit is refused with an
// error that names the flag.
func TestParseFlagsRejectsNegativeLimits(t *testing.T) {
	for _, name := range []string{"max-message-bytes", "max-header-bytes", "read-buffer-bytes",
		"spare-output-bytes", "outbound-soft-bytes", "outbound-hard-bytes", "handshake-timeout",
		"max-conn-tasks", "max-tasks", "subscription-buffer", "worker-idle",
		"upstream-conns", "upstream-http-conns", "upstream-timeout", "upstream-backoff-max", "max-batch",
		"handshake-queue", "handshake-silent-timeout", "log-buffer-bytes", "upstream-stderr-rate",
		"upstream-max-pending-bytes", "upstream-write-stall-timeout", "max-parked-bytes"} {
		val := "-1"
		if strings.HasSuffix(name, "timeout") || name == "worker-idle" || name == "upstream-backoff-max" {
			val = "-1s"
		}
		_, err := loadConfig([]string{"--" + name, val}, nil, io.Discard)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("--%s %s: error %v, want one naming the flag", name, val, err)
		}
	}
}

// TestUpstreamFlagsRefused: bad --upstream, --route and --profile values are
// refused before anything starts, each with an error naming what is wrong;
// a subscription method routed to an http upstream is refused at start-up
// naming the route (CONTRACT.md section 10).
func TestUpstreamFlagsRefused(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "noequals"}, "want NAME=URL"},
		{[]string{"--upstream", "memory=tcp://127.0.0.1:1"}, "embedded backend"},
		{[]string{"--upstream", "a=ftp://127.0.0.1:1"}, "want exec:, tcp://, ws:// or http://"},
		{[]string{"--upstream", "a=tcp://127.0.0.1"}, "want HOST:PORT"},
		{[]string{"--upstream", `a=exec:"unterminated`}, "unterminated"},
		{[]string{"--route", "x=memory"}, "--route needs an --upstream"},
		{[]string{"--upstream", "a=tcp://127.0.0.1:1", "--route", "x*y=a"}, "may only end the pattern"},
		{[]string{"--upstream", "a=tcp://127.0.0.1:1", "--route", "x=b"}, `no upstream named "b"`},
		{[]string{"--profile", "xml"}, "profile"},
		{[]string{"--upstream", "h=http://127.0.0.1:1/rpc", "--route", "edge/*=h"}, "route edge/*=h sends subscription method edge/ticks to http upstream h"},
		{[]string{"--upstream", "h=http://127.0.0.1:1/rpc", "--route", "edge/*=memory"}, "the default route (the first --upstream) sends subscription method watch"},
	} {
		err := run(t.Context(), tt.args, strings.NewReader(""), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("edge %q: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}

// TestNDJSONListenLoopbackOnly: NDJSON over TCP has no handshake and no
// authentication, so --ndjson-listen serves loopback addresses only unless
// --ndjson-insecure is given (CONTRACT.md section 11); a bad --allow-origin
// is refused naming it.
func TestNDJSONListenLoopbackOnly(t *testing.T) {
	for _, tt := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--ndjson-listen", "127.0.0.1:0"}, true},
		{[]string{"--ndjson-listen", "127.0.0.2:0"}, true},
		{[]string{"--ndjson-listen", "[::1]:0"}, true},
		{[]string{"--ndjson-listen", "localhost:0"}, true},
		{[]string{"--ndjson-listen", "0.0.0.0:9000"}, false},
		{[]string{"--ndjson-listen", ":9000"}, false},
		{[]string{"--ndjson-listen", "10.1.2.3:9000"}, false},
		{[]string{"--ndjson-listen", "0.0.0.0:9000", "--ndjson-insecure"}, true},
	} {
		_, err := loadConfig(tt.args, nil, io.Discard)
		if tt.ok && err != nil {
			t.Errorf("edge %q: %v", tt.args, err)
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "--ndjson-insecure")) {
			t.Errorf("edge %q: error %v, want one naming --ndjson-insecure", tt.args, err)
		}
	}
	for _, bad := range []string{"app.example", "https://app.example/", "https://", "https://a.example/path"} {
		if _, err := loadConfig([]string{"--allow-origin", bad}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "allow-origin") {
			t.Errorf("--allow-origin %q: error %v, want one naming the flag", bad, err)
		}
	}
}

// TestClientAddressFlags: --trusted-proxy takes CIDRs and single addresses
// (repeatable, also as an EDGE_ list), --proxy-protocol a boolean; a bad
// CIDR is an error naming the flag.
func TestClientAddressFlags(t *testing.T) {
	cfg, err := loadConfig([]string{"--trusted-proxy", "10.1.2.3/8", "--trusted-proxy", "2001:db8::1"},
		[]string{"EDGE_PROXY_PROTOCOL=true", "EDGE_PROXY_PROTOCOL_FROM=10.0.0.5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.opts.loop
	got := fmt.Sprint(c.TrustedProxies)
	if got != "[10.0.0.0/8 2001:db8::1/128]" || !c.ProxyProtocol || fmt.Sprint(c.ProxyProtocolFrom) != "[10.0.0.5/32]" {
		t.Fatalf("trusted proxies %s, proxy protocol %v", got, c.ProxyProtocol)
	}
	cfg, err = loadConfig(nil, []string{`EDGE_TRUSTED_PROXY=["192.0.2.0/24", "198.51.100.7"]`}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(cfg.opts.loop.TrustedProxies); got != "[192.0.2.0/24 198.51.100.7/32]" {
		t.Fatalf("from the environment: %s", got)
	}
	_, err = loadConfig([]string{"--trusted-proxy", "10.0.0.0/33"}, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "trusted-proxy") || !strings.Contains(err.Error(), "CIDR") {
		t.Fatalf("bad CIDR: %v", err)
	}
	_, err = loadConfig([]string{"--proxy-protocol", "--proxy-protocol-from", "10.0.0.0/33"}, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "proxy-protocol-from") || !strings.Contains(err.Error(), "CIDR") {
		t.Fatalf("bad --proxy-protocol-from CIDR: %v", err)
	}
}

// TestProxyProtocolNeedsFrom: --proxy-protocol without --proxy-protocol-from
// is refused, saying how to trust any peer; with it, or with 0.0.0.0/0
// written out, it loads; --proxy-protocol-from alone is refused too. On the
// old code --proxy-protocol alone loaded (and trusted every peer).
func TestProxyProtocolNeedsFrom(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // "" when it loads
	}{
		{[]string{"--proxy-protocol"}, "--proxy-protocol-from 0.0.0.0/0"},
		{[]string{"--proxy-protocol-from", "10.0.0.5"}, "proxy-protocol-from needs --proxy-protocol"},
		{[]string{"--proxy-protocol", "--proxy-protocol-from", "10.0.0.0/8"}, ""},
		{[]string{"--proxy-protocol", "--proxy-protocol-from", "0.0.0.0/0", "--proxy-protocol-from", "::/0"}, ""},
	} {
		_, err := loadConfig(tt.args, nil, io.Discard)
		if tt.want == "" && err != nil {
			t.Errorf("edge %q: %v", tt.args, err)
		}
		if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("edge %q: error %v, want one saying %q", tt.args, err, tt.want)
		}
	}
}
