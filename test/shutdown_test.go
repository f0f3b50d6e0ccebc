package test

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// TestGracefulShutdown checks CONTRACT.md section 9: with requests in flight,
// Shutdown answers new requests with SERVER_SHUTTING_DOWN, lets the in-flight
// ones finish and deliver their responses, refuses new connections, then
// closes every WebSocket with 1001 and returns.
func TestGracefulShutdown(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) { c.loop.ShutdownTimeout = 10 * time.Second })
	busy := dial(t, gw)
	idle := dial(t, gw)
	busy.sendText(`{"jsonrpc":"2.0","id":"sleep","method":"edge/sleep","params":{"ms":200}}`)
	busy.sendText(gate(`"gate"`, "drain"))
	if s, _ := busy.stats(); s.Tasks != 2 {
		t.Fatalf("stats %+v, want 2 tasks in flight", s)
	}
	gw.waitGate("drain", 1)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- gw.srv.Shutdown(ctx)
	}()
	deadline := time.Now().Add(pollTimeout)
	for !gw.rpc.Draining() {
		if time.Now().After(deadline) {
			t.Fatal("Shutdown did not start draining")
		}
		time.Sleep(time.Millisecond)
	}

	// The gate holds the drain open: a new request is answered
	// SERVER_SHUTTING_DOWN, the sleep finishes and answers.
	busy.sendText(`{"jsonrpc":"2.0","id":"late","method":"edge/echo","params":{}}`)
	idle.sendText(`{"jsonrpc":"2.0","id":"idle","method":"get","params":{}}`)
	got := map[string]response{}
	for len(got) < 2 {
		msg := busy.readText()
		r := parseResponse(t, msg)
		got[string(r.ID)] = r
		t.Logf("busy: %s", msg)
	}
	for _, id := range []string{`"late"`} {
		r, ok := got[id]
		if !ok || r.Error == nil || r.Error.Code != -32000 || r.Error.Data == nil || r.Error.Data.Code != "SERVER_SHUTTING_DOWN" {
			t.Fatalf("answer to %s: %+v, want -32000 SERVER_SHUTTING_DOWN", id, r.Error)
		}
	}
	if r := got[`"sleep"`]; string(r.Result) != `{"sleptMs":200}` {
		t.Fatalf("sleep answer %+v, want its result", r)
	}
	if r := parseResponse(t, idle.readText()); string(r.ID) != `"idle"` || r.Error == nil || r.Error.Data == nil || r.Error.Data.Code != "SERVER_SHUTTING_DOWN" {
		t.Fatalf("idle connection: %+v, want SERVER_SHUTTING_DOWN", r)
	}

	// New connections are refused while draining.
	conn := dialTCPMaybe(t, gw)
	if conn != nil {
		conn.SetReadDeadline(time.Now().Add(readTimeout))
		data, err := io.ReadAll(conn)
		if len(data) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection during drain: got %q, %v; want it closed", data, err)
		}
	}

	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while a request was in flight", err)
	default:
	}
	gw.openGate("drain")
	busy.expectText(gateResult(`"gate"`, "drain"))
	for _, c := range []*client{busy, idle} {
		if r := c.expectClose(ws.StatusGoingAway); r != "going away" {
			t.Errorf("close reason %q, want %q", r, "going away")
		}
	}
	busy.sendFrame(true, ws.OpClose, closeBody(1001, ""), true)
	busy.expectEOF()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	idle.expectEOF()
}

// dialTCPMaybe dials the gateway and returns nil if the listener refuses.
func dialTCPMaybe(t *testing.T, gw *gateway) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", gw.addr, readTimeout)
	if err != nil {
		return nil
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
