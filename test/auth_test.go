package test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/openengine/edge/auth"
)

// fakeVerifier accepts the tokens it lists. An identity with a lifetime
// expires that long after its Verify. (auth's own tests cover real tokens
// and JWTs; this one is about what the gateway does with an identity.)
type fakeVerifier struct {
	mu     sync.Mutex
	tokens map[string]fakeIdentity
}

type fakeIdentity struct {
	subject  string
	lifetime time.Duration // 0: never expires
}

func (v *fakeVerifier) Verify(token string) (auth.Identity, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, ok := v.tokens[token]
	if !ok {
		return auth.Identity{}, auth.ErrInvalid
	}
	id := auth.Identity{Subject: f.subject}
	if f.lifetime > 0 {
		id.Expires = time.Now().Add(f.lifetime)
	}
	return id, nil
}

// TestBearerAuth: with authentication on, edge/whoami tells the subject,
// the expiry and the client's address (CONTRACT.md section 11.3), and the
// token never appears in the logs, whether it came in the header or the
// query parameter. The statuses of the upgrade are rows of
// TestHandshakeMatrix.
func TestBearerAuth(t *testing.T) {
	v := &fakeVerifier{tokens: map[string]fakeIdentity{"s3cr3t-token": {subject: "alice"}}}
	gw := startGateway(t, func(c *gwConfig) {
		c.loop.Auth = v
		c.loop.AuthQueryParam = "access_token"
	})
	conn := dialTCP(t, gw)
	key := "ZWRnZS1lMmUta2V5LTE2Yg=="
	if _, err := conn.Write([]byte(upgradeRequest(gw.addr, "/?access_token=s3cr3t-token", key))); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	conn.SetReadDeadline(time.Now().Add(readTimeout))
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "HTTP/1.1 101" {
		t.Fatalf("query parameter token: got %q %v, want HTTP/1.1 101", buf, err)
	}

	c, _ := dialResp(t, gw, "Authorization: Bearer s3cr3t-token")
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/whoami","params":{}}`)
	got := c.readText()
	want := `{"jsonrpc":"2.0","id":1,"result":{"subject":"alice","expiresAt":null,"remote":"` + c.conn.LocalAddr().String() + `"}}`
	if got != want {
		t.Fatalf("edge/whoami: got %s, want %s", got, want)
	}
	if strings.Contains(gw.logs.String(), "s3cr3t") {
		t.Fatalf("the token is in the logs:\n%s", gw.logs)
	}
}

// TestIdentityExpiry4401: a connection whose identity expires is closed
// with 4401 "connection identity expired" by the first text frame at or
// after the expiry, and that frame reaches no backend (CONTRACT.md section
// 11.3). Long timeouts keep the liveness sweep at its slowest (once a
// second): the frame comes right after the expiry, so the close is the
// frame's; a frame that reached the backend would leave a call waiting on
// the gate.
func TestIdentityExpiry4401(t *testing.T) {
	const life = 300 * time.Millisecond
	v := &fakeVerifier{tokens: map[string]fakeIdentity{"short": {subject: "bob", lifetime: life}}}
	gw := startGateway(t, func(c *gwConfig) {
		c.loop.Auth = v
		c.loop.CloseTimeout, c.loop.HandshakeTimeout = 80*time.Second, 80*time.Second
		c.loop.PingInterval, c.loop.PongTimeout = 80*time.Second, 80*time.Second
		c.loop.WriteStallTimeout = 80 * time.Second
	})
	c, _ := dialResp(t, gw, "Authorization: Bearer short")
	expiry := time.Now().Add(life)
	c.echo() // served before the expiry
	for time.Now().Before(expiry.Add(10 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond) // the clock passing the expiry is the scenario, not an effect
	}
	c.sendText(gate("1", "after-expiry"))
	if reason := c.expectClose(4401); reason != "connection identity expired" {
		t.Fatalf("close reason %q", reason)
	}
	if n := gw.mem.Waiting("after-expiry"); n != 0 {
		t.Fatalf("%d calls reached the backend after the identity expired", n)
	}
}

