package rpc

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/openengine/edge/backend"
)

// TestSessionModel runs random interleavings of requests (ids from a small
// pool, so duplicates and reuse happen, with string and int ids and aliases
// of the same id), duplicates, reuse of a cancelled id whose worker still
// runs, cancels of known and unknown ids, worker
// completions in any order, loop drains and close against a simple model of
// CONTRACT.md sections 3 and 4. MaxConnTasks is 3 so SERVER_BUSY happens.
//
// After every step: the session sent exactly what the model predicts; at most
// one terminal response per request; none for a cancelled request with
// cancel-reply none (and exactly one -32800 with cancel-reply error); none
// after close; every response answers a request that was live when it was
// sent; inFlightIds is the number of requests the model holds live; tasks is
// the number of backend calls not yet applied; inFlightIds <= tasks <=
// MaxConnTasks; and the harness's white-box invariants hold.
func TestSessionModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cr := CancelReplyNone
		if rapid.Bool().Draw(rt, "cancelReplyError") {
			cr = CancelReplyError
		}
		m := &model{
			h:    newHarness(rt, opts{maxConnTasks: modelMaxTasks, cancelReply: cr}),
			cr:   cr,
			live: make(map[string]*mreq),
		}
		m.run(rt)
	})
}

const modelMaxTasks = 3

// modelAction is one kind of step: applicable when ok says so, drawn with
// the given weight among the applicable ones.
type modelAction struct {
	name   string
	weight int
	ok     func() bool
	do     func(*rapid.T)
}

// run draws a sequence of applicable actions (rather than rapid's Repeat,
// which draws blindly and skips, so that long interleavings with the
// race-prone actions come up in every run) and checks the invariants after
// each.
func (m *model) run(t *rapid.T) {
	always := func() bool { return true }
	actions := []modelAction{
		{"send", 4, always, m.send},
		{"duplicate", 1, func() bool { return len(m.live) > 0 }, m.duplicate},
		{"reuse", 4, func() bool { return len(m.reusable()) > 0 }, m.reuse},
		{"cancel", 3, always, m.cancel},
		{"complete", 4, func() bool { return len(m.running) > 0 }, m.complete},
		{"applyNext", 3, func() bool { return len(m.posted) > 0 }, m.applyNext},
		{"applyAll", 1, func() bool { return len(m.posted) > 0 }, m.applyAll},
		{"stats", 1, always, m.stats},
		{"garbage", 1, always, m.garbage},
		{"close", 1, func() bool { return !m.closed }, m.close},
	}
	steps := rapid.IntRange(20, 200).Draw(t, "steps")
	m.check(t)
	for range steps {
		var names []string
		byName := make(map[string]modelAction)
		for _, a := range actions {
			if a.ok() {
				byName[a.name] = a
				for range a.weight {
					names = append(names, a.name)
				}
			}
		}
		byName[rapid.SampledFrom(names).Draw(t, "action")].do(t)
		m.check(t)
	}
}

// modelID is an id token and its identity in the model.
type modelID struct{ raw, key string }

// modelIDs is the pool the model draws ids from: int and string ids that look
// alike but differ, and different spellings of one id.
var modelIDs = []modelID{
	{"1", "i1"}, {"2", "i2"}, {`"1"`, "s1"}, {`"a"`, "sa"}, {`"\u0061"`, "sa"}, {"0", "i0"}, {"-0", "i0"},
}

// Request states in the model.
const (
	mLive      = iota // owns its id, will be answered when its completion is applied
	mCancelled        // cancelled by the client
	mClosed           // its connection closed
	mAnswered         // got its response
)

// mreq is one admitted request of the model.
type mreq struct {
	serial    int
	id        modelID
	state     int
	cl        *call
	reply     string // the response its completion would write, once it returned
	responses int    // terminal responses seen for it
}

type model struct {
	h       *harness
	cr      CancelReply
	closed  bool
	serial  int
	live    map[string]*mreq // id key -> the request owning it
	running []*mreq          // backend call not returned
	posted  []*mreq          // returned, completion posted and not applied, oldest first
	all     []*mreq
	expect  []string // what the session must have sent since the last check
	sentAt  int      // sink length when the session closed
}

// held is the number of slots the model says are taken.
func (m *model) held() int { return len(m.running) + len(m.posted) }

