package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// start runs the peer on 127.0.0.1:0 with extra flags and returns its
// address; the peer is stopped (and must return nil) when the test ends.
func start(t *testing.T, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := append([]string{"--listen", "127.0.0.1:0"}, extra...)
	go func() { done <- run(ctx, args, pw, io.Discard) }()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, pr) // anything more on stdout is a failure below
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
	return dialURL(t, websocket.Dialer{HandshakeTimeout: 5 * time.Second}, "ws://"+addr+"/")
}

func dialURL(t *testing.T, d websocket.Dialer, url string) *websocket.Conn {
	t.Helper()
	ws, _, err := d.Dial(url, nil)
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

func expect(t *testing.T, ws *websocket.Conn, want string) {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	typ, got, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("read, want %s: %v", want, err)
	}
	if typ != websocket.TextMessage || string(got) != want {
		t.Fatalf("got (%d) %s\nwant %s", typ, got, want)
	}
}

func TestEchoAndFanOut(t *testing.T) {
	addr := start(t)
	a, b := dial(t, addr), dial(t, addr)

	// Params come back byte for byte, whitespace included.
	send(t, a, `{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"a": [1, 2.50], "s":"x"}}`)
	expect(t, a, `{"jsonrpc":"2.0","id":1,"result":{"a": [1, 2.50], "s":"x"}}`)

	send(t, a, `{"jsonrpc":"2.0","id":2,"method":"edge/topic","params":{"name":"t"}}`)
	expect(t, a, `{"jsonrpc":"2.0","id":2,"result":{"subscriptionId":"s1"}}`)

	send(t, b, `{"jsonrpc":"2.0","id":"p","method":"edge/publish","params":{"name":"t","data":{"k":1}}}`)
	expect(t, a, `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","seq":1,"data":{"k":1}}}`)
	expect(t, b, `{"jsonrpc":"2.0","id":"p","result":{"delivered":1}}`)

	send(t, b, `{"jsonrpc":"2.0","id":3,"method":"nope","params":{}}`)
	expect(t, b, `{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Method not found"}}`)
}

// TestTLS serves wss:// with --tls-cert and --tls-key (the certificate of
// net/http/httptest, written to files) and answers an echo over it; a
// plain ws:// client gets no upgrade.
func TestTLS(t *testing.T) {
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	kp := ts.TLS.Certificates[0]
	ts.Close()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	kder, err := x509.MarshalPKCS8PrivateKey(kp.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := start(t, "--tls-cert", cert, "--tls-key", key)
	ws := dialURL(t, websocket.Dialer{HandshakeTimeout: 5 * time.Second,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, "wss://"+addr+"/")
	send(t, ws, `{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":[1]}`)
	expect(t, ws, `{"jsonrpc":"2.0","id":1,"result":[1]}`)
	if c, _, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws://"+addr+"/", nil); err == nil {
		c.Close()
		t.Fatal("a ws:// client was upgraded by the wss:// server")
	}
}

// TestTLSFlags: --tls-cert without --tls-key, and unreadable files, are
// errors before the listening line.
func TestTLSFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--tls-cert", "x.pem"},
		{"--tls-key", "x.pem"},
		{"--tls-cert", filepath.Join(t.TempDir(), "none.pem"), "--tls-key", filepath.Join(t.TempDir(), "none.pem")},
	} {
		var out strings.Builder
		err := run(context.Background(), append([]string{"--listen", "127.0.0.1:0"}, args...), &out, io.Discard)
		if err == nil || out.Len() > 0 {
			t.Errorf("%v: err %v, stdout %q", args, err, out.String())
		}
	}
}
