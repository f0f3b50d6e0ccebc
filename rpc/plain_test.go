package rpc

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// plainFwd is a forwarder that keeps every call it gets, and counts cancels.
type plainFwd struct {
	calls     []backend.Call
	cancelled []uint64
}

func (f *plainFwd) Forward(c backend.Call, _ backend.Origin) backend.Ticket {
	f.calls = append(f.calls, c)
	return backend.NewTicket(f, uint64(len(f.calls)))
}

func (f *plainFwd) Cancel(id uint64) { f.cancelled = append(f.cancelled, id) }

// newPlainSession is a jsonrpc session whose every method goes to fwd.
func newPlainSession(t *testing.T, fwd *plainFwd, patterns []string, sink *listSink) (*Session, *batchLoop) {
	t.Helper()
	pool := backend.NewPool(4, time.Minute)
	t.Cleanup(pool.Close)
	srv, err := NewServer(Config{Handler: backend.NewMemory(), Pool: pool, Profile: ProfileJSONRPC, SubscribeMethods: patterns,
		Forward: func(string) backend.Forwarder { return fwd }, SubscriptionBuffer: 4,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	l := &batchLoop{turn: srv.NewTurn()}
	return srv.NewSession(WebSocket, sink, l), l
}

// TestPlainSubscription: eth_subscribe is a subscription under the jsonrpc
// profile: the client gets edge's own id, events in the NS_subscription
// shape with "subscription" set to that id and "result" byte for byte,
// NS_unsubscribe ends it (true; then false) and cancels it at the forwarder,
// and an upstream loss is an NS_subscription error.
func TestPlainSubscription(t *testing.T) {
	fwd := &plainFwd{}
	sink := &listSink{}
	s, l := newPlainSession(t, fwd, nil, sink)

	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`))
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["logs",{}]}`))
	if len(fwd.calls) != 2 {
		t.Fatalf("forwarded %d calls, want 2", len(fwd.calls))
	}
	a, b := fwd.calls[0].Stream(), fwd.calls[1].Stream()
	if a == nil || b == nil || a.Namespace() != "eth" || a.ID() == b.ID() {
		t.Fatalf("streams %v %v: want two plain eth subscriptions with distinct ids", a, b)
	}
	a.Establish([]byte(`"0xupstream-a"`))
	b.Establish([]byte(`"0xupstream-b"`))
	a.Emit(nil, []byte(`"result":{"number":"0x1"}`))
	b.Emit(nil, []byte(`"result":{"log":1}`))
	a.Emit(nil, []byte(`"result":{"number":"0x2"}`))
	l.apply()
	want := []string{
		`{"jsonrpc":"2.0","id":1,"result":"` + a.ID() + `"}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"` + a.ID() + `","result":{"number":"0x1"}}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"` + a.ID() + `","result":{"number":"0x2"}}}`,
		`{"jsonrpc":"2.0","id":2,"result":"` + b.ID() + `"}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"` + b.ID() + `","result":{"log":1}}}`,
	}
	if !slices.Equal(sink.msgs, want) {
		t.Fatalf("client got\n%s\nwant\n%s", strings.Join(sink.msgs, "\n"), strings.Join(want, "\n"))
	}

	sink.msgs = nil
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":3,"method":"eth_unsubscribe","params":["` + a.ID() + `"]}`))
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":4,"method":"eth_unsubscribe","params":["` + a.ID() + `"]}`))
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":5,"method":"eth_unsubscribe","params":["0xnope"]}`))
	want = []string{`{"jsonrpc":"2.0","id":3,"result":true}`, `{"jsonrpc":"2.0","id":4,"result":false}`, `{"jsonrpc":"2.0","id":5,"result":false}`}
	if !slices.Equal(sink.msgs, want) {
		t.Fatalf("unsubscribe answers %q, want %q", sink.msgs, want)
	}
	if !slices.Equal(fwd.cancelled, []uint64{1}) {
		t.Fatalf("cancelled at the forwarder: %v, want [1] (the unsubscribed one)", fwd.cancelled)
	}
	if a.Emit(nil, []byte(`"result":3`)) {
		t.Fatal("an unsubscribed stream still takes events")
	}
	fwd.calls[0].Finish(nil, nil) // the forwarder settles the cancelled call
	l.apply()

	sink.msgs = nil
	fwd.calls[1].Finish(nil, backend.ErrUpstreamLost)
	l.apply()
	want = []string{`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"` + b.ID() + `","error":{"code":-32000,"message":"Upstream lost","data":{"code":"UPSTREAM_LOST"}}}}`}
	if !slices.Equal(sink.msgs, want) {
		t.Fatalf("upstream lost: client got %q, want %q", sink.msgs, want)
	}
	if st := s.Stats(); st.Subscriptions != 0 || st.Tasks != 0 {
		t.Fatalf("stats after both ended: %+v", st)
	}
}

