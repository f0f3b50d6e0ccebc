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
// memory backend's topics and the NATS topics (package topics) both deliver
// through it. Each event is encoded once, in a buffer of its own that the
// members implementing SharedEmitter (the gateway's streams) keep instead of
// copying it. Safe for concurrent use.
type Fanout struct {
	mu   sync.Mutex
	seq  int64                    // guarded by mu: last sequence number of Publish
	subs map[Stream]SharedEmitter // guarded by mu: nil value when the member copies
}

// Join adds s; it gets the events published from now on. It returns the
// number of members.
func (f *Fanout) Join(s Stream) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = make(map[Stream]SharedEmitter)
	}
	shared, _ := s.(SharedEmitter)
	f.subs[s] = shared
	return len(f.subs)
}

// Leave removes s and returns the number of members left.
func (f *Fanout) Leave(s Stream) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, s)
	return len(f.subs)
}

// Len is the number of members.
func (f *Fanout) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
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

// emitLocked encodes the event into a new buffer, never written again: the
// members that share it hold it until their connections wrote it (one
// allocation per event instead of a copy per member).
func (f *Fanout) emitLocked(seq int64, data []byte) int {
	if len(f.subs) == 0 {
		return 0
	}
	_, cursor, body := TopicEvent(make([]byte, 0, topicEventSize(data)), seq, data)
	delivered := 0
	for s, shared := range f.subs {
		var ok bool
		if shared != nil {
			ok = shared.EmitShared(cursor, body)
		} else {
			ok = s.Emit(cursor, body)
		}
		if ok {
			delivered++
		}
	}
	return delivered
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
