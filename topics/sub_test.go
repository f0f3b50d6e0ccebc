package topics

import "testing"

// TestSubStateTable: sub.to allows exactly the transitions of subState's
// doc and panics on every other, ended -> ended included: a second end,
// which would finish the call a second time.
func TestSubStateTable(t *testing.T) {
	legal := map[[2]subState]bool{
		{subWaiting, subLive}:      true,
		{subWaiting, subEnded}:     true,
		{subOpening, subReplaying}: true,
		{subOpening, subEnded}:     true,
		{subLive, subEnded}:        true,
		{subReplaying, subEnded}:   true,
	}
	states := []subState{subWaiting, subOpening, subLive, subReplaying, subEnded}
	for _, from := range states {
		for _, to := range states {
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				s := &sub{state: from}
				panicked := func() (p bool) {
					defer func() { p = recover() != nil }()
					s.to(to)
					return false
				}()
				if panicked == legal[[2]subState{from, to}] {
					t.Errorf("%s -> %s: panicked %v, legal %v", from, to, panicked, legal[[2]subState{from, to}])
				}
			})
		}
	}
}