// TestPlainSubscriptionSlowConsumer: a plain subscription whose buffer
// overflows ends with an NS_subscription error "Slow consumer" and is
// cancelled at the forwarder.
func TestPlainSubscriptionSlowConsumer(t *testing.T) {
	fwd := &plainFwd{}
	sink := &listSink{}
	s, l := newPlainSession(t, fwd, []string{"*_subscribe"}, sink)
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"foo_subscribe","params":[]}`))
	st := fwd.calls[0].Stream()
	st.Establish([]byte(`"x"`))
	l.apply()
	for i := range 10 { // the buffer holds 4
		st.Emit(nil, []byte(`"result":`+string(rune('0'+i))))
	}
	l.apply()
	last := sink.msgs[len(sink.msgs)-1]
	if want := `{"jsonrpc":"2.0","method":"foo_subscription","params":{"subscription":"` + st.ID() + `","error":{"code":-32000,"message":"Slow consumer"}}}`; last != want {
		t.Fatalf("last message %s, want %s", last, want)
	}
	if len(fwd.cancelled) != 1 {
		t.Fatalf("cancels at the forwarder: %v, want one", fwd.cancelled)
	}
}

// TestPlainSubscribePatterns: only the configured patterns are
// subscriptions, NS_unsubscribe only for their namespaces; the OECP profile
// has none; bad patterns are refused.
func TestPlainSubscribePatterns(t *testing.T) {
	pool := backend.NewPool(1, time.Minute)
	t.Cleanup(pool.Close)
	srv, err := NewServer(Config{Handler: backend.NewMemory(), Pool: pool, Profile: ProfileJSONRPC,
		SubscribeMethods: []string{"eth_subscribe", "*_watch_subscribe"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"eth_subscribe": "eth", "a_watch_subscribe": "a_watch", "x_subscribe": "", "eth_subscription": "", "_subscribe": ""} {
		if got := srv.plainNamespace(name); got != want {
			t.Errorf("plainNamespace(%q) = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]string{"eth_unsubscribe": "eth", "x_unsubscribe": "", "b_watch_unsubscribe": "b_watch"} {
		if got := srv.unsubscribeNamespace(name); got != want {
			t.Errorf("unsubscribeNamespace(%q) = %q, want %q", name, got, want)
		}
	}
	oecp, err := NewServer(Config{Handler: backend.NewMemory(), Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if got := oecp.plainNamespace("eth_subscribe"); got != "" {
		t.Errorf("the oecp profile has plain subscriptions: %q", got)
	}
	for _, bad := range []string{"subscribe", "*", "eth_sub", "a*_subscribe", "*_subscribe*", "_subscribe", "*subscribe"} {
		if _, err := NewServer(Config{Handler: backend.NewMemory(), Pool: pool, Profile: ProfileJSONRPC, SubscribeMethods: []string{bad}}); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

// unaryFwd is a plainFwd that carries unary calls only, as an http
// upstream does.
type unaryFwd struct{ plainFwd }

func (*unaryFwd) UnaryOnly() bool { return true }

// TestPlainSubscribeToUnaryOnly: with the jsonrpc profile, a subscription
// method (plain, or the registry's) routed to an upstream that carries
// unary calls only is forwarded as a unary call, whose answer the client
// gets as the upstream gave it.
func TestPlainSubscribeToUnaryOnly(t *testing.T) {
	fwd := &unaryFwd{}
	pool := backend.NewPool(4, time.Minute)
	t.Cleanup(pool.Close)
	srv, err := NewServer(Config{Handler: backend.NewMemory(), Pool: pool, Profile: ProfileJSONRPC,
		Forward: func(string) backend.Forwarder { return fwd }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sink := &listSink{}
	l := &batchLoop{turn: srv.NewTurn()}
	s := srv.NewSession(WebSocket, sink, l)
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`))
	s.HandleMessage([]byte(`{"jsonrpc":"2.0","id":2,"method":"edge/ticks","params":{}}`))
	if len(fwd.calls) != 2 || fwd.calls[0].Stream() != nil || fwd.calls[1].Stream() != nil {
		t.Fatalf("forwarded %d calls, want 2 unary ones", len(fwd.calls))
	}
	fwd.calls[0].Finish(nil, &backend.RawError{Object: []byte(`{"code":-32601,"message":"notifications not supported"}`)})
	l.apply()
	if want := `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"notifications not supported"}}`; len(sink.msgs) != 1 || sink.msgs[0] != want {
		t.Fatalf("client got %q, want %s", sink.msgs, want)
	}
}
