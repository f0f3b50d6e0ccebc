package topics

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// subState is the lifecycle of an edge/topic subscription. A live
// subscription starts waiting, one with fromCursor (JetStream) opening.
// Legal transitions:
//
//	waiting   -> live       the topic's NATS subscription is in place: s joined the fan-out and is answered
//	opening   -> replaying  its own ordered consumer exists: s is answered
//	waiting   -> ended      cancelled, the NATS subscription failed, NATS lost
//	opening   -> ended      cancelled, the consumer failed, NATS lost
//	live      -> ended      cancelled, NATS lost, the topic's messages were dropped (slow consumer)
//	replaying -> ended      cancelled, the consumer failed, NATS lost
//
// ended is final. Every change goes through sub.to, which checks it, and a
// subscription ends only through Topics.endLocked, which takes its call
// out as it moves it to ended and returns it, finished by the caller once
// Topics.mu is released (Topics.finish): the call is finished exactly
// once, as a second end is a transition the table does not allow.
type subState uint8

const (
	subWaiting subState = iota
	subOpening
	subLive
	subReplaying
	subEnded
)

func (st subState) String() string {
	switch st {
	case subWaiting:
		return "waiting"
	case subOpening:
		return "opening"
	case subLive:
		return "live"
	case subReplaying:
		return "replaying"
	case subEnded:
		return "ended"
	}
	return "subState(" + strconv.Itoa(int(st)) + ")"
}

// canGo reports whether the table of subState allows from -> to.
func (from subState) canGo(to subState) bool {
	switch from {
	case subWaiting:
		return to == subLive || to == subEnded
	case subOpening:
		return to == subReplaying || to == subEnded
	case subLive, subReplaying:
		return to == subEnded
	}
	return false
}

// established reports whether the subscription's success response was
// sent (it counts in edge/publish's delivered).
func (st subState) established() bool { return st == subLive || st == subReplaying }

// sub is one edge/topic subscription.
type sub struct {
	id uint64         // immutable
	c  backend.Call   // guarded by Topics.mu: nil once ended (endLocked takes it)
	st backend.Stream // immutable
	t  *topic         // immutable

	state subState // guarded by Topics.mu: changed only by to
	// slot is s's index in t.waiting (waiting) or t.fan.members (live).
	// Guarded by Topics.mu.
	slot int
	// expiry (replay) ends s UPSTREAM_TIMEOUT if it is still opening
	// Timeout after it was asked for. Guarded by Topics.mu.
	expiry *time.Timer

	// from is the fromCursor (JetStream): the subscription has its own
	// ordered consumer from from+1. Immutable.
	from   uint64
	replay bool
	ctx    context.Context           // replay: cancelled when it ends
	cancel context.CancelFunc        // replay
	iter   jetstream.MessagesContext // writer-owned: the replay's iterator
}

// to moves s to state next. A transition the table of subState does not
// allow is a bug in the topics, which could then finish a call twice or
// never: it panics. Called with Topics.mu held.
func (s *sub) to(next subState) {
	if !s.state.canGo(next) {
		panic("topics: subscription " + strconv.FormatUint(s.id, 10) + ": illegal transition " + s.state.String() + " -> " + next.String())
	}
	s.state = next
}

// joinLocked makes s, a waiting live subscription not in t.waiting, one of
// its topic's subscribers and then sends its success response: the other
// way round, an event published by the client right after the response
// (and delivered by NATS before the join) was lost. Called with mu held.
func (t *Topics) joinLocked(s *sub) {
	s.to(subLive)
	s.t.fan.join(s)
	establishLocked(s)
}

// establishLocked counts s, established, in its topic and sends its success
// response. Called with Topics.mu held.
func establishLocked(s *sub) {
	s.t.count++
	res := append(make([]byte, 0, 32), `{"subscriptionId":`...)
	res = codec.AppendQuote(res, s.st.ID())
	s.st.Establish(append(res, '}'))
}

// waitLocked adds s, a waiting live subscription, to its topic's waiting
// ones. Called with Topics.mu held.
func waitLocked(s *sub) {
	tp := s.t
	s.slot = len(tp.waiting)
	tp.waiting = append(tp.waiting, s)
}

// unwaitLocked removes s from its topic's waiting ones in O(1): the last
// one takes its index. Called with Topics.mu held.
func unwaitLocked(s *sub) {
	tp := s.t
	last := len(tp.waiting) - 1
	moved := tp.waiting[last]
	tp.waiting[s.slot], moved.slot = moved, s.slot
	tp.waiting[last] = nil
	tp.waiting = tp.waiting[:last]
}

