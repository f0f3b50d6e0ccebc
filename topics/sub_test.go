package topics

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openengine/edge/backend"
)

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

// TestEndRacesFinishOnce: the paths that end a subscription race (the
// gateway's Cancel, the expiry timers, NATS lost, the topic's messages
// dropped), each taking Topics.mu, so that one of two ends it and the
// other finds it ended. Each pair is run here by hand in both orders, at
// the point where each would get the lock: the call is finished exactly
// once (chanCall panics on a second Finish), with the first one's error,
// and nothing is left in the tables. A path that ended a subscription it
// did not find live would panic in sub.to (ended -> ended) before taking
// its call a second time.
func TestEndRacesFinishOnce(t *testing.T) {
	cancel := func(tops *Topics, tk backend.Ticket, _ *sub) { tk.Cancel() }
	expire := func(tops *Topics, _ backend.Ticket, s *sub) {
		if s.replay {
			tops.expireOpening(s)
		} else {
			tops.expireWaiting(s.t, s.t.want)
		}
	}
	lose := func(tops *Topics, _ backend.Ticket, _ *sub) { tops.fail() }
	drop := func(tops *Topics, _ backend.Ticket, _ *sub) { tops.lost(tops.Subject("a")) }
	type ender func(*Topics, backend.Ticket, *sub)
	for _, tc := range []struct {
		name   string
		params string
		first  ender
		second ender
		want   error
	}{
		{"cancel, then expiry (waiting)", `{"name":"a"}`, cancel, expire, nil},
		{"expiry, then cancel (waiting)", `{"name":"a"}`, expire, cancel, backend.ErrUpstreamTimeout},
		{"cancel, then expiry (replay)", `{"name":"a","fromCursor":"1"}`, cancel, expire, nil},
		{"expiry, then cancel (replay)", `{"name":"a","fromCursor":"1"}`, expire, cancel, backend.ErrUpstreamTimeout},
		{"cancel, then NATS lost", `{"name":"a"}`, cancel, lose, nil},
		{"NATS lost, then cancel", `{"name":"a"}`, lose, cancel, backend.ErrUpstreamUnavailable},
		{"messages dropped, then cancel", `{"name":"a"}`, drop, cancel, backend.ErrUpstreamUnavailable},
		{"cancel, then messages dropped", `{"name":"a"}`, cancel, drop, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tops := openTopics(t)
			tops.cfg.JetStream = true
			c := &chanCall{params: []byte(tc.params), st: newGateStream(false), done: make(chan error, 2)}
			tk := tops.Forward(c, backend.Origin{})
			tops.mu.Lock()
			s := tops.subs[tops.nextID]
			tops.mu.Unlock()
			tc.first(tops, tk, s)
			tc.second(tops, tk, s)
			if n := len(c.done); n != 1 {
				t.Fatalf("finished %d times, want 1", n)
			}
			if err := <-c.done; !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("finished %v, want %v", err, tc.want)
			}
			tops.mu.Lock()
			defer tops.mu.Unlock()
			if len(tops.subs) != 0 || len(tops.topics) != 0 || s.c != nil || s.state != subEnded {
				t.Fatalf("%d subscriptions, %d topics left; call taken %v, state %s", len(tops.subs), len(tops.topics), s.c == nil, s.state)
			}
		})
	}
}

// TestSecondEndPanics: endLocked of a subscription that has ended panics
// before it takes anything: its call is returned once, by the first end.
func TestSecondEndPanics(t *testing.T) {
	tops := openTopics(t)
	c := &chanCall{params: []byte(`{"name":"a"}`), st: newGateStream(false), done: make(chan error, 2)}
	tops.Forward(c, backend.Origin{})
	tops.mu.Lock()
	defer tops.mu.Unlock()
	s := tops.subs[tops.nextID]
	ends := tops.endLocked(nil, s, nil)
	var got any
	func() {
		defer func() { got = recover() }()
		ends = tops.endLocked(ends, s, backend.ErrUpstreamLost)
	}()
	if got == nil || !strings.Contains(fmt.Sprint(got), "ended -> ended") {
		t.Fatalf("second end: panic %v, want the illegal transition ended -> ended", got)
	}
	if len(ends) != 1 || ends[0].c != backend.Call(c) || ends[0].err != nil {
		t.Fatalf("ends %+v, want the call once, with no error", ends)
	}
}
