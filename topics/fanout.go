package topics

import (
	"slices"
	"sync"

	"github.com/openengine/edge/backend"
)

// fanout is the local fan-out of one topic: its established live
// subscribers on this edge. A publish emits one event to every member
// without waiting; a member whose buffer is full is closed SLOW_CONSUMER by
// its stream (CONTRACT.md section 6).
//
// Joins and leaves, which the event loops make under Topics.mu, are O(1)
// (each member knows its index, sub.slot) and never wait for a fan-out: a
// publish emits to a snapshot of the members, taken under mu only when the
// members changed since the last publish (a copy of the member pointers),
// and holds mu for that copy alone, never for an Emit. A member that leaves
// during a fan-out may still get that one event; its stream refuses it once
// the subscription has ended (backend.Stream.Emit).
type fanout struct {
	// pub is held by a publish for its whole fan-out, so that a topic's
	// events go out one at a time and in order even if nats.go runs an old
	// and a new handler of the topic at once (a subscription renewed). No
	// loop takes it.
	pub sync.Mutex
	seq int64 // guarded by pub: the last sequence number of publish

	mu sync.Mutex
	// members is guarded by mu and written only with Topics.mu held as
	// well, so holders of Topics.mu may read it without mu.
	members []*sub
	snap    []*sub // guarded by mu: the members as a publish last saw them; never written once taken
	stale   bool   // guarded by mu: members changed since snap was taken
}

// join adds s, a live subscription, to the members. Called with Topics.mu
// held.
func (f *fanout) join(s *sub) {
	f.mu.Lock()
	s.slot = len(f.members)
	f.members = append(f.members, s)
	f.stale = true
	f.mu.Unlock()
}

// leave removes s from the members in O(1): the last member takes its
// index. Called with Topics.mu held.
func (f *fanout) leave(s *sub) {
	f.mu.Lock()
	last := len(f.members) - 1
	moved := f.members[last]
	f.members[s.slot], moved.slot = moved, s.slot
	f.members[last] = nil
	f.members = f.members[:last]
	f.stale = true
	f.mu.Unlock()
}

// publish emits data (raw JSON) with the topic's next sequence number as
// seq and cursor, and returns the number of members whose buffer took it.
func (f *fanout) publish(data []byte) int {
	f.pub.Lock()
	defer f.pub.Unlock()
	f.seq++
	return f.emitLocked(f.seq, data)
}

// publishSeq emits data with seq, a JetStream stream sequence, as seq and
// cursor, and returns the number of members whose buffer took it.
func (f *fanout) publishSeq(seq int64, data []byte) int {
	f.pub.Lock()
	defer f.pub.Unlock()
	return f.emitLocked(seq, data)
}

// emitLocked emits one event to a snapshot of the members. The event is
// encoded once (backend.SharedTopicEvent) and every member's stream keeps a
// reference to it (backend.SharedEmitter) instead of a copy: one allocation
// per event instead of one copy per member. Called with pub held.
func (f *fanout) emitLocked(seq int64, data []byte) int {
	f.mu.Lock()
	if f.stale {
		f.snap, f.stale = slices.Clone(f.members), false
	}
	members := f.snap
	f.mu.Unlock()
	if len(members) == 0 {
		return 0
	}
	cursor, body := backend.SharedTopicEvent(seq, data)
	delivered := 0
	for _, s := range members {
		if backend.EmitShared(s.st, cursor, body) {
			delivered++
		}
	}
	return delivered
}
