package upstream

import (
	"strings"
	"testing"
)

// frames returns the payloads of the WebSocket frames in out (unmasked,
// at most 125 bytes each: the tests' answers).
func frames(t *testing.T, out []byte) []string {
	t.Helper()
	var msgs []string
	for len(out) > 0 {
		n := int(out[1] & 0x7f)
		if out[1]&0x80 != 0 || n > 125 || len(out) < 2+n {
			t.Fatalf("not a short unmasked frame: %q", out)
		}
		msgs = append(msgs, string(out[2:2+n]))
		out = out[2+n:]
	}
	return msgs
}

// TestAnswerAppliedOnItsLoop: the answer to a call from a session on the
// link's own loop completes it during the read that brought it: the
// client's response is framed before Traffic returns, and nothing waits
// in the loop's queue (it used to be posted there, to be applied after
// the read).
func TestAnswerAppliedOnItsLoop(t *testing.T) {
	p := newLoopProxy(t, nil, Config{})
	p.post.ctr.Now = nowNanos()
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":"a","method":"edge/echo","params":{"x":1}}`))
	if out := string(p.l.Output()); !strings.Contains(out, `"id":1,`) {
		t.Fatalf("forwarded %q", out)
	}
	answer := []byte(`{"jsonrpc":"2.0","id":1,"result":{"x":1}}` + "\n")
	if n, err := p.l.Traffic(answer); n != len(answer) || err != nil {
		t.Fatalf("Traffic %d, %v", n, err)
	}
	if len(p.post.queue) != 0 {
		t.Fatalf("%d completions queued for the loop, want the answer applied at once", len(p.post.queue))
	}
	got := frames(t, p.sink.out)
	if len(got) != 1 || got[0] != `{"jsonrpc":"2.0","id":"a","result":{"x":1}}` {
		t.Fatalf("client got %q", got)
	}
	if st := p.s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		t.Fatalf("session %+v after the answer", st)
	}
}

// TestStaleAnswerDroppedOnItsLoop: the generation rule holds for an
// answer applied on its loop. The client cancels request 7 and reuses id
// 7 for a new request; the first one's late answer is dropped on the
// loop (not queued, nothing sent), and only the second's answers id 7.
func TestStaleAnswerDroppedOnItsLoop(t *testing.T) {
	p := newLoopProxy(t, nil, Config{})
	p.post.ctr.Now = nowNanos()
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":7,"method":"edge/echo","params":{"v":"old"}}`))
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":7}}`))
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":7,"method":"edge/echo","params":{"v":"new"}}`))
	p.l.Output()
	old := []byte(`{"jsonrpc":"2.0","id":1,"result":{"v":"old"}}` + "\n")
	if n, err := p.l.Traffic(old); n != len(old) || err != nil {
		t.Fatalf("Traffic %d, %v", n, err)
	}
	if len(p.post.queue) != 0 || len(p.sink.out) != 0 {
		t.Fatalf("the cancelled request's answer: %d queued, client got %q; want it dropped on the loop",
			len(p.post.queue), p.sink.out)
	}
	if st := p.s.Stats(); st.InFlightIDs != 1 || st.Tasks != 1 {
		t.Fatalf("session %+v after the stale answer, want the new request alone", st)
	}
	answer := []byte(`{"jsonrpc":"2.0","id":2,"result":{"v":"new"}}` + "\n")
	p.l.Traffic(answer)
	if got := frames(t, p.sink.out); len(got) != 1 || got[0] != `{"jsonrpc":"2.0","id":7,"result":{"v":"new"}}` {
		t.Fatalf("client got %q", got)
	}
	if st := p.s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		t.Fatalf("session %+v after the answers", st)
	}
	if p.u.Dropped() != 0 {
		t.Fatalf("%d upstream messages dropped", p.u.Dropped())
	}
}

// TestFailureDuringCancelIsQueued: a failure that happens within the
// session's own work is posted, never applied there. The client's cancel
// queues $/cancelRequest for a ws upstream that does not read, which
// takes the backlog over the bound: the link fails inside the session's
// cancel, and the calls on it (the cancelled one and another) are
// finished through the loop's queue, applied after the cancel returns.
func TestFailureDuringCancelIsQueued(t *testing.T) {
	const max = 4 << 10
	p := newLoopProxy(t, appendClientFrame, Config{MaxPendingBytes: max})
	sc := &stuckConn{}
	p.l.wc = sc
	p.post.ctr.Now = nowNanos()
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`))
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":2,"method":"edge/echo","params":{}}`))
	sc.Write(p.l.Output())
	sc.buffered = max - 10 // the upstream reads nothing more
	p.s.HandleMessage([]byte(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}`))
	if sc.closes != 1 {
		t.Fatalf("connection closed %d times, want once (over the bound)", sc.closes)
	}
	if len(p.sink.out) != 0 || len(p.post.queue) != 2 {
		t.Fatalf("during the cancel: client got %q, %d queued; want nothing sent, both calls queued",
			p.sink.out, len(p.post.queue))
	}
	p.post.apply()
	got := frames(t, p.sink.out)
	if len(got) != 1 || !strings.Contains(got[0], `"id":2,`) || !strings.Contains(got[0], "UPSTREAM_UNAVAILABLE") {
		t.Fatalf("client got %q, want request 2 answered UPSTREAM_UNAVAILABLE (1 was cancelled)", got)
	}
	if st := p.s.Stats(); st.InFlightIDs != 0 || st.Tasks != 0 {
		t.Fatalf("session %+v", st)
	}
}
