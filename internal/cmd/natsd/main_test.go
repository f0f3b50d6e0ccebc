package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
)

// TestServes: natsd on a free port says where it listens, carries a request
// and its reply there, and stops when its context ends.
func TestServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log testgw.Buffer
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"--listen", "127.0.0.1:0"}, &log) }()
	url := ""
	poll.Until(t, 10*time.Second, "the listening line", func() (bool, string) {
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "msg=listening") {
				for _, f := range strings.Fields(l) {
					if v, ok := strings.CutPrefix(f, "url="); ok {
						url = v
					}
				}
			}
		}
		return url != "", log.String()
	})
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":4222") {
		t.Fatalf("url %q: want a free port on 127.0.0.1", url)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe("echo", func(m *nats.Msg) { m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request("echo", []byte("hi"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "hi" {
		t.Fatalf("reply through natsd: %q, want \"hi\"", m.Data)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("natsd did not stop within 10 s of its context ending")
	}
}

// TestBadFlags: JetStream without a store and a bad port are refused.
func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--jetstream"}, {"--listen", "127.0.0.1:x"}, {"--listen", "nope"}, {"extra"}} {
		var log testgw.Buffer
		if err := run(context.Background(), args, &log); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
