package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/backend"
)

// FuzzUpstreamReader feeds arbitrary bytes from an upstream to a link with
// three unary calls and two subscriptions pending, and checks what the link
// does with them against an independent reading of each message
// (CONTRACT.md section 10: nothing an upstream sends can crash edge or reach
// another client):
//   - nothing panics, and nothing makes the reader allocate what a header
//     merely claims;
//   - every call is finished exactly once (the reader's drops included, once
//     the link fails at the end);
//   - a call is finished with a result or an error object only by an answer
//     carrying its own upstream id, and that result passes byte for byte;
//   - a subscription is established only by the answer to its own id, and
//     its result carries the Stream's ID as every subscriptionId;
//   - an event reaches only the subscription the upstream established with
//     that subscriptionId, and its body never carries the upstream's
//     subscriptionId;
//   - what edge writes back to an NDJSON upstream stays one JSON value a line.
//
// The first byte of the input selects the transport (bit 0: WebSocket
// frames through Traffic, as the link's event loop hands them over in
// pieces, else NDJSON lines through handleLine) and
// which calls are cancelled before the bytes arrive (bits 1-5).
func FuzzUpstreamReader(f *testing.F) {
	for _, s := range readerSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		newReaderFuzz(t, data[0]).run(data[1:])
	})
}

// fuzzMax is the message limit of the fuzzed link: small, so that the
// fuzzer reaches over-long messages.
const fuzzMax = 512

// readerFuzz is one run of FuzzUpstreamReader: a link, its calls, and what
// the message being handled says (cur), for the checks in the fake call.
type readerFuzz struct {
	t     *testing.T
	l     *link
	ws    bool
	calls []*fakeCall
	cur   *message // the NDJSON line being handled; nil when unknown (WebSocket)
	// failing is set while the link fails: calls end without a message.
	failing bool
}

func newReaderFuzz(t *testing.T, ctl byte) *readerFuzz {
	u := testUpstream(nil, Config{MaxMessageBytes: fuzzMax})
	r := &readerFuzz{t: t, ws: ctl&1 != 0}
	if r.ws {
		r.l = newLink(u, "fuzz", appendClientFrame, true)
	} else {
		r.l = newLink(u, "fuzz", nil, false)
	}
	r.l.open()
	for i, m := range []string{"edge/echo", "edge/gate", "edge/echo", "edge/ticks", "edge/ticks"} {
		c := &fakeCall{f: r, id: uint64(i + 1), method: m, params: []byte(`{"n":` + strconv.Itoa(i+1) + `}`)}
		if m == "edge/ticks" {
			c.st = &fakeStream{c: c, id: "s" + strconv.Itoa(i+1)}
		}
		r.calls = append(r.calls, c)
		r.l.forward(c, 0)
	}
	for i, c := range r.calls {
		if ctl&(2<<i) != 0 {
			r.l.Cancel(c.id)
			c.cancelled = true
		}
	}
	return r
}

func (r *readerFuzz) run(data []byte) {
	t := r.t
	if r.ws {
		// In pieces of 1 to 16 bytes (the first byte says), keeping what
		// Traffic leaves, as the loop's input buffer does.
		var buf []byte
		step := 1
		if len(data) > 0 {
			step = int(data[0]&15) + 1
		}
		for len(data) > 0 {
			k := min(step, len(data))
			buf = append(buf, data[:k]...)
			data = data[k:]
			n, err := r.l.Traffic(buf, nowNanos())
			if n < 0 || n > len(buf) {
				t.Fatalf("Traffic consumed %d of %d bytes", n, len(buf))
			}
			if err != nil {
				break
			}
			buf = buf[:copy(buf, buf[n:])]
			if len(buf) > fuzzMax+16 {
				t.Fatalf("Traffic left %d bytes waiting, over a message and a header", len(buf))
			}
		}
	} else {
		out0 := len(r.l.out)
		for _, line := range bytes.Split(data, []byte{'\n'}) {
			r.cur = parseMessage(line)
			r.l.readLines(append(line[:len(line):len(line)], '\n'), fuzzMax)
		}
		r.cur = nil
		// What edge answered the upstream (a -32601 per request) is
		// NDJSON: one valid JSON value a line.
		for _, line := range bytes.Split(bytes.TrimSuffix(r.l.out[out0:], []byte{'\n'}), []byte{'\n'}) {
			if len(line) > 0 && !json.Valid(line) {
				t.Fatalf("edge wrote an invalid line to the upstream: %q", line)
			}
		}
	}
	if n := r.l.inflight.Load(); n < 0 {
		t.Fatalf("inflight %d < 0", n)
	}
	r.failing = true
	r.l.fail()
	for _, c := range r.calls {
		if c.finished != 1 {
			t.Fatalf("call %d (%s) finished %d times, want once", c.id, c.method, c.finished)
		}
	}
	if n := r.l.inflight.Load(); n != 0 {
		t.Fatalf("inflight %d after fail, want 0", n)
	}
}

