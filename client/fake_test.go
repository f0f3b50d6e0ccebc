package client_test

// Tests against a scripted NDJSON server: the test reads each line the client
// writes and writes exactly the lines it wants, so that wire shapes and
// orderings the real gateway produces only by chance are deterministic here.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/openengine/edge/client"
)

// fake is one accepted connection of a scripted NDJSON server.
type fake struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

// startFake listens on 127.0.0.1:0, dials it with a client and returns both
// ends. Both are closed in t.Cleanup.
func startFake(t *testing.T, opts *client.Options) (*fake, *client.Client) {
	t.Helper()
	watchdog(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- conn
	}()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := client.Dial(ctx, "tcp://"+ln.Addr().String(), opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	conn := recv(t, accepted, "the client's connection")
	if conn == nil {
		t.Fatalf("accept failed")
	}
	t.Cleanup(func() { conn.Close() })
	return &fake{t: t, conn: conn, br: bufio.NewReader(conn)}, c
}

// expect requires the client's next line to be want.
func (f *fake) expect(want string) {
	f.t.Helper()
	if got := f.read(); got != want {
		f.t.Fatalf("client sent  %s\nwant %s", got, want)
	}
}

func (f *fake) read() string {
	f.t.Helper()
	f.conn.SetReadDeadline(time.Now().Add(waitTimeout))
	line, err := f.br.ReadString('\n')
	if err != nil {
		f.t.Fatalf("read from the client: %v (got %q)", err, line)
	}
	return line[:len(line)-1]
}

// expectNothing requires the client to send nothing for a moment. Only for
// asserting absence.
func (f *fake) expectNothing() {
	f.t.Helper()
	f.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	line, err := f.br.ReadString('\n')
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		f.t.Fatalf("client sent %q (%v), want nothing", line, err)
	}
}

// send writes lines to the client, each followed by "\n".
func (f *fake) send(lines ...string) {
	f.t.Helper()
	var b []byte
	for _, l := range lines {
		b = append(append(b, l...), '\n')
	}
	f.conn.SetWriteDeadline(time.Now().Add(waitTimeout))
	if _, err := f.conn.Write(b); err != nil {
		f.t.Fatalf("write to the client: %v", err)
	}
}

func request(id int, method, params string) string {
	return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"` + method + `","params":` + params + `}`
}

func result(id int, res string) string {
	return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"result":` + res + `}`
}

func event(sid, body string) string {
	return `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"` + sid + `"` + body + `}}`
}

func closed(sid, rest string) string {
	return `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"` + sid + `"` + rest + `}}`
}

func subCancel(sid string) string {
	return `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"` + sid + `"}}`
}

