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

func read(t *testing.T, ws *websocket.Conn) string {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	typ, got, err := ws.ReadMessage()
	if err != nil || typ != websocket.TextMessage {
		t.Fatalf("read: type %d, err %v", typ, err)
	}
	return string(got)
}

func expect(t *testing.T, ws *websocket.Conn, want string) {
	t.Helper()
	if got := read(t, ws); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestEchoAndFanOut(t *testing.T) {
	addr := start(t)
	a, b := dial(t, addr), dial(t, addr)

	send(t, a, `{"jsonrpc":"2.0","id":1,"method":"edge_echo","params":[{"a": [1, 2.50], "s":"x"}]}`)
	expect(t, a, `{"jsonrpc":"2.0","id":1,"result":{"a": [1, 2.50], "s":"x"}}`)

	send(t, a, `{"jsonrpc":"2.0","id":2,"method":"edge_subscribe","params":["topic","t"]}`)
	var sub struct {
		ID     int    `json:"id"`
		Result string `json:"result"`
	}
	if msg := read(t, a); json.Unmarshal([]byte(msg), &sub) != nil || sub.ID != 2 || !strings.HasPrefix(sub.Result, "0x") {
		t.Fatalf("subscribe reply %s", msg)
	}

	send(t, b, `{"jsonrpc":"2.0","id":3,"method":"edge_publish","params":["t",{"k":1}]}`)
	expect(t, a, `{"jsonrpc":"2.0","method":"edge_subscription","params":{"subscription":"`+sub.Result+`","result":{"k":1}}}`)
	expect(t, b, `{"jsonrpc":"2.0","id":3,"result":1}`)

	send(t, a, `{"jsonrpc":"2.0","id":4,"method":"edge_unsubscribe","params":["`+sub.Result+`"]}`)
	expect(t, a, `{"jsonrpc":"2.0","id":4,"result":true}`)
}
