package rpc

import (
	"strings"
	"testing"
)

// TestSubscriptionTransitions: subscription.to allows exactly the
// transitions that subState's doc lists and panics on every other one, so a
// session that would, say, revive an ended subscription stops there instead
// of delivering events nobody accounts for.
func TestSubscriptionTransitions(t *testing.T) {
	states := []subState{subEstablishing, subLive, subEnded}
	legal := map[[2]subState]bool{
		{subEstablishing, subLive}:  true,
		{subEstablishing, subEnded}: true,
		{subLive, subEnded}:         true,
	}
	for _, from := range states {
		for _, to := range states {
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				sub := &subscription{id: "s1", state: from, task: &Task{sess: &Session{ctr: &Counters{}}}}
				ok := legal[[2]subState{from, to}]
				var got any
				func() {
					defer func() { got = recover() }()
					sub.to(to)
				}()
				switch {
				case ok && got != nil:
					t.Fatalf("legal transition panicked: %v", got)
				case ok && sub.state != to:
					t.Fatalf("state %s after the transition, want %s", sub.state, to)
				case !ok && got == nil:
					t.Fatalf("illegal transition accepted (state now %s)", sub.state)
				case !ok:
					if msg, _ := got.(string); !strings.Contains(msg, "s1") || !strings.Contains(msg, from.String()+" -> "+to.String()) {
						t.Fatalf("panic %q does not name the subscription and its state", got)
					}
					if sub.state != from {
						t.Fatalf("state %s after a refused transition, want %s unchanged", sub.state, from)
					}
				}
			})
		}
	}
}