// TestIdleIdentityExpiry4401: an idle connection whose identity expired is
// closed with 4401 by the liveness sweep (CONTRACT.md section 11.3).
func TestIdleIdentityExpiry4401(t *testing.T) {
	v := &fakeVerifier{tokens: map[string]fakeIdentity{"short": {subject: "bob", lifetime: 200 * time.Millisecond}}}
	gw := startGateway(t, func(c *gwConfig) { c.loop.Auth = v })
	idle, _ := dialResp(t, gw, "Authorization: Bearer short")
	if reason := idle.expectClose(4401); reason != "connection identity expired" {
		t.Fatalf("close reason %q", reason)
	}
}

// TestRateLimit: with --rate-limit 1 (burst 2) a burst of 30 requests gets
// exactly 2 answers and 28 RATE_LIMITED refusals that reach no backend;
// after --rate-limit-close-after refusals in a row the connection is closed
// with 1008 "rate limit exceeded" (CONTRACT.md section 11.4). One message a
// second refills the bucket, far slower than the test sends.
func TestRateLimit(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) {
		c.loop.RateLimit, c.loop.RateCloseAfter = 1, 31
	})
	c := dial(t, gw)
	var burst []byte
	for i := range 30 {
		burst = append(burst, textFrame(`{"jsonrpc":"2.0","id":`+strconv.Itoa(i)+`,"method":"edge/echo","params":{}}`)...)
	}
	c.write(burst)
	ok, limited := 0, 0
	for range 30 {
		switch msg := c.readText(); {
		case strings.Contains(msg, `"result":{}`):
			ok++
		case strings.Contains(msg, `{"code":-32000,"message":"Rate limited","data":{"code":"RATE_LIMITED"}}`):
			limited++
		default:
			t.Fatalf("unexpected %s", msg)
		}
	}
	if ok != 2 || limited != 28 {
		t.Fatalf("%d answered, %d rate limited; want 2 and 28", ok, limited)
	}
	// 28 refusals in a row so far; 3 more close the connection (31).
	burst = burst[:0]
	for i := range 3 {
		burst = append(burst, textFrame(`{"jsonrpc":"2.0","id":"x`+strconv.Itoa(i)+`","method":"edge/echo","params":{}}`)...)
	}
	c.write(burst)
	for range 3 {
		if msg := c.readText(); !strings.Contains(msg, "RATE_LIMITED") {
			t.Fatalf("got %s, want RATE_LIMITED", msg)
		}
	}
	if reason := c.expectClose(1008); reason != "rate limit exceeded" {
		t.Fatalf("close reason %q", reason)
	}
}

// TestLeewayAppliesToConnection: a JWT whose exp passed less than
// --jwt-leeway ago is accepted at the upgrade, and its connection is then
// served, not closed 4401 by its first frame: the identity expires at exp
// plus the leeway, which edge/whoami reports.
func TestLeewayAppliesToConnection(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	v := jwtVerifier(t, map[string][]byte{"ed.pem": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})})
	gw := startGateway(t, func(c *gwConfig) { c.loop.Auth = v })
	exp := time.Now().Add(-2 * time.Second).Truncate(time.Second)
	tok := token(t, jwt.SigningMethodEdDSA, priv, "", func(c jwt.MapClaims) { c["exp"] = exp.Unix() })
	c := dial(t, gw, "Authorization: Bearer "+tok)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/whoami","params":{}}`)
	want := `"expiresAt":"` + exp.Add(auth.DefaultLeeway).UTC().Format(time.RFC3339) + `"`
	if got := c.readText(); !strings.Contains(got, want) {
		t.Fatalf("edge/whoami %s, want %s", got, want)
	}
	c.echo()
}
