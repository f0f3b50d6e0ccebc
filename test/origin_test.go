package test

import (
	"fmt"
	"net"
	"testing"

	"github.com/openengine/edge/internal/poll"
)

// upgradeStatus sends an upgrade request with extra header lines and
// returns the HTTP status the gateway answers.
func upgradeStatus(t *testing.T, gw *gateway, extra ...string) int {
	t.Helper()
	_, _, resp, _ := sendUpgrade(t, gw, extra...)
	resp.Body.Close()
	return resp.StatusCode
}

// TestOriginCheck: the Origin rows of CONTRACT.md section 11.2 over real
// sockets. No Origin (not a browser) and the gateway's own host pass, a
// listed origin passes, a foreign one, "null" and a repeated Origin get 403
// before any upgrade; with "*" every origin passes.
func TestOriginCheck(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) { c.loop.AllowOrigins = []string{"https://app.example"} })
	for _, tt := range []struct {
		name   string
		header []string
		want   int
	}{
		{"no origin", nil, 101},
		{"same host", []string{"Origin: http://" + gw.addr}, 101},
		{"listed", []string{"Origin: https://app.example"}, 101},
		{"listed, other scheme", []string{"Origin: http://app.example"}, 403},
		{"foreign", []string{"Origin: https://evil.example"}, 403},
		{"null", []string{"Origin: null"}, 403},
		{"repeated", []string{"Origin: https://app.example", "Origin: https://app.example"}, 403},
	} {
		if got := upgradeStatus(t, gw, tt.header...); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
	any := startGateway(t, func(c *gwConfig) { c.loop.AllowOrigins = []string{"*"} })
	if got := upgradeStatus(t, any, "Origin: https://evil.example"); got != 101 {
		t.Errorf("with *: status %d, want 101", got)
	}
}

// TestConnectionLimits: the limit rows of CONTRACT.md section 11.1 over
// real sockets. With --max-conns 3 the fourth upgrade gets 503 with
// Retry-After: 1 and the socket is closed; once a connection closes, the
// next upgrade succeeds. With --max-conns-per-ip 2 a third connection from
// 127.0.0.1 gets 503 while one from 127.0.0.2 is served.
func TestConnectionLimits(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) { c.loop.MaxConns = 3 })
	var open []*client
	for range 3 {
		open = append(open, dial(t, gw))
	}
	_, _, resp, _ := sendUpgrade(t, gw)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("over --max-conns: status %d Retry-After %q, want 503 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	open[0].conn.Close()
	poll.Until(t, pollTimeout, "an upgrade once a connection closed", func() (bool, string) {
		status := upgradeStatus(t, gw)
		return status == 101, fmt.Sprint(status)
	})

	per := startGateway(t, func(c *gwConfig) { c.loop.MaxConnsPerIP = 2 })
	dial(t, per)
	dial(t, per)
	if got := upgradeStatus(t, per); got != 503 {
		t.Fatalf("third connection from 127.0.0.1: status %d, want 503", got)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: readTimeout}
	conn, err := d.Dial("tcp", per.addr)
	if err != nil {
		t.Fatalf("dial from 127.0.0.2: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, resp, _ := upgradeOn(t, conn, per.addr); resp.StatusCode != 101 {
		t.Fatalf("from 127.0.0.2: status %d, want 101", resp.StatusCode)
	}
}