// subEnd is a subscription's call as endLocked took it, with what it
// finishes with: the finish of the one end of a subscription.
type subEnd struct {
	c   backend.Call
	err error
}

// endLocked is the one way a subscription ends: s leaves every table (the
// subscriptions, its topic's waiting ones or fan-out, the topic's counts,
// the topic itself once nothing refers to it), what NATS must be told is
// queued (the topic's NATS subscription after its last live subscriber,
// the replay's consumer: the transport's cancel), and its call is taken
// out, to finish with err: endLocked appends it to ends and returns them,
// for the caller to pass to finish once it has released mu. It visits s
// and its topic only. A second end of s panics (sub.to) before anything
// changes. Called with mu held.
func (t *Topics) endLocked(ends []subEnd, s *sub, err error) []subEnd {
	t.visited++
	prev := s.state
	s.to(subEnded)
	ends = append(ends, subEnd{c: s.c, err: err})
	s.c = nil
	delete(t.subs, s.id)
	tp := s.t
	tp.refs--
	if prev.established() {
		tp.count--
	}
	switch prev {
	case subWaiting:
		unwaitLocked(s)
	case subLive:
		tp.fan.leave(s)
	case subOpening, subReplaying:
		stop(s.expiry)
		s.cancel()
		t.queueLocked(op{kind: opStopReplay, s: s})
	}
	if !s.replay {
		tp.live--
		if tp.live == 0 && !tp.gone {
			stop(tp.expiry)
			tp.ready = false
			t.queueLocked(op{kind: opUnsubscribe, t: tp})
		}
	}
	if tp.refs == 0 && !tp.gone {
		tp.gone = true
		delete(t.topics, tp.name)
	}
	return ends
}

// stop stops tm, if there is one.
func stop(tm *time.Timer) {
	if tm != nil {
		tm.Stop()
	}
}

// expireWaiting ends tp's waiting subscribers UPSTREAM_TIMEOUT: the writer
// did not get the topic's NATS subscription in place within Timeout (NATS,
// or JetStream's API, answers slowly, or the writer is still busy with what
// was queued before). If the writer gets it later, the topic has no live
// subscriber left then, and the unsubscribe queued by endLocked follows.
// want is the subscribe the timer was started for: a timer that fired as
// its subscribers went, and took mu only after another subscribe was
// queued for new ones, leaves them to their own timer.
func (t *Topics) expireWaiting(tp *topic, want uint64) {
	t.mu.Lock()
	var ends []subEnd
	if !tp.ready && tp.want == want {
		ends = t.endWaitingLocked(nil, tp, backend.ErrUpstreamTimeout)
	}
	t.mu.Unlock()
	if len(ends) > 0 {
		t.finish(ends...)
	}
}

// expireOpening ends s, a replay, UPSTREAM_TIMEOUT if its consumer is not
// in place yet; its context is cancelled, which stops the writer's wait.
func (t *Topics) expireOpening(s *sub) {
	var one [1]subEnd
	t.mu.Lock()
	ends := one[:0]
	if s.state == subOpening {
		ends = t.endLocked(ends, s, backend.ErrUpstreamTimeout)
	}
	t.mu.Unlock()
	if len(ends) > 0 {
		t.finish(ends...)
	}
}

// endWaitingLocked ends the waiting subscriptions of tp with err, from the
// last (each removal then moves nothing), and returns ends with theirs.
// Called with mu held.
func (t *Topics) endWaitingLocked(ends []subEnd, tp *topic, err error) []subEnd {
	for i := len(tp.waiting) - 1; i >= 0; i-- {
		ends = t.endLocked(ends, tp.waiting[i], err)
	}
	return ends
}

// finish tells the writer about the operations endLocked queued and
// finishes the calls endLocked took, each with its err. Called without mu.
func (t *Topics) finish(ends ...subEnd) {
	t.signal()
	for _, e := range ends {
		e.c.Finish(nil, e.err)
	}
}

// refuse ends call c, which no table took, with err: the one end of a
// call refused at once (bad params, NATS down, the publish queue full).
func refuse(c backend.Call, err error) { c.Finish(nil, err) }

// lossErr is what s ends with when NATS (or its topic's messages) are lost:
// UPSTREAM_LOST once established, UPSTREAM_UNAVAILABLE before.
func lossErr(s *sub) error {
	if s.state.established() {
		return backend.ErrUpstreamLost
	}
	return backend.ErrUpstreamUnavailable
}
