package test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/upstream"
)

// greetingUpstream is a JSON-RPC server over WebSocket that sends a
// notification in the same segment as its 101, then answers every request
// with its params as the result. It returns the ws:// URL.
func greetingUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveGreeting(c)
		}
	}()
	return "ws://" + ln.Addr().String() + "/"
}

func serveGreeting(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		acceptKey(req.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n"
	out := []byte(resp)
	greeting := []byte(`{"jsonrpc":"2.0","method":"hello","params":{}}`)
	out = append(out, ws.MustCompileFrame(ws.NewTextFrame(greeting))...)
	if _, err := c.Write(out); err != nil { // the 101 and the greeting in one segment
		return
	}
	rw := struct {
		io.Reader
		io.Writer
	}{br, c}
	for {
		msg, err := wsutil.ReadClientText(rw)
		if err != nil {
			return
		}
		m, ok := codec.ParseMessage(msg)
		if !ok || m.ID == nil {
			continue
		}
		ans := append([]byte(`{"jsonrpc":"2.0","id":`), m.ID...)
		ans = append(append(append(ans, `,"result":`...), m.Params...), '}')
		if err := wsutil.WriteServerText(c, ans); err != nil {
			return
		}
	}
}

// TestUpstreamGreetingDropped: a WebSocket upstream that greets with a
// notification sent together with its 101 is connected to, the greeting
// dropped, and calls are answered (the dial used to fail whenever the
// greeting was read with the handshake).
func TestUpstreamGreetingDropped(t *testing.T) {
	p := startProxy(t, upstream.Config{Conns: 1}, []string{"g=" + greetingUpstream(t)})
	c := dial(t, p.gateway)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"hi":1}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"hi":1}}`)
}
