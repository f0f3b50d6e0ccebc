package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/openengine/edge/internal/poll"
)

// upgradeWith sends a WebSocket upgrade with an Authorization header to the
// ws:// URL and returns the HTTP status.
func upgradeWith(t *testing.T, wsURL, token string) int {
	t.Helper()
	host := strings.TrimSuffix(strings.TrimPrefix(wsURL, "ws://"), "/")
	conn, err := net.DialTimeout("tcp", host, readTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "GET / HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: ZWRnZS1lMmUta2V5LTE2Yg==\r\nSec-WebSocket-Version: 13\r\n"
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestAuthTokensFileAndSIGHUP: --auth-tokens turns authentication on (401
// without a listed token, 101 with one); SIGHUP reloads the file: a new
// token works, a removed one is refused, and a connection opened with the
// old token keeps its identity and is still served; a file that fails to
// load keeps the previous tokens.
func TestAuthTokensFileAndSIGHUP(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# subjects and tokens\nalice tok-alice-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--auth-tokens", file)
	if got := upgradeWith(t, e.ws, ""); got != 401 {
		t.Fatalf("no token: %d, want 401", got)
	}
	if got := upgradeWith(t, e.ws, "tok-alice-1"); got != 101 {
		t.Fatalf("listed token: %d, want 101", got)
	}
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer tok-alice-1"}}), Timeout: readTimeout}
	conn, _, _, err := d.Dial(context.Background(), e.ws)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	if err := os.WriteFile(file, []byte("bob tok-bob-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, edgeWait, "the new token accepted after SIGHUP", func() (bool, string) {
		got := upgradeWith(t, e.ws, "tok-bob-2")
		return got == 101, http.StatusText(got)
	})
	if got := upgradeWith(t, e.ws, "tok-alice-1"); got != 401 {
		t.Fatalf("removed token after reload: %d, want 401", got)
	}
	if err := wsutil.WriteClientText(conn, []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/whoami","params":{}}`)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(readTimeout))
	answer, err := wsutil.ReadServerText(conn)
	if err != nil || !strings.Contains(string(answer), `"subject":"alice"`) {
		t.Fatalf("open connection after reload: %s %v, want subject alice still served", answer, err)
	}

	if err := os.WriteFile(file, []byte("broken-line-without-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, edgeWait, "the failed reload logged", func() (bool, string) {
		logs := e.stderr.String()
		return strings.Contains(logs, "kept the previous keys"), logs
	})
	if got := upgradeWith(t, e.ws, "tok-bob-2"); got != 101 {
		t.Fatalf("after a failed reload: %d, want the previous tokens kept (101)", got)
	}
	if strings.Contains(e.stderr.String(), "tok-") {
		t.Fatalf("a token is in the logs:\n%s", e.stderr.String())
	}
}