// message is an independent reading of one upstream line with
// encoding/json (duplicate members: the last one wins, as in handle).
type message struct {
	valid  bool // a JSON object
	id     json.RawMessage
	result json.RawMessage
	errObj json.RawMessage
	method string
	subID  *string         // params.subscriptionId, when a string
	reason json.RawMessage // params.reason
	cursor json.RawMessage // params.cursor
}

func parseMessage(line []byte) *message {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return &message{}
	}
	msg := &message{valid: true, id: m["id"], result: m["result"], errObj: m["error"]}
	_ = json.Unmarshal(m["method"], &msg.method)
	var params map[string]json.RawMessage
	if json.Unmarshal(m["params"], &params) == nil {
		var s string
		if json.Unmarshal(params["subscriptionId"], &s) == nil && len(params["subscriptionId"]) > 0 && params["subscriptionId"][0] == '"' {
			msg.subID = &s
		}
		msg.reason, msg.cursor = params["reason"], params["cursor"]
	}
	return msg
}

// answers reports whether the message is the answer to upstream id.
func (m *message) answers(id uint64) bool {
	return m != nil && m.valid && string(m.id) == strconv.FormatUint(id, 10)
}

// fakeCall is a backend.Call that checks how the link finishes it.
type fakeCall struct {
	f         *readerFuzz
	id        uint64 // the upstream id forward gives it (1, 2, ...)
	method    string
	params    []byte
	st        *fakeStream
	cancelled bool
	finished  int
}

func (c *fakeCall) Method() string { return c.method }
func (c *fakeCall) Params() []byte { return c.params }
func (c *fakeCall) Stream() backend.Stream {
	if c.st == nil {
		return nil
	}
	return c.st
}

