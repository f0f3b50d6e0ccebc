package upstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// recCall is a backend.Call that records what the link does with it.
type recCall struct {
	method string
	st     *recStream
	result []string
	errs   []error
}

func (c *recCall) Method() string { return c.method }
func (c *recCall) Params() []byte { return []byte(`{}`) }
func (c *recCall) Stream() backend.Stream {
	if c.st == nil {
		return nil
	}
	return c.st
}
func (c *recCall) Finish(result []byte, err error) {
	if len(c.errs) > 0 {
		panic("upstream: call " + c.method + " finished twice")
	}
	c.result, c.errs = append(c.result, string(result)), append(c.errs, err)
}

type recStream struct {
	id          string
	ns          string // Namespace: a plain subscription's
	established []string
	events      []string // cursor + " " + body
}

func (s *recStream) ID() string              { return s.id }
func (s *recStream) Namespace() string       { return s.ns }
func (s *recStream) Establish(result []byte) { s.established = append(s.established, string(result)) }
func (s *recStream) Emit(cursor, body []byte) bool {
	s.events = append(s.events, string(cursor)+" "+string(body))
	return true
}
func (s *recStream) EmitWait(_ context.Context, cursor, body []byte) bool {
	return s.Emit(cursor, body)
}

// TestEventDuplicateSubscriptionID is the regression test of an upstream's
// subscription id reaching the client (found by FuzzUpstreamReader). An
// event whose params named subscriptionId twice was routed by the first and
// passed the second through in its body, so the client received
// {"subscriptionId":"s1",...,"subscriptionId":"<upstream's>"}; to a client
// whose JSON reader keeps the last member, that is an event of another
// subscription, or of none. Every subscriptionId member is now edge's
// business: the last one routes (as for every duplicated member, CONTRACT.md
// section 2.4, and as subscription results and subscription/closed are
// read), and none is passed on.
func TestEventDuplicateSubscriptionID(t *testing.T) {
	l := newLink(testUpstream(nil, Config{}), "t", nil, false)
	l.open()
	a := &recCall{method: "edge/ticks", st: &recStream{id: "s1"}}
	b := &recCall{method: "edge/ticks", st: &recStream{id: "s2"}}
	l.forward(a, 0)
	l.forward(b, 0)
	// The upstream names a subscription id twice in a result: the last
	// one is the subscription's, and every one is rewritten to edge's.
	l.handle([]byte(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"x","subscriptionId":"u1"}}`))
	l.handle([]byte(`{"jsonrpc":"2.0","id":2,"result":{"subscriptionId":"u2"}}`))
	if got, want := strings.Join(a.st.established, "|"), `{"subscriptionId":"s1","subscriptionId":"s1"}`; got != want {
		t.Fatalf("established %s, want %s", got, want)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"u1","cursor":"1","subscriptionId":"u2","seq":1}}`))
	l.handle([]byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"u2","cursor":"2","subscriptionId":"u1","seq":2}}`))
	l.handle([]byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"x","cursor":"3"}}`))
	if got, want := strings.Join(b.st.events, "|"), `"1" "cursor":"1","seq":1`; got != want {
		t.Fatalf("events of the second subscription %q, want %q", got, want)
	}
	if got, want := strings.Join(a.st.events, "|"), `"2" "cursor":"2","seq":2`; got != want {
		t.Fatalf("events of the first subscription %q, want %q", got, want)
	}
	// subscription/closed reads the last one too.
	l.handle([]byte(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"u2","subscriptionId":"u1","reason":"done"}}`))
	if len(a.errs) != 1 || a.errs[0] != nil || len(b.errs) != 0 {
		t.Fatalf("finished: first %v, second %v; want the first done", a.errs, b.errs)
	}
}

// TestHandleAnswers: answers pass through byte for byte to the call with
// their upstream id, once; a request is answered -32601 on the upstream
// connection with its id; what is not a JSON-RPC answer or notification is
// dropped and counted, and finishes nothing.
func TestHandleAnswers(t *testing.T) {
	u := testUpstream(nil, Config{})
	l := newLink(u, "t", nil, false)
	l.open()
	calls := []*recCall{{method: "a"}, {method: "b"}, {method: "c"}}
	for _, c := range calls {
		l.forward(c, 0)
	}
	l.Output() // the requests, as the loop would take them
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"no","data":{"code":"X","details":[1, 2]}}}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,            // answered already: unknown
		`{"jsonrpc":"2.0","id":"1","result":{}}`,          // a string id is not edge's
		`{"jsonrpc":"2.0","id":1.0,"result":{}}`,          // neither is a fraction
		`{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`, // both
		`{"jsonrpc":"2.0","id":1}`,                        // neither
		`{"id":1,"result":{}}`,                            // not JSON-RPC 2.0
		`{"jsonrpc":"2.0","id":9,"method":"boom","params":[]}`,
		`{"jsonrpc":"2.0","id":null,"method":"boom"}`,
		`{"jsonrpc":"2.0","method":"nope","params":{}}`,
		`{"jsonrpc":"2.0", "id" : 1 , "result" : {"b": [1, 2] } }`,
	} {
		l.handle([]byte(msg))
	}
	if got := calls[0].result; len(got) != 1 || got[0] != `{"b": [1, 2] }` || calls[0].errs[0] != nil {
		t.Fatalf("first call finished %q %v", got, calls[0].errs)
	}
	raw, ok := calls[1].errs[0].(*backend.RawError)
	if len(calls[1].errs) != 1 || !ok || string(raw.Object) != `{"code":-32000,"message":"no","data":{"code":"X","details":[1, 2]}}` {
		t.Fatalf("second call finished %v", calls[1].errs)
	}
	if len(calls[2].errs) != 0 {
		t.Fatalf("third call finished %v %q", calls[2].errs, calls[2].result)
	}
	if n := u.Dropped(); n != 9 {
		t.Fatalf("Dropped() = %d, want 9", n)
	}
	if got, want := string(l.Output()), `{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"Method not found"}}`+"\n"; got != want {
		t.Fatalf("edge wrote to the upstream %q, want %q", got, want)
	}
}

// TestLateAnswerIsNotGarbage: the answer to a call that timed out is counted
// as late, not as a dropped message, and finishes nothing; an answer to an
// id edge never sent is still dropped.
func TestLateAnswerIsNotGarbage(t *testing.T) {
	u := testUpstream(nil, Config{Timeout: time.Second})
	l := newLink(u, "t", nil, false)
	l.open()
	c := &recCall{method: "a"}
	l.forward(c, 0)
	l.Output()
	l.sweep(time.Now().Add(2 * time.Second).UnixNano())
	if len(c.errs) != 1 || !errors.Is(c.errs[0], backend.ErrUpstreamTimeout) {
		t.Fatalf("the call finished with %v, want UPSTREAM_TIMEOUT", c.errs)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))  // late
	l.handle([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))  // again: now garbage
	l.handle([]byte(`{"jsonrpc":"2.0","id":77,"result":{}}`)) // never sent
	if late, dropped := u.Late(), u.Dropped(); late != 1 || dropped != 2 {
		t.Fatalf("late %d dropped %d, want 1 and 2", late, dropped)
	}
	if len(c.errs) != 1 {
		t.Fatalf("the late answer finished the call again: %v", c.errs)
	}
}
