package backend

import (
	"context"
	"strconv"
	"sync"

	json "github.com/goccy/go-json"
)

// Fanout is the local fan-out of one topic: the edge/topic subscribers of a
// name on this process, each an event stream of the gateway. A publish
// emits one event to every member without waiting; a member whose buffer is
// full is closed SLOW_CONSUMER by its stream (CONTRACT.md section 6). The
// memory backend's topics deliver through it. Each event is encoded once
// (SharedTopicEvent), in a buffer of its own that the members implementing
// SharedEmitter (the gateway's streams) keep instead of copying it. Safe for
// concurrent use.
type Fanout struct {
	mu  sync.Mutex
	seq int64 // guarded by mu: last sequence number of Publish
	// members is guarded by mu: a slice, not a map, because a fan-out walks
	// every member for every event (a map's iteration cost a tenth of a
	// 10,000-member fan-out's time); index gives Leave its member's slot.
	members []fanoutMember
	index   map[Stream]int // guarded by mu: position of each member in members
}

// fanoutMember is one member of a Fanout: its stream, and the same stream as
// a SharedEmitter when it keeps shared events (nil when it copies).
type fanoutMember struct {
	s      Stream
	shared SharedEmitter
}

// Join adds s; it gets the events published from now on. It returns the
// number of members.
func (f *Fanout) Join(s Stream) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.index == nil {
		f.index = make(map[Stream]int)
	}
	if _, ok := f.index[s]; !ok {
		shared, _ := s.(SharedEmitter)
		f.index[s] = len(f.members)
		f.members = append(f.members, fanoutMember{s: s, shared: shared})
	}
	return len(f.members)
}

// Leave removes s and returns the number of members left. The last member
// takes its slot.
func (f *Fanout) Leave(s Stream) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.index[s]
	if !ok {
		return len(f.members)
	}
	delete(f.index, s)
	last := len(f.members) - 1
	if i != last {
		f.members[i] = f.members[last]
		f.index[f.members[i].s] = i
	}
	f.members[last] = fanoutMember{}
	f.members = f.members[:last]
	return len(f.members)
}

// Len is the number of members.
func (f *Fanout) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.members)
}

// Publish emits data (raw JSON) with the next sequence number of f as seq
// and cursor, and returns the number of members whose buffer took it.
func (f *Fanout) Publish(data []byte) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	return f.emitLocked(f.seq, data)
}

// PublishSeq emits data with seq, a sequence number given by the caller
// (a JetStream stream sequence), as seq and cursor, and returns the number
// of members whose buffer took it.
func (f *Fanout) PublishSeq(seq int64, data []byte) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.emitLocked(seq, data)
}

// emitLocked encodes the event once and hands it to every member.
func (f *Fanout) emitLocked(seq int64, data []byte) int {
	if len(f.members) == 0 {
		return 0
	}
	cursor, body := SharedTopicEvent(seq, data)
	delivered := 0
	for _, m := range f.members {
		var ok bool
		if m.shared != nil {
			ok = m.shared.EmitShared(cursor, body)
		} else {
			ok = m.s.Emit(cursor, body)
		}
		if ok {
			delivered++
		}
	}
	return delivered
}

// SharedTopicEvent encodes an edge/topic event (TopicEvent) into a new
// buffer that is never written again, and returns its cursor and body. A
// fan-out hands the same two slices to every member: a SharedEmitter keeps
// them as they are until its connection wrote them, so the event is encoded
// and allocated once per publish, not once per member.
func SharedTopicEvent(seq int64, data []byte) (cursor, body []byte) {
	_, cursor, body = TopicEvent(make([]byte, 0, topicEventSize(data)), seq, data)
	return cursor, body
}

// EmitShared hands s an event whose cursor and body the caller never writes
// again (SharedTopicEvent's): kept by reference when s is a SharedEmitter,
// copied by s.Emit otherwise.
func EmitShared(s Stream, cursor, body []byte) bool {
	if sh, ok := s.(SharedEmitter); ok {
		return sh.EmitShared(cursor, body)
	}
	return s.Emit(cursor, body)
}

// topicEventSize bounds the length of TopicEvent's output for data.
func topicEventSize(data []byte) int {
	const fixed = len(`"cursor":"","seq":,"data":`) + 2*20 + len("null")
	return fixed + len(data)
}

// TopicEvent appends to dst an edge/topic event with sequence number seq
// and data (raw JSON, null when empty), and returns dst and, sliced from
// it, the event's cursor `"<seq>"` and its members for Stream.Emit:
// `"cursor":"<seq>","seq":<seq>,"data":<data>` (CONTRACT.md section 8).
func TopicEvent(dst []byte, seq int64, data []byte) (buf, cursor, body []byte) {
	if len(data) == 0 {
		data = []byte("null")
	}
	start := len(dst)
	dst = append(dst, `"cursor":"`...)
	c := len(dst) - 1
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, '"')
	ce := len(dst)
	dst = strconv.AppendInt(append(dst, `,"seq":`...), seq, 10)
	dst = append(append(dst, `,"data":`...), data...)
	return dst, dst[c:ce], dst[start:]
}

// topicParams are the params of edge/topic and edge/publish.
type topicParams struct {
	Name *string         `json:"name"`
	Data json.RawMessage `json:"data"`
}

// subscribeTopic serves edge/topic {"name":string}: result {"subscriptionId":..},
// then one event {"subscriptionId":..,"cursor":"<seq>","seq":n,"data":<data>} per
// edge/publish to the name. A subscriber that falls behind is closed SLOW_CONSUMER.
func (m *Memory) subscribeTopic(ctx context.Context, params []byte, s Stream) error {
	var p topicParams
	if err := json.Unmarshal(params, &p); err != nil || p.Name == nil {
		return SchemaViolation(nil)
	}
	m.mu.Lock()
	t := m.topics[*p.Name]
	if t == nil {
		t = &Fanout{}
		m.topics[*p.Name] = t
	}
	t.Join(s)
	m.mu.Unlock()

	s.Establish(subscriptionResult(s.ID(), ""))
	<-ctx.Done()

	m.mu.Lock()
	if t.Leave(s) == 0 && m.topics[*p.Name] == t {
		delete(m.topics, *p.Name)
	}
	m.mu.Unlock()
	return nil
}

// publish serves edge/publish {"name":string,"data":any}: result {"delivered":n},
// the number of subscribers whose buffer took the event.
func (m *Memory) publish(params, dst []byte) ([]byte, error) {
	var p topicParams
	if err := json.Unmarshal(params, &p); err != nil || p.Name == nil {
		return dst, SchemaViolation(nil)
	}
	m.mu.Lock()
	t := m.topics[*p.Name]
	m.mu.Unlock()
	delivered := 0
	if t != nil {
		delivered = t.Publish(p.Data)
	}
	return AppendDelivered(dst, delivered), nil
}

// AppendDelivered appends edge/publish's result {"delivered":n}.
func AppendDelivered(dst []byte, n int) []byte {
	dst = append(dst, `{"delivered":`...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '}')
}