func (c *fakeCall) Finish(result []byte, err error) {
	t, cur := c.f.t, c.f.cur
	c.finished++
	if c.finished > 1 {
		t.Fatalf("call %d finished again (%q, %v)", c.id, result, err)
	}
	if c.f.failing {
		var want error = backend.ErrUpstreamUnavailable
		if c.st != nil && c.st.established {
			want = backend.ErrUpstreamLost
		}
		if result != nil || err != want {
			t.Fatalf("call %d finished (%q, %v) by fail, want %v", c.id, result, err, want)
		}
		return
	}
	known := cur != nil // the message being handled is known (NDJSON)
	var raw *backend.RawError
	switch {
	case c.cancelled && c.st == nil:
		// A cancelled call's answer is awaited and dropped.
		if result != nil || err != backend.ErrUpstreamUnavailable {
			t.Fatalf("cancelled call %d finished (%q, %v), want UPSTREAM_UNAVAILABLE", c.id, result, err)
		}
		if known && !cur.answers(c.id) {
			t.Fatalf("cancelled call %d finished by a message with id %s", c.id, cur.id)
		}
	case c.st != nil && c.st.established:
		// A live subscription ends only by its own subscription/closed.
		if result != nil || (err != nil && err != backend.ErrUpstreamLost) {
			t.Fatalf("subscription %d ended with (%q, %v)", c.id, result, err)
		}
		if known {
			if cur.method != "subscription/closed" || cur.subID == nil || *cur.subID != c.st.upSub {
				t.Fatalf("subscription %d (upstream %q) ended by %+v", c.id, c.st.upSub, cur)
			}
			if done := string(cur.reason) == `"done"`; done != (err == nil) {
				t.Fatalf("subscription %d ended %v by reason %s", c.id, err, cur.reason)
			}
		}
	case errors.As(err, &raw):
		if result != nil {
			t.Fatalf("call %d finished with a result and an error", c.id)
		}
		if known && (!cur.answers(c.id) || !bytes.Equal(raw.Object, cur.errObj)) {
			t.Fatalf("call %d finished with error %s by a message with id %s error %s", c.id, raw.Object, cur.id, cur.errObj)
		}
	case err == nil && c.st == nil:
		if result == nil {
			t.Fatalf("call %d finished with neither result nor error", c.id)
		}
		if known && (!cur.answers(c.id) || !bytes.Equal(result, cur.result)) {
			t.Fatalf("call %d finished with result %s by a message with id %s result %s", c.id, result, cur.id, cur.result)
		}
	case err == errUpstreamProtocol && c.st != nil:
		if known && !cur.answers(c.id) {
			t.Fatalf("subscription %d refused by a message with id %s", c.id, cur.id)
		}
	case c.cancelled && err == backend.ErrUpstreamUnavailable:
		if known && !cur.answers(c.id) {
			t.Fatalf("cancelled subscription %d finished by a message with id %s", c.id, cur.id)
		}
	default:
		t.Fatalf("call %d (%s, cancelled %v) finished with (%q, %v)", c.id, c.method, c.cancelled, result, err)
	}
}

// fakeStream is a backend.Stream that checks what the link establishes and
// emits.
type fakeStream struct {
	c           *fakeCall
	id          string // edge's subscription id
	established bool
	upSub       string // the upstream's subscription id, from the establishing answer
}

func (s *fakeStream) ID() string      { return s.id }
func (*fakeStream) Namespace() string { return "" }

func (s *fakeStream) Establish(result []byte) {
	t, cur := s.c.f.t, s.c.f.cur
	if s.established || s.c.finished > 0 || s.c.cancelled {
		t.Fatalf("subscription %d established again, after Finish or after a cancel", s.c.id)
	}
	s.established = true
	ids, err := memberValues(result, "subscriptionId")
	if err != nil || len(ids) == 0 {
		t.Fatalf("subscription %d established with %q (%v)", s.c.id, result, err)
	}
	for _, v := range ids {
		if string(v) != strconv.Quote(s.id) {
			t.Fatalf("subscription %d established with %s, want subscriptionId %q everywhere", s.c.id, result, s.id)
		}
	}
	if cur == nil {
		s.upSub = "\x00unknown"
		return
	}
	if !cur.answers(s.c.id) || cur.result == nil {
		t.Fatalf("subscription %d established by a message with id %s", s.c.id, cur.id)
	}
	var r map[string]json.RawMessage
	if err := json.Unmarshal(cur.result, &r); err != nil {
		t.Fatalf("subscription %d established by result %s: %v", s.c.id, cur.result, err)
	}
	if err := json.Unmarshal(r["subscriptionId"], &s.upSub); err != nil || s.upSub == "" {
		t.Fatalf("subscription %d established by result %s without a subscriptionId", s.c.id, cur.result)
	}
	for _, o := range s.c.f.calls {
		if o.st != nil && o.st != s && o.st.established && o.finished == 0 && o.st.upSub == s.upSub {
			t.Fatalf("subscriptions %d and %d both live as upstream %q", o.id, s.c.id, s.upSub)
		}
	}
}

