package upstream

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// plainCall is a recCall of method NS_subscribe: a plain subscription.
func plainCall(ns, id string) *recCall {
	return &recCall{method: ns + "_subscribe", st: &recStream{id: id, ns: ns}}
}

// TestPlainSubscriptionOverLink: a plain JSON-RPC subscription (CONTRACT.md
// section 10) goes to the upstream as NS_subscribe with the client's
// params; its result, the upstream's id, is filed for the link (a second
// subscription given the same id on the link is UPSTREAM_PROTOCOL, a
// number is an id too); NS_subscription notifications naming it reach its
// stream with their "result" member byte for byte as the event's body, and
// no other stream (another namespace, another id); the gateway's cancel
// sends NS_unsubscribe [ID] with an id of its own, whose answer is
// consumed, not counted as garbage, and ends the entry; the link's loss
// ends a live one UPSTREAM_LOST.
func TestPlainSubscriptionOverLink(t *testing.T) {
	u := testUpstream(nil, Config{})
	l := newLink(u, "t", nil, false)
	l.open()
	a, dup, n, lost := plainCall("eth", "0x1"), plainCall("eth", "0x2"), plainCall("eth", "0x3"), plainCall("bzz", "0x4")
	tickets := []backend.Ticket{l.forward(a, 0), l.forward(dup, 0), l.forward(n, 0), l.forward(lost, 0)}
	want := `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":{}}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":{}}` + "\n" +
		`{"jsonrpc":"2.0","id":3,"method":"eth_subscribe","params":{}}` + "\n" +
		`{"jsonrpc":"2.0","id":4,"method":"bzz_subscribe","params":{}}` + "\n"
	if got := string(l.Output()); got != want {
		t.Fatalf("sent\n%s\nwant\n%s", got, want)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","id":1,"result":"0xabc"}`))
	l.handle([]byte(`{"jsonrpc":"2.0","id":2,"result":"0xabc"}`)) // the upstream's id again on this link
	l.handle([]byte(`{"jsonrpc":"2.0","id":3,"result":17}`))
	l.handle([]byte(`{"jsonrpc":"2.0","id":4,"result":"0xabc"}`)) // the same id in another namespace
	if got := strings.Join(a.st.established, "|"); got != `"0xabc"` {
		t.Fatalf("established %q, want the upstream's result", got)
	}
	var pe *backend.Error
	if len(dup.errs) != 1 || !errors.As(dup.errs[0], &pe) || pe.DataCode != "UPSTREAM_PROTOCOL" || len(dup.st.established) != 0 {
		t.Fatalf("a duplicate upstream id: finished %v, established %v; want UPSTREAM_PROTOCOL", dup.errs, dup.st.established)
	}
	if len(n.st.established) != 1 || len(lost.st.established) != 1 {
		t.Fatalf("a number id: established %v; another namespace: %v", n.st.established, lost.st.established)
	}
	dropped := u.Dropped()
	for _, msg := range []string{
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":{"number":"0x1", "hash":[1, 2]}}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":"r17","subscription":17}}`,
		`{"jsonrpc":"2.0","method":"bzz_subscription","params":{"subscription":"0xabc","result":"bzz"}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xother","result":1}}`, // none: ignored
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":{"number":"0x2"}}}`,
	} {
		l.handle([]byte(msg))
	}
	if d := u.Dropped(); d != dropped {
		t.Fatalf("dropped %d notifications, want none", d-dropped)
	}
	if got, want := strings.Join(a.st.events, "|"), ` "result":{"number":"0x1", "hash":[1, 2]}| "result":{"number":"0x2"}`; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if got, want := strings.Join(n.st.events, "|"), ` "result":"r17"`; got != want {
		t.Fatalf("events of the number id %q, want %q", got, want)
	}
	if got, want := strings.Join(lost.st.events, "|"), ` "result":"bzz"`; got != want {
		t.Fatalf("events of the other namespace %q, want %q", got, want)
	}
	for _, msg := range []string{
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc"}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":1}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":[1]}`,
		`{"jsonrpc":"2.0","method":"_subscription","params":{"subscription":"0xabc","result":1}}`,
	} {
		l.handle([]byte(msg))
	}
	if d := u.Dropped(); d != dropped+4 {
		t.Fatalf("dropped %d malformed notifications, want 4", d-dropped)
	}

	// The client unsubscribes: NS_unsubscribe with the upstream's id, and
	// its answer is edge's business.
	tickets[0].Cancel()
	tickets[2].Cancel()
	if got, want := string(l.Output()), `{"jsonrpc":"2.0","id":5,"method":"eth_unsubscribe","params":["0xabc"]}`+"\n"+
		`{"jsonrpc":"2.0","id":6,"method":"eth_unsubscribe","params":[17]}`+"\n"; got != want {
		t.Fatalf("sent\n%s\nwant\n%s", got, want)
	}
	if len(a.errs) != 1 || a.errs[0] != nil {
		t.Fatalf("the unsubscribed call finished %v, want once, nil", a.errs)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xabc","result":3}}`)) // sent before the upstream read the unsubscribe
	l.handle([]byte(`{"jsonrpc":"2.0","id":5,"result":true}`))
	l.handle([]byte(`{"jsonrpc":"2.0","id":6,"error":{"code":-32000,"message":"subscription not found"}}`))
	if d := u.Dropped(); d != dropped+4 {
		t.Fatalf("dropped %d more after the unsubscribes, want none", d-dropped-4)
	}
	if len(a.st.events) != 2 {
		t.Fatalf("an unsubscribed stream got %q", a.st.events)
	}
	if got := l.calls.len(); got != 1 || l.calls.lingering != 0 {
		t.Fatalf("%d entries (%d lingering) after the answers, want 1 (bzz), 0", got, l.calls.lingering)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","id":5,"result":true}`)) // again: unknown now
	if d := u.Dropped(); d != dropped+5 {
		t.Fatalf("a second answer to the unsubscribe: dropped %d, want it counted", d-dropped-4)
	}

	l.fail()
	if len(lost.errs) != 1 || !errors.Is(lost.errs[0], backend.ErrUpstreamLost) {
		t.Fatalf("on the link's loss the live one finished %v, want UPSTREAM_LOST", lost.errs)
	}
}

// TestPlainOrphanUnsubscribes: a plain subscription request cancelled while
// establishing, or timed out, that the upstream establishes anyway is
// ended with NS_unsubscribe [ID] at once; its events until the answer are
// dropped and counted (as an orphaned OECP one's), the answer is consumed,
// and the entry is gone with it. One that no answer comes for is forgotten
// one timeout later.
func TestPlainOrphanUnsubscribes(t *testing.T) {
	u := testUpstream(nil, Config{Timeout: time.Second})
	l := newLink(u, "t", nil, false)
	l.open()
	a, b := plainCall("eth", "0x1"), plainCall("eth", "0x2")
	ta := l.forward(a, 0)
	l.forward(b, 0)
	l.Output()
	ta.Cancel()
	if len(a.errs) != 0 {
		t.Fatal("a dropped call finished before its answer")
	}
	now := time.Now().Add(2 * time.Second).UnixNano()
	l.sweep(now) // b times out; a, dropped, too
	if len(b.errs) != 1 || !errors.Is(b.errs[0], backend.ErrUpstreamTimeout) {
		t.Fatalf("b finished %v, want UPSTREAM_TIMEOUT", b.errs)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","id":1,"result":"0xa"}`))
	l.handle([]byte(`{"jsonrpc":"2.0","id":2,"result":"0xb"}`))
	if got, want := string(l.Output()), `{"jsonrpc":"2.0","id":3,"method":"eth_unsubscribe","params":["0xa"]}`+"\n"+
		`{"jsonrpc":"2.0","id":4,"method":"eth_unsubscribe","params":["0xb"]}`+"\n"; got != want {
		t.Fatalf("sent\n%s\nwant\n%s", got, want)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xa","result":1}}`))
	if d := u.Dropped(); d != 1 {
		t.Fatalf("dropped %d, want the orphan's event counted", d)
	}
	l.handle([]byte(`{"jsonrpc":"2.0","id":3,"result":true}`))
	if d := u.Dropped(); d != 1 || l.calls.len() != 1 {
		t.Fatalf("after the answer to the unsubscribe: dropped %d, %d entries; want 1, 1", d, l.calls.len())
	}
	l.sweep(now + int64(2*time.Second))
	if l.calls.len() != 0 || l.calls.lingering != 0 {
		t.Fatalf("%d entries (%d lingering) one timeout later, want none", l.calls.len(), l.calls.lingering)
	}
	if len(a.st.established)+len(b.st.established)+len(a.st.events)+len(b.st.events) != 0 {
		t.Fatal("an orphan reached its stream")
	}
}

// TestOrphanWithLiveID: a late establishment that names the id of a live
// subscription on the same link (which the upstream cannot mean: its ids
// are unique) is ended at once: no cancel of that id is sent, which would
// end the live one at the upstream, and the live one keeps its events (it
// used to be filed over by the orphan, which then took them as dropped).
func TestOrphanWithLiveID(t *testing.T) {
	for _, ns := range []string{"", "eth"} {
		u := testUpstream(nil, Config{})
		l := newLink(u, "t", nil, false)
		l.open()
		live, late := plainCall(ns, "s1"), plainCall(ns, "s2")
		l.forward(live, 0)
		tl := l.forward(late, 0)
		tl.Cancel()
		l.Output()
		result, event := `{"subscriptionId":"u1"}`, `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"u1","seq":1}}`
		if ns != "" {
			result, event = `"u1"`, `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"u1","result":1}}`
		}
		l.handle([]byte(`{"jsonrpc":"2.0","id":1,"result":` + result + `}`))
		l.handle([]byte(`{"jsonrpc":"2.0","id":2,"result":` + result + `}`))
		if out := l.Output(); len(out) != 0 {
			t.Fatalf("%q: sent %q, want nothing", ns, out)
		}
		l.handle([]byte(event))
		if len(live.st.events) != 1 {
			t.Fatalf("%q: the live subscription got %q, want its event", ns, live.st.events)
		}
	}
}
