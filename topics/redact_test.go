package topics

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/internal/testnats"
)

// TestNATSCredentialsMasked: the userinfo of --nats authenticates to a NATS
// server that requires it, and is masked in Describe (a /readyz reason) and
// in the log lines (CONTRACT.md section 12). Before the masking, Describe
// and the logs' nats= attribute showed the URL as given, password included.
func TestNATSCredentialsMasked(t *testing.T) {
	const password = "hunter2-topics"
	ns := testnats.StartWith(t, testnats.Config{User: "edge", Password: password})
	host := strings.TrimPrefix(ns.ClientURL(), "nats://")
	logs := &testgw.Buffer{}
	tops, err := New(Config{URL: "nats://edge:" + password + "@" + host,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := tops.Start(); err != nil {
		t.Fatal(err)
	}
	defer tops.Close()
	poll.Until(t, 5*time.Second, "topics connected with the URL's credentials", func() (bool, string) {
		return tops.Ready() && strings.Contains(logs.String(), "nats topics: connected"), logs.String()
	})
	if got, want := tops.Describe(), "nats topics nats://edge:***@"+host; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if l := logs.String(); strings.Contains(l, password) || !strings.Contains(l, "nats=nats://edge:***@"+host) {
		t.Errorf("logs show the password, or not the masked URL:\n%s", l)
	}
}
