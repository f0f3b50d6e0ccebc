package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
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
	"github.com/golang-jwt/jwt/v5"

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

// rsaPublic is a new RSA key and its public key as PKIX DER and as PEM.
func rsaPublic(t *testing.T) (key *rsa.PrivateKey, der, pemData []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err = x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return key, der, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// TestJWTKeyFileNotAnHMACSecret is issue 20 item 1: --jwt-key used to tell
// a file's kind by its content, and a file that was neither valid JSON nor
// PEM became an HMAC secret. An IdP's public key saved as DER, or a JWKS
// with one stray comma, is public: anyone could sign an HS256 token with
// its bytes, and the upgrade of that forged token, sub=admin, got 101. And
// the start-up error without --jwt-alg told the operator to add exactly
// --jwt-alg, which opened the hole. Now --jwt-key takes public keys only:
// such a file is a start-up error naming it and saying what it looks like,
// and the error never suggests --jwt-alg.
func TestJWTKeyFileNotAnHMACSecret(t *testing.T) {
	dir := t.TempDir()
	rsaKey, der, _ := rsaPublic(t)
	enc := base64.RawURLEncoding.EncodeToString
	// One stray comma after the last key: invalid JSON.
	strayComma := []byte(`{"keys":[{"kty":"RSA","kid":"k1","n":"` + enc(rsaKey.N.Bytes()) + `","e":"AQAB"},]}`)
	for _, tt := range []struct {
		name string
		data []byte
		alg  bool // also --jwt-alg HS256, as the old error advised
		want string
	}{
		{"DER public key with --jwt-alg", der, true, "looks like DER"},
		{"DER public key", der, false, "looks like DER"},
		{"JWKS with a stray comma with --jwt-alg", strayComma, true, fmt.Sprintf("invalid JSON at offset %d", bytes.Index(strayComma, []byte("]}"))+1)},
		{"JWKS with a stray comma", strayComma, false, "invalid JSON at offset"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			if err := os.WriteFile(file, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--listen", "127.0.0.1:0", "--loops", "1", "--jwt-key", file}
			if tt.alg {
				args = append(args, "--jwt-alg", "HS256")
			}
			e, err := tryEdge(t, args...)
			if e != nil {
				forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
					"sub": "admin", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(tt.data)
				if err != nil {
					t.Fatal(err)
				}
				t.Fatalf("edge started with a public key file as --jwt-key; a token forged with its bytes as an HS256 secret, sub=admin, gets %d",
					upgradeWith(t, e.ws, forged))
			}
			msg := err.Error()
			if !strings.Contains(msg, file) || !strings.Contains(msg, tt.want) {
				t.Fatalf("start-up error %q: want one naming %s and saying %q", msg, file, tt.want)
			}
			if strings.Contains(msg, "jwt-alg") && !strings.Contains(msg, "jwt-hmac-key") {
				t.Fatalf("start-up error %q advises --jwt-alg for a public key file", msg)
			}
		})
	}
}

// TestEdgeConfigJWTKeyPaths: `edge config` prints the key files' paths,
// never their content, for both key flags (set on the command line and as
// an EDGE_ list), and refuses a public key file given as DER as edge does.
func TestEdgeConfigJWTKeyPaths(t *testing.T) {
	dir := t.TempDir()
	_, der, pubPEM := rsaPublic(t)
	const secret = "hmac-secret-in-no-output-0123456789"
	files := map[string][]byte{"pub.pem": pubPEM, "one.secret": []byte(secret), "two.secret": []byte(secret + "-2"), "pub.der": der}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	var out bytes.Buffer
	err := runConfig([]string{"--jwt-key", p("pub.pem"), "--jwt-alg", "HS256"},
		[]string{`EDGE_JWT_HMAC_KEY=["` + p("one.secret") + `", "` + p("two.secret") + `"]`}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		fmt.Sprintf("jwt-key = [%q]", p("pub.pem")),
		fmt.Sprintf("jwt-hmac-key = [%q, %q]  # from EDGE_JWT_HMAC_KEY", p("one.secret"), p("two.secret")),
		`jwt-alg = "HS256"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("edge config lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "hmac-secret") || strings.Contains(got, "BEGIN") || strings.Contains(got, string(pubPEM[30:60])) {
		t.Errorf("edge config prints a key's content:\n%s", got)
	}

	out.Reset()
	err = runConfig([]string{"--jwt-key", p("pub.der")}, nil, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), p("pub.der")+": looks like DER") || out.Len() > 0 {
		t.Errorf("edge config --jwt-key DER: error %v, printed %q", err, out.String())
	}
}

// TestJWTKeysSIGHUP: SIGHUP reloads --jwt-key and --jwt-hmac-key as their
// flags say: a public key file replaced by the same key as DER, and an HMAC
// secret replaced by a PEM key, each fail the reload, which is logged
// naming the file, and the previous keys stay; a new secret then replaces
// the old one, and the public key keeps working.
func TestJWTKeysSIGHUP(t *testing.T) {
	dir := t.TempDir()
	rsaKey, der, pubPEM := rsaPublic(t)
	pubFile, secretFile := filepath.Join(dir, "pub.pem"), filepath.Join(dir, "secret")
	write := func(path string, data []byte) {
		t.Helper()
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	oldSecret, newSecret := []byte("first-secret-of-at-least-32-bytes"), []byte("second-secret-of-at-least-32-byte")
	write(pubFile, pubPEM)
	write(secretFile, oldSecret)
	e := startEdge(t, "--listen", "127.0.0.1:0", "--loops", "1",
		"--jwt-key", pubFile, "--jwt-hmac-key", secretFile, "--jwt-alg", "HS256")
	sign := func(m jwt.SigningMethod, key any) string {
		t.Helper()
		s, err := jwt.NewWithClaims(m, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rs, hsOld, hsNew := sign(jwt.SigningMethodRS256, rsaKey), sign(jwt.SigningMethodHS256, oldSecret), sign(jwt.SigningMethodHS256, newSecret)
	expect := func(when string, want map[string]int) {
		t.Helper()
		for name, tok := range map[string]string{"RS256": rs, "HS256 old secret": hsOld, "HS256 new secret": hsNew} {
			if got := upgradeWith(t, e.ws, tok); got != want[name] {
				t.Fatalf("%s: %s token: %d, want %d", when, name, got, want[name])
			}
		}
	}
	before := map[string]int{"RS256": 101, "HS256 old secret": 101, "HS256 new secret": 401}
	expect("at start", before)

	hup := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	for i, bad := range []struct {
		path string
		data []byte
		want string
	}{
		{pubFile, der, "--jwt-key " + pubFile + ": looks like DER"},
		{secretFile, pubPEM, "--jwt-hmac-key " + secretFile + ": contains a PEM block"},
	} {
		prev, err := os.ReadFile(bad.path)
		if err != nil {
			t.Fatal(err)
		}
		write(bad.path, bad.data)
		hup()
		poll.Until(t, edgeWait, "the failed reload logged", func() (bool, string) {
			logs := e.stderr.String()
			return strings.Count(logs, "kept the previous keys") == i+1 && strings.Contains(logs, bad.want), logs
		})
		expect("after a failed reload", before)
		write(bad.path, prev)
	}

	write(secretFile, newSecret)
	hup()
	poll.Until(t, edgeWait, "the new secret accepted after SIGHUP", func() (bool, string) {
		got := upgradeWith(t, e.ws, hsNew)
		return got == 101, http.StatusText(got)
	})
	expect("after the reload", map[string]int{"RS256": 101, "HS256 old secret": 401, "HS256 new secret": 101})
	if logs := e.stderr.String(); strings.Contains(logs, "secret-of") {
		t.Fatalf("a secret is in the logs:\n%s", logs)
	}
}
