package test

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

const testKey = "dGhlIHNhbXBsZSBub25jZQ=="

// httpExchange writes req on a new connection and returns the server's
// response, read until the server closes the connection.
func httpExchange(t *testing.T, gw *gateway, req string) (*http.Response, string) {
	t.Helper()
	conn := dialTCP(t, gw)
	conn.SetDeadline(time.Now().Add(readTimeout))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatalf("write: %v", err)
	}
	data, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read until close: %v (got %q)", err, data)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(data))), &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("response %q: %v", data, err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestUpgradeRejected checks the HTTP answers of CONTRACT.md section 1.1 to
// requests that do not upgrade, and that the server closes the connection.
func TestUpgradeRejected(t *testing.T) {
	gw := startGateway(t)
	host := gw.addr
	tests := []struct {
		name   string
		req    string
		status int
	}{
		{name: "wrong path", req: upgradeRequest(host, "/nope", testKey), status: 404},
		{name: "wrong path, not an upgrade", req: "GET /nope HTTP/1.1\r\nHost: " + host + "\r\n\r\n", status: 404},
		{name: "not an upgrade", req: "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n", status: 400},
		{name: "POST", req: strings.Replace(upgradeRequest(host, "/", testKey), "GET", "POST", 1), status: 400},
		{name: "HTTP/1.0", req: strings.Replace(upgradeRequest(host, "/", testKey), "HTTP/1.1", "HTTP/1.0", 1), status: 400},
		{name: "no key", req: strings.Replace(upgradeRequest(host, "/", testKey), "Sec-WebSocket-Key: "+testKey+"\r\n", "", 1), status: 400},
		{name: "short key", req: upgradeRequest(host, "/", "c2hvcnQ="), status: 400},
		{name: "no Upgrade header", req: strings.Replace(upgradeRequest(host, "/", testKey), "Upgrade: websocket\r\n", "", 1), status: 400},
		{name: "malformed header line", req: "GET / HTTP/1.1\r\nHost: " + host + "\r\nno colon here\r\n\r\n", status: 400},
		{name: "version 8", req: strings.Replace(upgradeRequest(host, "/", testKey), "Version: 13", "Version: 8", 1), status: 426},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, _ := httpExchange(t, gw, tt.req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status == 426 && resp.Header.Get("Sec-WebSocket-Version") != "13" {
				t.Errorf("426 without Sec-WebSocket-Version: 13: %v", resp.Header)
			}
		})
	}
}

// TestUpgradeHeaderCap checks that a request head over MaxHeaderBytes closes
// the connection (with or without a 431 answer), whether or not its end ever
// arrives (CONTRACT.md section 1.1).
func TestUpgradeHeaderCap(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) { c.loop.MaxHeaderBytes = 1024 })
	big := "X-Filler: " + strings.Repeat("f", 2048) + "\r\n"
	tests := []struct {
		name string
		req  string
	}{
		{name: "complete head", req: upgradeRequest(gw.addr, "/", testKey, strings.TrimSuffix(big, "\r\n"))},
		{name: "head never ends", req: "GET / HTTP/1.1\r\nHost: " + gw.addr + "\r\n" + big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialTCP(t, gw)
			conn.SetDeadline(time.Now().Add(readTimeout))
			if _, err := io.WriteString(conn, tt.req); err != nil {
				t.Fatalf("write: %v", err)
			}
			data, err := io.ReadAll(conn)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("want the connection closed, got %v after %q", err, data)
			}
			if len(data) > 0 && !strings.HasPrefix(string(data), "HTTP/1.1 431 ") {
				t.Fatalf("got %q, want a 431 or a plain close", data)
			}
		})
	}
	t.Run("head at the cap is accepted", func(t *testing.T) {
		req := upgradeRequest(gw.addr, "/", testKey, "X-Filler: ")
		req = strings.Replace(req, "X-Filler: ", "X-Filler: "+strings.Repeat("f", 1024-len(req)), 1)
		if len(req) != 1024 {
			t.Fatalf("request is %d bytes", len(req))
		}
		conn := dialTCP(t, gw)
		conn.SetDeadline(time.Now().Add(readTimeout))
		io.WriteString(conn, req)
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 101 {
			t.Fatalf("status %d, want 101", resp.StatusCode)
		}
	})
}

