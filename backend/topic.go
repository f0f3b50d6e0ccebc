package backend

import (
	"context"
	"strconv"
	"sync"

	json "github.com/goccy/go-json"
)

// topic is a fan-out channel of the memory backend: edge/publish emits one
// event to every edge/topic subscriber of a name. Used by the fan-out
// benchmark (bench W4); not part of OECP v1.
type topic struct {
	mu   sync.Mutex
	seq  int64               // guarded by mu: last published sequence number
	subs map[Stream]struct{} // guarded by mu
}

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
		t = &topic{subs: make(map[Stream]struct{})}
		m.topics[*p.Name] = t
	}
	t.mu.Lock()
	t.subs[s] = struct{}{}
	t.mu.Unlock()
	m.mu.Unlock()

	s.Establish(subscriptionResult(s.ID(), ""))
	<-ctx.Done()

	m.mu.Lock()
	t.mu.Lock()
	delete(t.subs, s)
	empty := len(t.subs) == 0
	t.mu.Unlock()
	if empty && m.topics[*p.Name] == t {
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
	data := []byte(p.Data)
	if len(data) == 0 {
		data = []byte("null")
	}
	m.mu.Lock()
	t := m.topics[*p.Name]
	m.mu.Unlock()
	delivered := 0
	if t != nil {
		t.mu.Lock()
		t.seq++
		cursor := strconv.AppendInt([]byte{'"'}, t.seq, 10)
		cursor = append(cursor, '"')
		body := append(append([]byte(`"cursor":`), cursor...), `,"seq":`...)
		body = strconv.AppendInt(body, t.seq, 10)
		body = append(append(body, `,"data":`...), data...)
		for s := range t.subs {
			if s.Emit(cursor, body) {
				delivered++
			}
		}
		t.mu.Unlock()
	}
	dst = append(dst, `{"delivered":`...)
	dst = strconv.AppendInt(dst, int64(delivered), 10)
	return append(dst, '}'), nil
}
