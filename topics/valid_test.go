package topics

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testnats"
)

// TestInvalidUTF8Dropped is the regression test of issue 19 item 6
// (topics): a message on a topic's subject that another NATS client
// published with invalid UTF-8 in a JSON string passed the topics' JSON
// check and went out in WebSocket text frames, which must be UTF-8 (RFC
// 6455 section 8.1). It must be dropped and counted, the valid message
// after it delivered.
func TestInvalidUTF8Dropped(t *testing.T) {
	for _, js := range []bool{false, true} {
		t.Run(mode(js), func(t *testing.T) {
			tops, url := startTopics(t, js)
			g, _, _ := subscribeGate(t, tops, "u", false)
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			for _, data := range []string{"{\"s\":\"\xff\xfe\"}", `{"s":"ok"}`} {
				if err := nc.Publish(tops.Subject("u"), []byte(data)); err != nil {
					t.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			// The valid message is the last: once it is there, the
			// other one was handled.
			poll.Until(t, 10*time.Second, "the valid message delivered", func() (bool, string) {
				got := g.bodies()
				return len(got) > 0 && bytes.Contains(got[len(got)-1], []byte(`"ok"`)), "events: " + strings.Join(strs(got), " | ")
			})
			if got := g.bodies(); len(got) != 1 {
				t.Fatalf("events %q, want the valid one only", strs(got))
			}
			if n := tops.Dropped(); n != 1 {
				t.Fatalf("Dropped() = %d, want 1", n)
			}
		})
	}
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// countHandler is a slog.Handler that counts records by message.
type countHandler struct {
	mu sync.Mutex
	n  map[string]int // guarded by mu
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countHandler) WithGroup(string) slog.Handler            { return h }

func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = make(map[string]int)
	}
	h.n[r.Message]++
	return nil
}

func (h *countHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// TestStreamUnusableLoggedOnce is the regression test of issue 19 item 6
// (topics): while the JetStream stream cannot be used, the writer tries
// again every 250 ms and logged "JetStream stream unusable" each time. It
// must log the change only. The NATS server here has no JetStream; a
// second client listens on the JetStream API's subjects, never answers,
// and counts the writer's attempts (each asks for the stream), so the
// test knows four attempts were made; one line must have been logged.
func TestStreamUnusableLoggedOnce(t *testing.T) {
	ns := testnats.Start(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	attempts := 0
	if _, err := nc.Subscribe("$JS.API.STREAM.INFO.>", func(*nats.Msg) {
		mu.Lock()
		attempts++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	logs := &countHandler{}
	tops, err := New(Config{URL: ns.ClientURL(), JetStream: true, Timeout: 100 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tops.Start(); err != nil {
		t.Fatal(err)
	}
	defer tops.Close()
	poll.Until(t, 10*time.Second, "four attempts to use the stream", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return attempts >= 4, itoa(attempts) + " attempts"
	})
	if n := logs.count("nats topics: JetStream stream unusable"); n != 1 {
		t.Fatalf(`"JetStream stream unusable" logged %d times in 4 attempts, want once`, n)
	}
	if why := tops.NotReady(); !strings.Contains(why, "unusable") {
		t.Fatalf("NotReady() = %q, want the stream unusable", why)
	}
}
