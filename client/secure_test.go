package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/auth"
	"github.com/openengine/edge/client"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testcert"
	"github.com/openengine/edge/loop"
)

// closeCount is how many connections of gw ended with the close code label.
func closeCount(gw *gateway, label string) uint64 {
	st := gw.srv.Stats(waitTimeout)
	for i := range st.Closes {
		if loop.CloseCodeLabel(i) == label {
			return st.Closes[i]
		}
	}
	return 0
}

// TestCloseIsNormalClosure: Close ends a WebSocket connection with close code
// 1000, which the gateway counts as a normal close, not as 1006 (no close
// frame), as it counted every CLI call before.
func TestCloseIsNormalClosure(t *testing.T) {
	gw := startGateway(t)
	for range 3 {
		c := gw.dial("ws", nil)
		if err := call(t, c, "edge/echo", map[string]any{"x": 1}, nil); err != nil {
			t.Fatalf("edge/echo: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	poll.Until(t, waitTimeout, "three closes counted", func() (bool, string) {
		n, abnormal := closeCount(gw, "1000"), closeCount(gw, "1006")
		return n+abnormal == 3, fmt.Sprintf("1000: %d, 1006: %d", n, abnormal)
	})
	if n := closeCount(gw, "1006"); n != 0 {
		t.Fatalf("%d closes counted 1006 (no close frame), want every one 1000", n)
	}
}

// TestCloseBoundedWithoutServerClose: a server that never answers the close
// frame holds Close for CloseTimeout at most.
func TestCloseBoundedWithoutServerClose(t *testing.T) {
	watchdog(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		if _, err := ws.Upgrade(conn); err != nil {
			conn.Close()
			return
		}
		held <- conn // upgraded, then silent: reads nothing, answers nothing
	}()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := client.Dial(ctx, "ws://"+ln.Addr().String()+"/", &client.Options{CloseTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	conn := recv(t, held, "the upgraded connection")
	defer conn.Close()
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	recv(t, done, "Close on a server that never answers the close frame")
	waitDone(t, c)
}

// TestWSSWithToken: wss:// with a CA the client trusts and a bearer token;
// without the token the upgrade is refused, and no error ever shows a token,
// from the header or from the URL's query.
func TestWSSWithToken(t *testing.T) {
	cert := testcert.New(t, "edge-test")
	const token = "s3cret-token-value"
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("alice "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, func(c *gwConfig) {
		c.loop = func(l *loop.Config) {
			l.TLS = cert.ServerConfig()
			l.Auth = v
		}
	})
	url := strings.Replace(gw.wsURL, "ws://", "wss://", 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	c, err := client.Dial(ctx, url, &client.Options{TLSConfig: cert.ClientConfig(), Token: token})
	if err != nil {
		t.Fatalf("Dial %s with the token: %v", url, err)
	}
	var who struct {
		Subject string `json:"subject"`
	}
	if err := call(t, c, "edge/whoami", nil, &who); err != nil || who.Subject != "alice" {
		t.Fatalf("edge/whoami = %+v, %v; want subject alice", who, err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	for _, tc := range []struct {
		name string
		url  string
		opts client.Options
	}{
		{"no token", url, client.Options{TLSConfig: cert.ClientConfig()}},
		{"wrong token", url, client.Options{TLSConfig: cert.ClientConfig(), Token: token + "x"}},
		{"token in query", url + "?token=" + token + "x", client.Options{TLSConfig: cert.ClientConfig()}},
		{"untrusted certificate", url, client.Options{Token: token}},
	} {
		c, err := client.Dial(ctx, tc.url, &tc.opts)
		if err == nil {
			c.Close()
			t.Fatalf("%s: Dial succeeded, want a refusal", tc.name)
		}
		if strings.Contains(err.Error(), token) {
			t.Fatalf("%s: the error shows the token: %v", tc.name, err)
		}
		if tc.name != "untrusted certificate" && !errors.Is(err, ws.StatusError(401)) {
			t.Fatalf("%s: %v, want the upgrade refused 401", tc.name, err)
		}
	}
}
