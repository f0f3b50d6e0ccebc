package loop

import (
	"strings"
	"testing"
)

// TestConnTransitions: conn.setState allows exactly the transitions that
// connState's doc lists and panics on every other one, so that a path that
// would, say, reopen a closing connection (and send after its close frame)
// stops there.
func TestConnTransitions(t *testing.T) {
	states := []connState{stateHandshake, stateOpen, stateClosing, stateClosed}
	legal := map[[2]connState]bool{
		{stateHandshake, stateOpen}:    true,
		{stateHandshake, stateClosing}: true,
		{stateOpen, stateClosing}:      true,
		{stateHandshake, stateClosed}:  true,
		{stateOpen, stateClosed}:       true,
		{stateClosing, stateClosed}:    true,
	}
	for _, from := range states {
		for _, to := range states {
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				w := &conn{state: from}
				ok := legal[[2]connState{from, to}]
				var got any
				func() {
					defer func() { got = recover() }()
					w.setState(to)
				}()
				switch {
				case ok && got != nil:
					t.Fatalf("legal transition panicked: %v", got)
				case ok && w.state != to:
					t.Fatalf("state %s after the transition, want %s", w.state, to)
				case !ok && got == nil:
					t.Fatalf("illegal transition accepted (state now %s)", w.state)
				case !ok:
					if msg, _ := got.(string); !strings.Contains(msg, from.String()+" -> "+to.String()) {
						t.Fatalf("panic %q does not name both states", got)
					}
					if w.state != from {
						t.Fatalf("state %s after a refused transition, want %s unchanged", w.state, from)
					}
				}
			})
		}
	}
}