// admit predicts the answer to a tracked request with id that is checked
// before dispatch: "" if it is admitted, else the reply (or nothing, after
// close, signalled by ok false).
func (m *model) admission(id modelID) (reply string, admitted bool) {
	switch {
	case m.live[id.key] != nil:
		return duplicateReply(id.raw), false
	case m.held() >= modelMaxTasks:
		return busyReply(id.raw), false
	}
	return "", true
}

func (m *model) send(t *rapid.T) {
	id := rapid.SampledFrom(modelIDs).Draw(t, "id")
	m.request(t, id)
}

// duplicate sends a new request with the id (maybe spelled differently) of a
// live request.
func (m *model) duplicate(t *rapid.T) {
	var same []modelID
	for _, id := range modelIDs {
		if m.live[id.key] != nil {
			same = append(same, id)
		}
	}
	m.request(t, rapid.SampledFrom(same).Draw(t, "id"))
}

// reuse sends a new request with the id (maybe spelled differently) of a
// cancelled request whose completion has not been applied yet: the
// late-completion race of CONTRACT.md section 4.
func (m *model) reuse(t *rapid.T) {
	m.request(t, rapid.SampledFrom(m.reusable()).Draw(t, "id"))
}

// reusable returns the spellings of the ids of cancelled requests whose
// completion has not been applied and whose id is free.
func (m *model) reusable() []modelID {
	var ids []modelID
	for _, r := range m.all {
		if r.state != mCancelled || m.live[r.id.key] != nil || !m.pending(r) {
			continue
		}
		for _, id := range modelIDs {
			if id.key == r.id.key {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// pending reports whether r's completion has not been applied yet.
func (m *model) pending(r *mreq) bool {
	for _, q := range m.running {
		if q == r {
			return true
		}
	}
	for _, q := range m.posted {
		if q == r {
			return true
		}
	}
	return false
}

func (m *model) request(t *rapid.T, id modelID) {
	m.serial++
	cl := m.h.send(req(id.raw, "get", fmt.Sprintf(`{"n":%d}`, m.serial)))
	if m.closed {
		if cl != nil {
			t.Fatalf("closed session dispatched request %s", id.raw)
		}
		return
	}
	reply, admitted := m.admission(id)
	if !admitted {
		if cl != nil {
			t.Fatalf("request %s dispatched, want %s", id.raw, reply)
		}
		m.expect = append(m.expect, reply)
		return
	}
	if cl == nil {
		t.Fatalf("request %s not dispatched", id.raw)
	}
	if want := fmt.Sprintf(`{"n":%d}`, m.serial); cl.params != want {
		t.Fatalf("backend got params %s, want %s", cl.params, want)
	}
	r := &mreq{serial: m.serial, id: id, cl: cl}
	m.live[id.key] = r
	m.running = append(m.running, r)
	m.all = append(m.all, r)
}

func (m *model) cancel(t *rapid.T) {
	id := rapid.SampledFrom(modelIDs).Draw(t, "id")
	m.h.cancel(id.raw)
	if m.closed {
		return
	}
	r := m.live[id.key]
	if r == nil {
		return // unknown id: silent no-op
	}
	delete(m.live, id.key)
	r.state = mCancelled
	if r.cl.ctx.Err() == nil {
		t.Fatalf("cancel %s: backend ctx not cancelled", id.raw)
	}
	if m.cr == CancelReplyError {
		m.expect = append(m.expect, cancelledReply(r.id.raw)) // the request's own spelling
		r.responses++
	}
}

// complete makes one running backend call return, in any order.
func (m *model) complete(t *rapid.T) {
	i := rapid.IntRange(0, len(m.running)-1).Draw(t, "call")
	r := m.running[i]
	kinds := []string{"result", "error", "panic"}
	if r.cl.ctx.Err() != nil {
		kinds = append(kinds, "onCancel")
	}
	var o outcome
	switch rapid.SampledFrom(kinds).Draw(t, "outcome") {
	case "result":
		o.result = fmt.Sprintf(`{"r":%d}`, r.serial)
		r.reply = resultReply(r.id.raw, o.result)
	case "error":
		o.err = &backend.Error{Code: -32000, Message: fmt.Sprintf("failed %d", r.serial), DataCode: "E"}
		r.reply = errorReply(r.id.raw, -32000, fmt.Sprintf("failed %d", r.serial), "E")
	case "panic":
		o.panicVal = r.serial
		r.reply = errorReply(r.id.raw, -32603, "Internal error", "BACKEND_PANIC")
	case "onCancel":
		o.onCancel = true
		r.reply = "" // its request is cancelled or closed: never answered
	}
	m.h.release(r.cl, o)
	m.running = append(m.running[:i], m.running[i+1:]...)
	m.posted = append(m.posted, r)
}

func (m *model) applyNext(t *rapid.T) { m.apply(t) }

func (m *model) applyAll(t *rapid.T) {
	for len(m.posted) > 0 {
		m.apply(t)
	}
}

func (m *model) apply(t *rapid.T) {
	r := m.posted[0]
	m.posted = m.posted[1:]
	if got := m.h.applyNext(); got != r.cl.task {
		t.Fatalf("loop applied %s, model expected %s", got.id, r.cl.task.id)
	}
	if m.closed || r.state != mLive || m.live[r.id.key] != r {
		return // dropped
	}
	delete(m.live, r.id.key)
	r.state = mAnswered
	r.responses++
	m.expect = append(m.expect, r.reply)
}

// stats sends edge/stats, which must report the model's counts.
func (m *model) stats(t *rapid.T) {
	id := rapid.SampledFrom(modelIDs).Draw(t, "id")
	if cl := m.h.send(req(id.raw, "edge/stats", `{}`)); cl != nil {
		t.Fatalf("edge/stats dispatched a backend call")
	}
	if m.closed {
		return
	}
	if reply, admitted := m.admission(id); !admitted {
		m.expect = append(m.expect, reply)
		return
	}
	m.expect = append(m.expect, statsReply(id.raw, len(m.live), m.held(), 0))
}

// garbage sends a message that is not JSON: Parse error, unless every slot is
// busy (then it is dropped) or the session is closed.
func (m *model) garbage(t *rapid.T) {
	if cl := m.h.send(`{"jsonrpc":"2.0",`); cl != nil {
		t.Fatalf("garbage dispatched a backend call")
	}
	if !m.closed && m.held() < modelMaxTasks {
		m.expect = append(m.expect, parseNull)
	}
}

func (m *model) close(t *rapid.T) {
	m.h.close()
	if !m.closed {
		m.closed = true
		m.sentAt = len(m.h.sink.msgs)
		for _, r := range m.live {
			r.state = mClosed
		}
		clear(m.live)
	}
	for _, r := range m.running {
		if r.cl.ctx.Err() == nil {
			t.Fatalf("close: request %s (serial %d) ctx not cancelled", r.id.raw, r.serial)
		}
	}
}

func (m *model) check(t *rapid.T) {
	sink := m.h.sink
	got := sink.unread()
	if len(got) != len(m.expect) {
		t.Fatalf("session sent %q, model expected %q", got, m.expect)
	}
	for i := range got {
		if got[i] != m.expect[i] {
			t.Fatalf("message %d: session sent\n  %s\nmodel expected\n  %s", i, got[i], m.expect[i])
		}
	}
	sink.read = len(sink.msgs)
	m.expect = m.expect[:0]

	for _, r := range m.all {
		switch {
		case r.responses > 1:
			t.Fatalf("request %s (serial %d) got %d terminal responses", r.id.raw, r.serial, r.responses)
		case r.state == mCancelled && m.cr == CancelReplyNone && r.responses != 0:
			t.Fatalf("cancelled request %s (serial %d) got a response", r.id.raw, r.serial)
		case r.state == mCancelled && m.cr == CancelReplyError && r.responses != 1:
			t.Fatalf("cancelled request %s (serial %d) got %d responses, want one -32800", r.id.raw, r.serial, r.responses)
		case r.state == mClosed && r.responses != 0:
			t.Fatalf("request %s (serial %d) closed with the connection got a response", r.id.raw, r.serial)
		}
	}
	if m.closed && len(sink.msgs) != m.sentAt {
		t.Fatalf("%d messages sent after close", len(sink.msgs)-m.sentAt)
	}

	st := m.h.sess.Stats()
	if st.InFlightIDs != len(m.live) {
		t.Fatalf("inFlightIds %d, model holds %d live requests", st.InFlightIDs, len(m.live))
	}
	if st.Tasks != m.held() {
		t.Fatalf("tasks %d, model has %d running and %d posted calls", st.Tasks, len(m.running), len(m.posted))
	}
	if st.InFlightIDs > st.Tasks || st.Tasks > modelMaxTasks {
		t.Fatalf("inFlightIds %d, tasks %d, MaxConnTasks %d", st.InFlightIDs, st.Tasks, modelMaxTasks)
	}
	if len(m.h.queue) != len(m.posted) {
		t.Fatalf("%d completions queued, model has %d", len(m.h.queue), len(m.posted))
	}
	m.h.checkInvariants()
}
