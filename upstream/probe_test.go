package upstream

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
)

// probeMethod and probeAnswer: edge's probe (probe.go) and what a JSON-RPC
// server that does not know the method answers it.
const (
	probeMethod = "rpc.edge.probe"
	probeAnswer = `{"jsonrpc":"2.0","id":"edge.probe","error":{"code":-32601,"message":"Method not found"}}` + "\n"
)

// answerProbe reads edge's probe from c and answers it, as any JSON-RPC
// server would; false if c did not send it.
func answerProbe(c net.Conn) bool {
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != string(probeRequest) {
		return false
	}
	_, err = io.WriteString(c, probeAnswer)
	return err == nil
}

// probeServer listens on 127.0.0.1 and runs serve for each connection (on
// its own goroutine; the connection is closed when serve returns or the
// test ends); it returns the address and the count of connections
// accepted.
func probeServer(t *testing.T, serve func(c net.Conn)) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				go func() { <-done; c.Close() }()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String(), &accepted
}

// startProbed starts a one-connection tcp upstream at addr with timeout,
// logging to logs.
func startProbed(t *testing.T, addr string, timeout time.Duration, logs *logBuffer) *Upstream {
	t.Helper()
	u := New("t", []Replica{{Kind: TCP, URL: "tcp://" + addr, Addr: addr}},
		Config{Conns: 1, Timeout: timeout, BackoffMin: time.Millisecond, BackoffMax: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// TestProbeAnswerOpens: a tcp connection is not up until the upstream has
// answered edge's probe: connected and waiting, /readyz's reason says so
// (Down) and nothing is logged connected; a greeting notification before
// the answer changes nothing; the answer (an error: the method is unknown,
// as expected) opens it, clears the reason and logs it connected once.
func TestProbeAnswerOpens(t *testing.T) {
	got := make(chan string, 1)
	answer := make(chan struct{})
	addr, _ := probeServer(t, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
		io.WriteString(c, `{"jsonrpc":"2.0","method":"hello","params":{}}`+"\n")
		<-answer
		io.WriteString(c, probeAnswer)
		io.Copy(io.Discard, c)
	})
	var logs logBuffer
	u := startProbed(t, addr, 30*time.Second, &logs)
	select {
	case line := <-got:
		if line != string(probeRequest) {
			t.Fatalf("the upstream received %q, want the probe %q", line, probeRequest)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no probe")
	}
	want := "tcp://" + addr + ": " + whyProbing
	poll.Until(t, 5*time.Second, "Down says the probe is unanswered", func() (bool, string) {
		return u.Down() == want, u.Down()
	})
	if up, _ := u.Connected(); up != 0 || u.Ready() || strings.Contains(logs.String(), "upstream connected") {
		t.Fatalf("up before the probe was answered: %d up, logs:\n%s", up, logs.String())
	}
	close(answer)
	poll.Until(t, 5*time.Second, "connected once the probe is answered", func() (bool, string) {
		up, _ := u.Connected()
		return up == 1, fmt.Sprintf("%d up; Down %q", up, u.Down())
	})
	if d := u.Down(); d != "" {
		t.Errorf("Down %q once up, want \"\"", d)
	}
	poll.Until(t, 5*time.Second, "logged connected", func() (bool, string) {
		return strings.Count(logs.String(), "upstream connected") == 1, logs.String()
	})
}

// TestProbeGarbage: an upstream that answers the probe with what is not
// JSON-RPC (an HTTP server's 400) is never up: the connection is closed and
// redialled with back-off, Down quotes what it sent, and the log says it
// once for all the attempts.
func TestProbeGarbage(t *testing.T) {
	addr, accepted := probeServer(t, func(c net.Conn) {
		bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request")
		io.Copy(io.Discard, c) // edge closes it
	})
	var logs logBuffer
	u := startProbed(t, addr, 30*time.Second, &logs)
	want := "tcp://" + addr + `: not JSON-RPC: it sent "HTTP/1.1 400 Bad Request"`
	poll.Until(t, 10*time.Second, "3 attempts, Down quoting the 400", func() (bool, string) {
		return accepted.Load() >= 3 && u.Down() == want, fmt.Sprintf("%d accepted, Down %q", accepted.Load(), u.Down())
	})
	out := logs.String()
	if up, _ := u.Connected(); up != 0 || strings.Contains(out, "upstream connected") {
		t.Fatalf("%d up after garbage; logs:\n%s", up, out)
	}
	if n := strings.Count(out, `msg="upstream does not answer as JSON-RPC"`); n != 1 {
		t.Fatalf("%d log lines say it does not answer, want 1:\n%s", n, out)
	}
}

// TestProbeSilence: an upstream that accepts and says nothing is not up;
// the probe unanswered within the upstream timeout closes the connection
// and edge redials, Down saying so.
func TestProbeSilence(t *testing.T) {
	addr, accepted := probeServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	var logs logBuffer
	u := startProbed(t, addr, 50*time.Millisecond, &logs)
	want := "tcp://" + addr + ": no answer to edge's probe within 50ms (--upstream-timeout)"
	poll.Until(t, 10*time.Second, "redialled, Down saying the probe timed out", func() (bool, string) {
		d := u.Down()
		return accepted.Load() >= 2 && (d == want || d == "tcp://"+addr+": "+whyProbing), fmt.Sprintf("%d accepted, Down %q", accepted.Load(), d)
	})
	poll.Until(t, 10*time.Second, "the timeout logged", func() (bool, string) {
		return strings.Contains(logs.String(), "no answer to edge's probe within 50ms"), logs.String()
	})
	if up, _ := u.Connected(); up != 0 {
		t.Fatalf("%d up, want 0", up)
	}
}

// TestQuoteStart: what an upstream sent is quoted ASCII, cut at 40 bytes
// without splitting a rune.
func TestQuoteStart(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"HTTP/1.1 400 Bad Request", `"HTTP/1.1 400 Bad Request"`},
		{"\x00\x01binary", `"\x00\x01binary"`},
		{strings.Repeat("a", 39) + "é", `"` + strings.Repeat("a", 39) + `"...`},
	} {
		if got := quoteStart([]byte(c.in)); got != c.want {
			t.Errorf("quoteStart(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
