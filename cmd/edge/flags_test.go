package main

import (
	"io"
	"strings"
	"testing"

	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
)

// TestParseFlagsDefaults: with no flags every limit has its documented
// default.
func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
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
		{"max-conn-tasks", o.maxConn, rpc.DefaultMaxConnTasks},
		{"subscription-buffer", o.subBuffer, rpc.DefaultSubscriptionBuffer},
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
		"max-conn-tasks", "max-tasks", "subscription-buffer", "worker-idle"} {
		val := "-1"
		if strings.HasSuffix(name, "timeout") || name == "worker-idle" {
			val = "-1s"
		}
		_, err := parseFlags([]string{"--" + name, val}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("--%s %s: error %v, want one naming the flag", name, val, err)
		}
	}
}
