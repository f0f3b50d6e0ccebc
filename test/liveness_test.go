package test

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

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
	c := dial(t, gw)
	start := time.Now()
	op, p := c.readMessage()
	if op != ws.OpPing {
		t.Fatalf("got %s, want a ping", describe(op, p))
	}
	if d := time.Since(start); d < pingInterval*3/4 {
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
	if d := time.Since(start); d < (pingInterval+pongTimeout)*3/4 {
		t.Fatalf("closed after %s, want at least %s of silence", d, pingInterval+pongTimeout)
	}
}

// TestPongKeepsClientAlive checks that a client that answers every ping with a
// pong stays connected across several ping intervals.
func TestPongKeepsClientAlive(t *testing.T) {
	gw := startGateway(t, withLiveness)
	c := dial(t, gw)
	end := time.Now().Add(5 * (pingInterval + pongTimeout) / 2)
	pings := 0
	for time.Now().Before(end) {
		h, p, err := c.readFrame(time.Until(end))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			break
		}
		if err != nil {
			t.Fatalf("after %d pings: %v", pings, err)
		}
		if h.OpCode != ws.OpPing {
			t.Fatalf("got %s, want only pings", describe(h.OpCode, p))
		}
		pings++
		c.sendFrame(true, ws.OpPong, p, true)
	}
	if pings < 2 {
		t.Fatalf("%d pings, want at least 2", pings)
	}
	c.echo()
}

// TestActiveClientNotPinged checks that traffic counts as liveness: a client
// that sends a request more often than PingInterval gets no ping.
func TestActiveClientNotPinged(t *testing.T) {
	gw := startGateway(t, withLiveness)
	c := dial(t, gw)
	for range 8 {
		c.echo()
		time.Sleep(pingInterval / 4) // pacing the client, not waiting for an effect
	}
}
