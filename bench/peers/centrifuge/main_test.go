package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// start runs the peer on 127.0.0.1:0 and returns its address; the peer is
// stopped (and must return nil) when the test ends.
func start(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--listen", "127.0.0.1:0"}, pw, io.Discard) }()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, pr)
	}()
	var line string
	select {
	case line = <-lines:
	case err := <-done:
		t.Fatalf("run returned before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no listening line within 10s")
	}
	addr, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "listening ")
	if !ok || addr == "" {
		t.Fatalf("first stdout line %q, want \"listening <host:port>\"", line)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return within 10s of cancel")
		}
		pw.Close()
	})
	return addr
}

func dial(t *testing.T, addr string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial("ws://"+addr+"/", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

func send(t *testing.T, ws *websocket.Conn, msg string) {
	t.Helper()
	ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatalf("write %s: %v", msg, err)
	}
}

// conn is a client connection that yields one JSON message at a time,
// splitting frames on '\n' as centrifuge's JSON protocol requires.
type conn struct {
	ws      *websocket.Conn
	pending []string
}

func (c *conn) read(t *testing.T) string {
	t.Helper()
	for len(c.pending) == 0 {
		c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		typ, got, err := c.ws.ReadMessage()
		if err != nil || typ != websocket.TextMessage {
			t.Fatalf("read: type %d, err %v", typ, err)
		}
		for _, m := range strings.Split(string(got), "\n") {
			if m != "" {
				c.pending = append(c.pending, m)
			}
		}
	}
	m := c.pending[0]
	c.pending = c.pending[1:]
	return m
}

func (c *conn) expect(t *testing.T, want string) {
	t.Helper()
	if got := c.read(t); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// connect dials and sends the connect command every centrifuge client
// starts with.
func connect(t *testing.T, addr string) *conn {
	t.Helper()
	c := &conn{ws: dial(t, addr)}
	send(t, c.ws, `{"id":1,"connect":{}}`)
	var reply struct {
		ID      int `json:"id"`
		Connect struct {
			Client string `json:"client"`
			Ping   int    `json:"ping"`
			Pong   bool   `json:"pong"`
		} `json:"connect"`
	}
	msg := c.read(t)
	if err := json.Unmarshal([]byte(msg), &reply); err != nil || reply.ID != 1 || reply.Connect.Client == "" {
		t.Fatalf("connect reply %s", msg)
	}
	t.Logf("connect reply %s", msg)
	return c
}

func TestEchoAndFanOut(t *testing.T) {
	addr := start(t)
	a, b := connect(t, addr), connect(t, addr)

	send(t, a.ws, `{"id":2,"rpc":{"method":"echo","data":{"a": [1, 2.50], "s":"x"}}}`)
	a.expect(t, `{"id":2,"rpc":{"data":{"a": [1, 2.50], "s":"x"}}}`)

	send(t, a.ws, `{"id":3,"subscribe":{"channel":"t"}}`)
	a.expect(t, `{"id":3,"subscribe":{}}`)

	send(t, b.ws, `{"id":4,"publish":{"channel":"t","data":{"k":1}}}`)
	a.expect(t, `{"push":{"channel":"t","pub":{"data":{"k":1}}}}`)
	b.expect(t, `{"id":4,"publish":{}}`)

	send(t, b.ws, `{"id":5,"rpc":{"method":"nope","data":{}}}`)
	b.expect(t, `{"id":5,"error":{"code":104,"message":"method not found"}}`)
}
