package test

import (
	"strings"
	"sync"
	"testing"
	"time"

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

// TestBearerAuth: with authentication on, an upgrade without a token or
// with a wrong one gets 401 with WWW-Authenticate: Bearer; a valid token
// in the Authorization header, or in the configured query parameter,
// upgrades, and edge/whoami tells the subject, the expiry and the client's
// address (CONTRACT.md section 11.3). The token never appears in the logs.
func TestBearerAuth(t *testing.T) {
	v := &fakeVerifier{tokens: map[string]fakeIdentity{"s3cr3t-token": {subject: "alice"}}}
	gw := startGateway(t, func(c *gwConfig) {
		c.loop.Auth = v
		c.loop.AuthQueryParam = "access_token"
	})
	for _, tt := range []struct {
		name   string
		header []string
		want   int
	}{
		{"no token", nil, 401},
		{"wrong token", []string{"Authorization: Bearer nope"}, 401},
		{"not bearer", []string{"Authorization: Basic s3cr3t-token"}, 401},
		{"header", []string{"Authorization: Bearer s3cr3t-token"}, 101},
		{"header, scheme case", []string{"Authorization: bearer s3cr3t-token"}, 101},
	} {
		_, _, resp, _ := sendUpgrade(t, gw, tt.header...)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
		if tt.want == 401 && resp.Header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("%s: WWW-Authenticate %q, want Bearer", tt.name, resp.Header.Get("WWW-Authenticate"))
		}
	}
	conn := dialTCP(t, gw)
	key := "ZWRnZS1lMmUta2V5LTE2Yg=="
	if _, err := conn.Write([]byte("GET /?access_token=s3cr3t-token HTTP/1.1\r\nHost: " + gw.addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	conn.SetReadDeadline(time.Now().Add(readTimeout))
	if _, err := conn.Read(buf); err != nil || string(buf) != "HTTP/1.1 101" {
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
