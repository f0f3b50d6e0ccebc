package test

import (
	"testing"
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
