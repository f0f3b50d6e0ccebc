// Package poll is the bounded poll of edge's tests: wait for an effect that
// no channel reports (a counter, a flag, an answer to edge/stats) by asking
// again with a short backoff, and fail the test with what it waited for if
// the effect does not come in time. It never sleeps a fixed time for an
// effect.
package poll

import (
	"testing"
	"time"
)

// Backoff bounds: the first retry comes after minBackoff, each later one
// waits twice as long as the one before, up to maxBackoff.
const (
	minBackoff = time.Millisecond
	maxBackoff = 16 * time.Millisecond
)

// Until calls cond until it reports done and fails the test if timeout passes
// first: "waited <timeout> for <what>; last: <state>", where state is what
// cond said the last time (the count or the stats it saw), so that the
// failure shows how far the effect got. cond runs on the caller's goroutine
// and may fail the test itself. Until must be called on the test's
// goroutine, like t.Fatal.
func Until(t testing.TB, timeout time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := minBackoff
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last: %s", timeout, what, state)
			return
		}
		time.Sleep(wait) // the backoff between two looks, not a wait for the effect
		wait = min(2*wait, maxBackoff)
	}
}