func (s *fakeStream) Emit(cursor, body []byte) bool {
	t, cur := s.c.f.t, s.c.f.cur
	if !s.established || s.c.finished > 0 {
		t.Fatalf("event for subscription %d before Establish or after Finish", s.c.id)
	}
	if ids, err := memberValues(append(append([]byte("{"), body...), '}'), "subscriptionId"); err != nil || len(ids) > 0 {
		t.Fatalf("event body %q for subscription %d: members %q, %v", body, s.c.id, ids, err)
	}
	if cur != nil {
		if cur.method != "event" || cur.subID == nil || *cur.subID != s.upSub {
			t.Fatalf("event for subscription %d (upstream %q) from %+v", s.c.id, s.upSub, cur)
		}
		if !bytes.Equal(cursor, cur.cursor) {
			t.Fatalf("event cursor %q, the upstream sent %q", cursor, cur.cursor)
		}
	}
	return true
}

func (s *fakeStream) EmitWait(_ context.Context, cursor, body []byte) bool {
	return s.Emit(cursor, body)
}

// memberValues returns the raw values of every member named key of the
// JSON object obj, duplicates included, in order.
func memberValues(obj []byte, key string) ([]json.RawMessage, error) {
	d := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not an object: %v", err)
	}
	var out []json.RawMessage
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		if tok == key {
			out = append(out, v)
		}
	}
	if _, err := d.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

// readerSeeds are inputs that reach every path of the reader: answers,
// errors, subscriptions established, events, closes, requests, garbage,
// and the same as WebSocket frames.
func readerSeeds() [][]byte {
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"result":{"n":1}}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"x","data":{"code":"X"}}}`,
		`{"jsonrpc":"2.0","id":4,"result":{"subscriptionId":"u1","extra":[1,2]}}`,
		`{"jsonrpc":"2.0","id":5,"result":{"subscriptionId":"u2"}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"u1","cursor":"1","seq":1}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"seq":2,"subscriptionId":"u2","cursor":"c"}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"nope","cursor":"1"}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"u1","reason":"done","lastDeliveredCursor":"1"}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"u2","reason":"SLOW_CONSUMER"}}`,
		`{"jsonrpc":"2.0","id":7,"method":"boom","params":{}}`,
		`{"jsonrpc":"2.0","id":"x","method":"boom"}`,
		`{"jsonrpc":"2.0","id":3,"result":{}}`,
		`{"jsonrpc":"2.0","id":3,"result":{}}`,
		`{"jsonrpc":"2.0","id":99,"result":{}}`,
		`not json`,
		`{"jsonrpc":"1.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":1}`,
		`[1,2]`,
		"",
	}
	all := []byte(nil)
	for _, l := range lines {
		all = append(append(all, l...), '\n')
	}
	seeds := [][]byte{append([]byte{0}, all...), append([]byte{0x3e}, all...)}
	for _, l := range lines {
		seeds = append(seeds, append([]byte{0}, l...))
	}
	seeds = append(seeds, append([]byte{0}, bytes.Repeat([]byte{'x'}, fuzzMax+1)...))
	seeds = append(seeds, []byte("\x00{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"subscriptionId\":\"a\",\"subscriptionId\":\"b\"}}\n"+
		"{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"subscriptionId\":\"b\",\"subscriptionId\":\"a\"}}\n"))
	// WebSocket frames, unmasked as a server sends them, one of them
	// fragmented, with a ping between the fragments.
	var frames []byte
	for _, l := range lines {
		frames = appendServerFrame(frames, true, ws.OpText, []byte(l))
	}
	frames = appendServerFrame(frames, false, ws.OpText, []byte(`{"jsonrpc":"2.0",`))
	frames = appendServerFrame(frames, true, ws.OpPing, []byte("p"))
	frames = appendServerFrame(frames, true, ws.OpContinuation, []byte(`"id":1,"result":{}}`))
	frames = appendServerFrame(frames, true, ws.OpBinary, []byte(`{}`))
	frames = appendServerFrame(frames, true, ws.OpClose, nil)
	seeds = append(seeds, append([]byte{1}, frames...), append([]byte{0x3f}, frames...))
	return seeds
}

// appendServerFrame appends one unmasked frame.
func appendServerFrame(dst []byte, fin bool, op ws.OpCode, payload []byte) []byte {
	var b bytes.Buffer
	_ = ws.WriteHeader(&b, ws.Header{Fin: fin, OpCode: op, Length: int64(len(payload))})
	return append(append(dst, b.Bytes()...), payload...)
}