// async runs fn on a goroutine and returns its error on a channel.
func async(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// TestFakeWire checks the bytes of a request, that answers are matched by
// id whatever their order, and that messages that are not the client's to
// handle (unknown or null ids, garbage, unknown notifications, events of
// unknown subscriptions) are ignored.
func TestFakeWire(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	var a, b json.RawMessage
	ea := async(func() error { return c.Call(context.Background(), "m/a", map[string]string{"k": "\u00e9\"<"}, &a) })
	f.expect(request(1, "m/a", `{"k":"é\"\u003c"}`))
	eb := async(func() error { return c.Call(context.Background(), "m/b", nil, &b) })
	f.expect(request(2, "m/b", `{}`))
	f.send(
		result(99, `{"stray":true}`),
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`,
		`{"jsonrpc":"2.0","id":"2","result":{"string id":true}}`,
		`not json`,
		``,
		`{"jsonrpc":"2.0","method":"something/else","params":{"subscriptionId":"nope"}}`,
		event("nope", `,"seq":1`),
		closed("nope", `,"reason":"done"`),
		result(2, `{"b":2}`),
		"\r",
		result(1, `{"a":1}`)+"\r",
	)
	if err := recv(t, eb, "call b"); err != nil || string(b) != `{"b":2}` {
		t.Fatalf("call b: %s, %v", b, err)
	}
	if err := recv(t, ea, "call a"); err != nil || string(a) != `{"a":1}` {
		t.Fatalf("call a: %s, %v", a, err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err() = %v", err)
	}
}

// TestFakeCallCancelNDJSON: on NDJSON a cancelled call sends nothing (there
// is no $/cancelRequest, CONTRACT.md section 1.2), and its late answer is
// dropped without touching the next call.
func TestFakeCallCancelNDJSON(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	e1 := async(func() error { return c.Call(ctx, "m", nil, nil) })
	f.expect(request(1, "m", `{}`))
	cancel()
	if err := recv(t, e1, "the cancelled call"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}
	f.expectNothing()
	var res json.RawMessage
	e2 := async(func() error { return c.Call(context.Background(), "m", nil, &res) })
	f.expect(request(2, "m", `{}`))
	f.send(result(1, `{"late":true}`), result(2, `{"n":2}`))
	if err := recv(t, e2, "the next call"); err != nil || string(res) != `{"n":2}` {
		t.Fatalf("next call: %s, %v", res, err)
	}
}

// TestFakeSubscriptionClosedByServer maps subscription/closed to Err: "done"
// is nil, anything else a *ClosedError (not Local) with the server's
// lastDeliveredCursor when it gives one. Buffered events stay readable.
func TestFakeSubscriptionClosedByServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		closed string
		reason string // "" for Err() == nil
		cursor string
	}{
		{"done", `,"reason":"done","lastDeliveredCursor":"2"`, "", ""},
		{"slow consumer", `,"reason":"SLOW_CONSUMER","lastDeliveredCursor":"2"`, "SLOW_CONSUMER", `"2"`},
		{"slow consumer numeric cursor", `,"reason":"SLOW_CONSUMER","lastDeliveredCursor":17`, "SLOW_CONSUMER", `17`},
		{"slow consumer without cursor", `,"reason":"SLOW_CONSUMER"`, "SLOW_CONSUMER", ``},
		{"unknown reason", `,"reason":"KICKED"`, "KICKED", ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, c := startFake(t, nil)
			type res struct {
				sub *client.Subscription
				err error
			}
			ch := make(chan res, 1)
			go func() {
				s, err := c.Subscribe(context.Background(), "s", map[string]int{"n": 1})
				ch <- res{s, err}
			}()
			f.expect(request(1, "s", `{"n":1}`))
			f.send(result(1, `{"subscriptionId":"x1","extra":[1]}`),
				event("x1", `,"cursor":"1","seq":1`), event("x1", `,"cursor":"2","seq":2`),
				closed("x1", tt.closed))
			r := recv(t, ch, "Subscribe")
			if r.err != nil {
				t.Fatalf("Subscribe: %v", r.err)
			}
			if r.sub.ID != "x1" || string(r.sub.Result) != `{"subscriptionId":"x1","extra":[1]}` {
				t.Fatalf("ID %q Result %s", r.sub.ID, r.sub.Result)
			}
			evs := drain(t, r.sub)
			if len(evs) != 2 || string(evs[1]) != `{"subscriptionId":"x1","cursor":"2","seq":2}` {
				t.Fatalf("events %q", evs)
			}
			err := r.sub.Err()
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				return
			}
			var ce *client.ClosedError
			if !errors.As(err, &ce) || ce.Reason != tt.reason || ce.Local || string(ce.LastDeliveredCursor) != tt.cursor {
				t.Fatalf("Err() = %#v, want reason %s cursor %s from the server", err, tt.reason, tt.cursor)
			}
			// The server ended it: Close sends nothing.
			if err := r.sub.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			f.expectNothing()
		})
	}
}

// TestFakeSubscriptionCloseWire: Close sends exactly one
// subscription/cancel, and events the server had in flight are dropped.
func TestFakeSubscriptionCloseWire(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	ch := make(chan *client.Subscription, 1)
	go func() {
		s, _ := c.Subscribe(context.Background(), "s", nil)
		ch <- s
	}()
	f.expect(request(1, "s", `{}`))
	f.send(result(1, `{"subscriptionId":"q\"1"}`), event(`q\"1`, `,"seq":1`))
	sub := recv(t, ch, "Subscribe")
	if sub == nil || sub.ID != `q"1` {
		t.Fatalf("Subscribe: %+v", sub)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	f.expect(subCancel(`q\"1`))
	if err := sub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	f.expectNothing()
	f.send(event(`q\"1`, `,"seq":2`), closed(`q\"1`, `,"reason":"done"`))
	var got []int
	for ev := range sub.Events() {
		var tk tick
		_ = json.Unmarshal(ev, &tk)
		got = append(got, tk.Seq)
	}
	if len(got) > 1 || sub.Err() != nil {
		t.Fatalf("events after Close: %v, Err() = %v; want at most the one before Close, nil", got, sub.Err())
	}
}

// TestFakeSubscribeAbandoned: Subscribe's ctx is cancelled while the server
// establishes; when the success response comes anyway, the client sends
// subscription/cancel for it and drops its events.
func TestFakeSubscribeAbandoned(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	e := async(func() error { _, err := c.Subscribe(ctx, "s", nil); return err })
	f.expect(request(1, "s", `{}`))
	cancel()
	if err := recv(t, e, "Subscribe"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe: %v, want context.Canceled", err)
	}
	f.expectNothing() // no $/cancelRequest on NDJSON
	f.send(result(1, `{"subscriptionId":"late"}`), event("late", `,"seq":1`))
	f.expect(subCancel("late"))
	var res json.RawMessage
	e2 := async(func() error { return c.Call(context.Background(), "m", nil, &res) })
	f.expect(request(2, "m", `{}`))
	f.send(result(2, `{}`))
	if err := recv(t, e2, "the next call"); err != nil {
		t.Fatalf("next call: %v", err)
	}
}

// TestFakeSubscribeAbandonedFails: the abandoned establishment fails; nothing
// is sent.
func TestFakeSubscribeAbandonedFails(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	e := async(func() error { _, err := c.Subscribe(ctx, "s", nil); return err })
	f.expect(request(1, "s", `{}`))
	cancel()
	if err := recv(t, e, "Subscribe"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe: %v, want context.Canceled", err)
	}
	f.send(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"no","data":{"code":"X"}}}`)
	f.expectNothing()
}

// TestFakeSlowConsumerLocalWire: the local SLOW_CONSUMER end sends one
// subscription/cancel and keeps only the buffered events.
func TestFakeSlowConsumerLocalWire(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, &client.Options{SubscriptionBuffer: 2})
	ch := make(chan *client.Subscription, 1)
	go func() {
		s, _ := c.Subscribe(context.Background(), "s", nil)
		ch <- s
	}()
	f.expect(request(1, "s", `{}`))
	f.send(result(1, `{"subscriptionId":"a"}`),
		event("a", `,"cursor":{"c":1},"seq":1`), event("a", `,"cursor":{"c":2},"seq":2`),
		event("a", `,"cursor":{"c":3},"seq":3`), event("a", `,"cursor":{"c":4},"seq":4`))
	sub := recv(t, ch, "Subscribe")
	f.expect(subCancel("a"))
	f.expectNothing()
	if evs := drain(t, sub); len(evs) != 2 {
		t.Fatalf("events %q, want the 2 buffered", evs)
	}
	var ce *client.ClosedError
	if err := sub.Err(); !errors.As(err, &ce) || ce.Reason != "SLOW_CONSUMER" || !ce.Local || string(ce.LastDeliveredCursor) != `{"c":2}` {
		t.Fatalf("Err() = %#v, want local SLOW_CONSUMER after {\"c\":2}", err)
	}
}