// TestHandshakeTimeout checks that a connection that does not complete its
// upgrade within HandshakeTimeout is closed by the server (slowloris
// protection), also while it keeps trickling bytes, and that an upgraded
// connection outlives the timeout. The timing at the sweep's precision is
// loop's TestHandshakeDeadline; here the timeout is a generous second, so
// that an upgrade on a loaded machine completes well within it, the lower
// bound is measured from before the dial, and the subtests run in parallel.
func TestHandshakeTimeout(t *testing.T) {
	const timeout = time.Second
	gw := startGateway(t, func(c *gwConfig) { c.loop.HandshakeTimeout = timeout })
	tests := []struct {
		name    string
		trickle bool
		first   string
	}{
		{name: "silent"},
		{name: "partial request", first: "GET / HTTP/1.1\r\nHost: x\r\n"},
		{name: "trickle", first: "GET / HTTP/1.1\r\n", trickle: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now() // the server cannot have accepted before
			conn := dialTCP(t, gw)
			if tt.first != "" {
				io.WriteString(conn, tt.first)
			}
			stop := make(chan struct{})
			defer close(stop)
			if tt.trickle {
				go func() {
					tick := time.NewTicker(20 * time.Millisecond) // the client's pace
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							if _, err := io.WriteString(conn, "X: y\r\n"); err != nil {
								return
							}
						}
					}
				}()
			}
			conn.SetReadDeadline(time.Now().Add(readTimeout))
			data, err := io.ReadAll(conn)
			elapsed := time.Since(start)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("want the connection closed by the server, got %v after %s", err, elapsed)
			}
			if len(data) > 0 {
				t.Fatalf("got %q, want a plain close", data)
			}
			if elapsed < timeout {
				t.Fatalf("closed after %s, before the %s handshake timeout", elapsed, timeout)
			}
		})
	}
	t.Run("upgraded connection outlives the timeout", func(t *testing.T) {
		t.Parallel()
		c := dial(t, gw)
		// Nothing may arrive for twice the timeout: the server's close, or
		// the end of the connection, would.
		for start := time.Now(); time.Since(start) < 2*timeout; {
			c.expectNoMessage()
		}
		c.echo()
	})
}

// TestPermessageDeflateDeclined checks that a permessage-deflate offer is
// accepted as an upgrade without negotiating the extension, so frames stay
// uncompressed (and RSV1 stays a protocol error).
func TestPermessageDeflateDeclined(t *testing.T) {
	gw := startGateway(t)
	c, resp := dialResp(t, gw, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
	if v, ok := resp.Header["Sec-Websocket-Extensions"]; ok {
		t.Fatalf("response negotiates extensions %q", v)
	}
	if v := resp.Header.Get("Sec-WebSocket-Protocol"); v != "" {
		t.Fatalf("response selects subprotocol %q", v)
	}
	c.echo()
	c.write(frame(true, ws.OpText, []byte(`{}`), true, ws.Rsv(true, false, false)))
	c.expectClose(ws.StatusProtocolError)
}

// TestFramesPipelinedWithUpgrade checks that frames sent in the same write as
// the upgrade request are served.
func TestFramesPipelinedWithUpgrade(t *testing.T) {
	gw := startGateway(t)
	conn := dialTCP(t, gw)
	conn.SetDeadline(time.Now().Add(readTimeout))
	b := []byte(upgradeRequest(gw.addr, "/", testKey))
	b = append(b, textFrame(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"p":1}}`)...)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	c := &client{t: t, conn: conn, br: br}
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"p":1}}`)
}

// TestPartialHandshakeDoesNotBlock checks that connections stuck in the middle
// of their upgrade request do not hold up other connections on the same
// event loops (CONTRACT.md section 1.1: the upgrade never blocks the loop).
func TestPartialHandshakeDoesNotBlock(t *testing.T) {
	gw := startGateway(t)
	for range 4 {
		conn := dialTCP(t, gw)
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: webso"); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		dial(t, gw).echo()
	}
}
