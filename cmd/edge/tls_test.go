package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testcert"
)

// writeCert writes c's PEM files to cert and key.
func writeCert(t *testing.T, c *testcert.Cert, cert, key string) {
	t.Helper()
	if err := os.WriteFile(cert, c.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, c.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

// servedCert handshakes with addr trusting the pool of cfg and returns the
// common name of the certificate served.
func servedCert(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: readTimeout}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// echoOn sends edge/echo on a WebSocket and checks the answer.
func echoOn(t *testing.T, conn io.ReadWriter, n string) {
	t.Helper()
	if err := wsutil.WriteClientText(conn, []byte(`{"jsonrpc":"2.0","id":`+n+`,"method":"edge/echo","params":{"n":`+n+`}}`)); err != nil {
		t.Fatal(err)
	}
	answer, err := wsutil.ReadServerText(conn)
	if want := `{"jsonrpc":"2.0","id":` + n + `,"result":{"n":` + n + `}}`; err != nil || string(answer) != want {
		t.Fatalf("echo: %s %v, want %s", answer, err, want)
	}
}

// TestTLSCertReloadOnSIGHUP: --tls-cert and --tls-key serve wss://; after
// SIGHUP a new client gets the new certificate while a connection opened
// before keeps working; a pair that fails to load keeps the previous one
// and is logged.
func TestTLSCertReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first, second := testcert.New(t, "first"), testcert.New(t, "second")
	writeCert(t, first, certFile, keyFile)
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1", "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.Contains(e.stderr.String(), "url=wss://") {
		t.Fatalf("the listening line does not say wss://:\n%s", e.stderr.String())
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(e.ws, "ws://"), "/")
	both := first.ClientConfig()
	both.RootCAs.AppendCertsFromPEM(second.CertPEM)
	if got := servedCert(t, addr, both); got != "first" {
		t.Fatalf("served %q, want first", got)
	}
	d := ws.Dialer{TLSConfig: both, Timeout: readTimeout}
	conn, _, _, err := d.Dial(context.Background(), "wss://"+addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(readTimeout))
	echoOn(t, conn, "1")

	writeCert(t, second, certFile, keyFile)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, edgeWait, "the new certificate served after SIGHUP", func() (bool, string) {
		got := servedCert(t, addr, both)
		return got == "second", "served " + got
	})
	conn.SetDeadline(time.Now().Add(readTimeout))
	echoOn(t, conn, "2") // the connection opened before the reload

	if err := os.WriteFile(keyFile, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, edgeWait, "the failed reload logged", func() (bool, string) {
		logs := e.stderr.String()
		return strings.Contains(logs, "kept the previous keys") && strings.Contains(logs, "tls-key"), logs
	})
	if got := servedCert(t, addr, both); got != "second" {
		t.Fatalf("after a failed reload: served %q, want second kept", got)
	}
}

// TestTLSFlagsRefused: --tls-cert without --tls-key (and the reverse) and
// unreadable files are refused before anything starts.
func TestTLSFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	writeCert(t, testcert.New(t, "x"), cert, key)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", cert}, "tls-cert and tls-key go together"},
		{[]string{"--tls-key", key}, "tls-cert and tls-key go together"},
		{[]string{"--tls-cert", cert, "--tls-key", filepath.Join(dir, "missing.pem")}, "missing.pem"},
		{[]string{"--tls-cert", key, "--tls-key", key}, "tls-cert"},
		{[]string{"--handshake-pool", "-1"}, "handshake-pool"},
	} {
		err := run(t.Context(), append([]string{"--listen", "127.0.0.1:0"}, tt.args...), strings.NewReader(""), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("edge %q: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}
