package test

import (
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// End-to-end checks of the liveness timers over real sockets. Their exact
// timing (each timer fires at its deadline and at most one sweep later, with
// the default timeouts) is checked on a fake clock by loop's unit tests
// (loop/liveness_test.go); here margins are generous, so that a loaded machine
// cannot make them fail: a lower bound is measured from before the client's
// last input, which the server cannot have read earlier, and an upper bound is
// a read deadline of seconds.

const (
	pingInterval = 200 * time.Millisecond
	pongTimeout  = 300 * time.Millisecond
)

func withLiveness(c *gwConfig) {
	c.loop.PingInterval = pingInterval
	c.loop.PongTimeout = pongTimeout
}

// TestSilentClientPingedThenClosed checks CONTRACT.md section 1.1: after
// PingInterval of silence the server pings, and a client that stays silent
// for PongTimeout more is disconnected.
func TestSilentClientPingedThenClosed(t *testing.T) {
	gw := startGateway(t, withLiveness)
	start := time.Now() // before the upgrade request, the client's last input
	c := dial(t, gw)
	op, p := c.readMessage()
	if op != ws.OpPing {
		t.Fatalf("got %s, want a ping", describe(op, p))
	}
	if d := time.Since(start); d < pingInterval {
		t.Fatalf("ping after %s of silence, want at least %s", d, pingInterval)
	}
	// Stay silent. The server may send a close frame first; then the TCP
	// connection must end.
	h, p, err := c.readFrame(readTimeout)
	if err == nil {
		if h.OpCode != ws.OpClose {
			t.Fatalf("got %s, want a close", describe(h.OpCode, p))
		}
		t.Logf("closed with %s after %s", describe(h.OpCode, p), time.Since(start))
		_, _, err = c.readFrame(readTimeout)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want the connection closed", err)
	}
	if d := time.Since(start); d < pingInterval+pongTimeout {
		t.Fatalf("closed after %s, want at least %s of silence", d, pingInterval+pongTimeout)
	}
}

// TestPongKeepsClientAlive checks that a pong is liveness: the server pings
// again only once input arrived after its ping, so each ping after the first
// shows that the pong before it was read as such. A client that answers its
// pings gets a fourth one and is still served. PongTimeout is 2 s, so that a
// slow pong on a loaded machine still counts.
func TestPongKeepsClientAlive(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) {
		c.loop.PingInterval = 50 * time.Millisecond
		c.loop.PongTimeout = 2 * time.Second
	})
	c := dial(t, gw)
	for pings := 0; pings < 4; pings++ {
		h, p, err := c.readFrame(readTimeout)
		if err != nil {
			t.Fatalf("after %d pings: %v", pings, err)
		}
		if h.OpCode != ws.OpPing {
			t.Fatalf("after %d pings: got %s, want a ping", pings, describe(h.OpCode, p))
		}
		c.sendFrame(true, ws.OpPong, p, true)
	}
	c.echo()
}

// TestActiveClientNotPinged checks that traffic counts as liveness: a client
// that sends a request every 50 ms for twice PingInterval (500 ms) gets no
// ping.
func TestActiveClientNotPinged(t *testing.T) {
	const interval = 500 * time.Millisecond
	gw := startGateway(t, func(c *gwConfig) { c.loop.PingInterval = interval })
	c := dial(t, gw)
	// echo fails if a ping comes instead of its answer.
	for start := time.Now(); time.Since(start) < 2*interval; {
		c.echo()
		time.Sleep(50 * time.Millisecond) // pacing the client, not waiting for an effect
	}
}
