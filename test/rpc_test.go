package test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/rpc"
)

// stubborn wraps the memory backend with methods that the memory backend
// lacks:
//   - test/stubborn ignores cancellation: it returns {"stubborn":true} only
//     once release is closed. It lets a test complete a backend call after
//     its request was cancelled, which is the race CONTRACT.md section 4
//     settles.
//   - test/panic panics; test/internal returns an internal error with
//     details; test/plain returns an error that is not a *backend.Error;
//     test/app returns an application error with details (CONTRACT.md
//     section 7).
type stubborn struct {
	backend.Handler
	release chan struct{}
	once    sync.Once
}

func (s *stubborn) Call(ctx context.Context, method string, params, dst []byte) ([]byte, error) {
	switch method {
	case "test/stubborn":
		<-s.release
		return append(dst, `{"stubborn":true}`...), nil
	case "test/panic":
		panic("test/panic")
	case "test/internal":
		return dst, &backend.Error{Code: backend.CodeInternal, Message: "db exploded at 10.0.0.7",
			DataCode: "DB_DOWN", Details: []byte(`{"host":"10.0.0.7"}`)}
	case "test/plain":
		return dst, errors.New("plain failure with secrets")
	case "test/app":
		return dst, &backend.Error{Code: backend.CodeApplication, Message: "Quota exceeded",
			DataCode: "QUOTA", Details: []byte(`{"limit":[1,2]}`)}
	}
	return s.Handler.Call(ctx, method, params, dst)
}

func (s *stubborn) releaseAll() { s.once.Do(func() { close(s.release) }) }

// withStubborn installs the stubborn backend methods. The caller releases
// test/stubborn calls in t.Cleanup if the test has not done it.
func withStubborn(s *stubborn) func(*gwConfig) {
	return func(c *gwConfig) {
		s.Handler = c.rpc.Handler
		s.release = make(chan struct{})
		c.rpc.Handler = s
		// CONTRACT.md section 8: the OECP v1 methods plus the test methods.
		c.rpc.Registry = rpc.NewRegistry(
			[]string{"initialize", "plan", "apply", "update", "stop", "retry", "resubmit",
				"delete", "get", "run/submit", "run/list", "run/status", "run/force",
				"test/stubborn", "test/panic", "test/internal", "test/plain", "test/app"},
			[]string{"watch", "logs", "agent/attach", "run/watch", "run/logs", "run/attach"})
	}
}

const stubbornReq = `{"jsonrpc":"2.0","id":1,"method":"test/stubborn","params":{}}`

// TestParseErrorKeepsServing checks that a message that is not JSON gets
// -32700 with id null and that the connection keeps serving.
func TestParseErrorKeepsServing(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	for _, msg := range []string{"not json", `{"jsonrpc":"2.0","id":1,`, "", "{}}"} {
		c.sendText(msg)
		c.expectText(parseError)
	}
	c.echo()
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{}}`)
}

// TestCancelUnknownIDIsSilent checks that $/cancelRequest for an id that is
// unknown or already answered is a silent no-op (CONTRACT.md section 4).
// Cancels are handled inline: an answer would precede the echo's.
func TestCancelUnknownIDIsSilent(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	c.sendText(cancel("42"))
	c.sendText(cancel(`"nope"`))
	c.echo()
	c.sendText(`{"jsonrpc":"2.0","id":7,"method":"edge/echo","params":{}}`)
	c.expectText(`{"jsonrpc":"2.0","id":7,"result":{}}`)
	c.sendText(cancel("7")) // completed
	c.echo()
	c.expectSettled(0, 0)
}

// TestDuplicateInFlightID checks that a tracked request whose id is in flight
// gets DUPLICATE_REQUEST_ID while the original is untouched and later
// completes, and that the id is free once answered (CONTRACT.md section 3).
func TestDuplicateInFlightID(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	opener := dial(t, gw)
	c.sendText(gate("1", "dup"))
	gw.waitGate("dup", 1)
	c.sendText(gate("1", "dup"))
	c.expectText(duplicateID("1"))
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`)
	c.expectText(duplicateID("1"))
	c.sendText(`{"jsonrpc":"2.0","id":"1","method":"edge/echo","params":{}}`) // another id
	c.expectText(`{"jsonrpc":"2.0","id":"1","result":{}}`)
	if s, _ := c.stats(); s.InFlightIDs != 1 || s.Tasks != 1 {
		t.Fatalf("stats %+v, want one request in flight", s)
	}
	opener.open("dup", 1) // only the original waits
	c.expectText(gateResult("1", "dup"))
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`) // reuse
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	c.expectSettled(0, 0)
}

// TestServerBusy fills the connection's 256 task slots with gated requests:
// the 257th request gets SERVER_BUSY, id-less errors are dropped silently,
// duplicate ids are still detected first, and the slots serve again once the
// gate opens (CONTRACT.md section 3).
func TestServerBusy(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	opener := dial(t, gw)
	var burst []byte
	var want []string
	for i := 1; i <= rpc.DefaultMaxConnTasks; i++ {
		id := strconv.Itoa(i)
		burst = append(burst, textFrame(gate(id, "busy"))...)
		want = append(want, gateResult(id, "busy"))
	}
	c.write(burst)
	c.sendText(gate("257", "busy"))
	c.expectText(serverBusy("257"))
	// While every slot is busy, a message whose only answer is an id-less
	// error is dropped: the next message is the busy answer to 258.
	c.sendText("not json")
	c.sendText(`[]`)
	c.sendText(`{"jsonrpc":"2.0","method":"edge/echo","params":{}}`)
	c.sendText(`{"jsonrpc":"2.0","id":258,"method":"edge/echo","params":{}}`)
	c.expectText(serverBusy("258"))
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`)
	c.expectText(duplicateID("1"))
	c.sendText(`{"jsonrpc":"2.0","id":259,"id":259,"method":"edge/echo","params":{}}`) // untracked
	c.expectText(serverBusy("259"))
	gw.waitGate("busy", rpc.DefaultMaxConnTasks)
	opener.open("busy", rpc.DefaultMaxConnTasks)
	c.expectTexts(want...)
	c.expectSettled(0, 0)
	c.sendText("not json")
	c.expectText(parseError)
	c.sendText(`{"jsonrpc":"2.0","id":257,"method":"edge/echo","params":{}}`)
	c.expectText(`{"jsonrpc":"2.0","id":257,"result":{}}`)
}

// TestGlobalTaskCap checks that the cap on backend tasks across all
// connections answers SERVER_BUSY like the per-connection one.
func TestGlobalTaskCap(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) { c.maxTasks = 2 })
	a := dial(t, gw)
	b := dial(t, gw)
	a.sendText(gate("1", "cap"))
	a.sendText(gate("2", "cap"))
	if s, _ := a.stats(); s.Tasks != 2 {
		t.Fatalf("stats %+v, want 2 tasks", s)
	}
	b.sendText(gate("3", "cap"))
	b.expectText(serverBusy("3"))
	b.sendText(gate("3", "cap")) // its id was released
	b.expectText(serverBusy("3"))
	gw.waitGate("cap", 2)
	gw.openGate("cap") // edge/open would need a task slot too
	a.expectTexts(gateResult("1", "cap"), gateResult("2", "cap"))
	a.expectSettled(0, 0)
	b.echo()
}

// TestEnvelopeClassification sends envelopes whose answer CONTRACT.md section
// 2 decides (duplicate keys, wrong jsonrpc, id types, malformed cancels) on a
// connection that holds a gated request with id 1. Each case checks its
// answers, and that the gated request was neither cancelled nor disturbed:
// it still completes when its gate opens.
func TestEnvelopeClassification(t *testing.T) {
	gw := startGateway(t)
	opener := dial(t, gw)
	echo := func(id, result string) string { return `{"jsonrpc":"2.0","id":` + id + `,"result":` + result + `}` }
	methodNotFound := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32601,"message":"Method not found"}}`
	}
	invalidParams := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32602,"message":"Invalid params"}}`
	}
	tests := []struct {
		name string
		send string
		want []string // answers, in any order; none for a silent message
	}{
		// Section 2.4: duplicate keys make an envelope untracked; it is
		// decoded last-wins.
		{name: "duplicate id keys, last wins",
			send: `{"jsonrpc":"2.0","id":1,"id":2,"method":"edge/echo","params":{}}`,
			want: []string{echo("2", `{}`)}},
		{name: "duplicate id keys naming the live id are untracked",
			send: `{"jsonrpc":"2.0","id":1,"id":1,"method":"edge/echo","params":{"x":1}}`,
			want: []string{echo("1", `{"x":1}`)}},
		{name: "duplicate id keys, one escaped",
			send: `{"jsonrpc":"2.0","id":1,"\u0069d":2,"method":"edge/echo","params":{}}`,
			want: []string{echo("2", `{}`)}},
		{name: "duplicate id keys, last null",
			send: `{"jsonrpc":"2.0","id":5,"id":null,"method":"edge/echo","params":{}}`,
			want: []string{invalidRequest}},
		{name: "duplicate jsonrpc, last 1.0",
			send: `{"jsonrpc":"2.0","jsonrpc":"1.0","id":5,"method":"edge/echo","params":{}}`,
			want: []string{invalidRequest}},
		{name: "duplicate jsonrpc, last 2.0",
			send: `{"jsonrpc":"1.0","jsonrpc":"2.0","id":5,"method":"edge/echo","params":{"a":1}}`,
			want: []string{echo("5", `{"a":1}`)}},
		{name: "duplicate params",
			send: `{"jsonrpc":"2.0","id":5,"method":"edge/echo","params":{"a":1},"params":{"b":2}}`,
			want: []string{echo("5", `{"b":2}`)}},
		{name: "duplicate method, last known",
			send: `{"jsonrpc":"2.0","id":5,"method":"nope","method":"edge/echo","params":{"c":3}}`,
			want: []string{echo("5", `{"c":3}`)}},
		{name: "duplicate method, last unknown",
			send: `{"jsonrpc":"2.0","id":5,"method":"edge/echo","method":"nope","params":{}}`,
			want: []string{methodNotFound("5")}},
		{name: "missing params is null",
			send: `{"jsonrpc":"2.0","id":5,"method":"edge/echo"}`,
			want: []string{invalidParams("5")}},
		{name: "null params",
			send: `{"jsonrpc":"2.0","id":5,"method":"edge/echo","params":null}`,
			want: []string{invalidParams("5")}},
		{name: "missing params, unknown method",
			send: `{"jsonrpc":"2.0","id":5,"method":"nope"}`,
			want: []string{methodNotFound("5")}},
		{name: "untracked subscription method",
			send: `{"jsonrpc":"2.0","id":5,"id":5,"method":"watch","params":{}}`,
			want: []string{methodNotFound("5")}},
		{name: "cancelRequest as a tracked request",
			send: `{"jsonrpc":"2.0","id":8,"method":"$/cancelRequest","params":{"id":1,"x":0}}`,
			want: []string{methodNotFound("8")}},
		{name: "escaped member name",
			send: `{"jsonrpc":"2\u002e0","\u0069d":5,"method":"edge\/echo","params":{}}`,
			want: []string{echo("5", `{}`)}},
		{name: "surrounding whitespace",
			send: " \r\n\t{\"jsonrpc\" : \"2.0\" , \"id\" : 5 , \"method\" : \"edge/echo\" , \"params\" : { } } \n",
			want: []string{echo("5", `{ }`)}},

		// Section 3.1: the duplicate check comes first, even before the
		// jsonrpc value is checked.
		{name: "wrong jsonrpc with the live id",
			send: `{"jsonrpc":"1.0","id":1,"method":"edge/echo","params":{}}`,
			want: []string{duplicateID("1")}},
		{name: "wrong jsonrpc",
			send: `{"jsonrpc":"1.0","id":5,"method":"edge/echo","params":{}}`,
			want: []string{invalidRequest}},
		{name: "numeric jsonrpc with the live id is not tracked",
			send: `{"jsonrpc":2.0,"id":1,"method":"edge/echo","params":{}}`,
			want: []string{invalidRequest}},

		// Section 2: ids keep their JSON type.
		{name: "string id 1 is not id 1",
			send: `{"jsonrpc":"2.0","id":"1","method":"edge/echo","params":{}}`,
			want: []string{echo(`"1"`, `{}`)}},
		{name: "int64 id echoed digit for digit",
			send: `{"jsonrpc":"2.0","id":9007199254740993,"method":"edge/echo","params":{}}`,
			want: []string{echo("9007199254740993", `{}`)}},
		{name: "max int64 id",
			send: `{"jsonrpc":"2.0","id":9223372036854775807,"method":"edge/echo","params":{}}`,
			want: []string{echo("9223372036854775807", `{}`)}},
		{name: "min int64 id",
			send: `{"jsonrpc":"2.0","id":-9223372036854775808,"method":"edge/echo","params":{}}`,
			want: []string{echo("-9223372036854775808", `{}`)}},
		{name: "id over int64",
			send: `{"jsonrpc":"2.0","id":9223372036854775808,"method":"edge/echo","params":{}}`,
			want: []string{invalidRequest}},
		{name: "fractional id", send: `{"jsonrpc":"2.0","id":1.5,"method":"edge/echo","params":{}}`, want: []string{invalidRequest}},
		{name: "float id 1.0", send: `{"jsonrpc":"2.0","id":1.0,"method":"edge/echo","params":{}}`, want: []string{invalidRequest}},
		{name: "exponent id", send: `{"jsonrpc":"2.0","id":1e3,"method":"edge/echo","params":{}}`, want: []string{invalidRequest}},
		{name: "null id", send: `{"jsonrpc":"2.0","id":null,"method":"edge/echo","params":{}}`, want: []string{invalidRequest}},
		{name: "bool id", send: `{"jsonrpc":"2.0","id":true,"method":"edge/echo","params":{}}`, want: []string{invalidRequest}},
		{name: "object id", send: `{"jsonrpc":"2.0","id":{},"method":"edge/echo","params":{}}`, want: []string{invalidRequest}},
		{name: "notification", send: `{"jsonrpc":"2.0","method":"edge/echo","params":{}}`, want: []string{invalidRequest}},
		{name: "non-string method", send: `{"jsonrpc":"2.0","id":5,"method":1,"params":{}}`, want: []string{invalidRequest}},
		{name: "batch", send: `[{"jsonrpc":"2.0","id":5,"method":"edge/echo","params":{}}]`, want: []string{invalidRequest}},
		{name: "number", send: `1`, want: []string{invalidRequest}},
		{name: "string", send: `"x"`, want: []string{invalidRequest}},
		{name: "null", send: `null`, want: []string{invalidRequest}},
		{name: "empty object", send: `{}`, want: []string{invalidRequest}},
		{name: "empty message", send: ``, want: []string{parseError}},
		{name: "whitespace", send: " \n", want: []string{parseError}},
		{name: "trailing garbage", send: `{"jsonrpc":"2.0","id":5,"method":"edge/echo","params":{}}x`, want: []string{parseError}},
		{name: "trailing comma", send: `{"jsonrpc":"2.0","id":5,"method":"edge/echo","params":{},}`, want: []string{parseError}},
		{name: "two objects", send: `{}{}`, want: []string{parseError}},
		{name: "control character in string", send: "{\"jsonrpc\":\"2.0\",\"id\":\"a\x01\",\"method\":\"edge/echo\",\"params\":{}}", want: []string{parseError}},

		// Sections 2.1 and 4: cancellation.
		{name: "cancel unknown id", send: cancel("99")},
		{name: "cancel string id of the live int id", send: cancel(`"1"`)},
		{name: "cancel with a top-level id",
			send: `{"jsonrpc":"2.0","id":1,"method":"$/cancelRequest","params":{"id":99}}`},
		{name: "cancel with extra top-level members",
			send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":99},"extra":[1,2]}`},
		{name: "cancel with duplicate id keys in params",
			send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1,"id":1}}`,
			want: []string{invalidRequest}},
		{name: "cancel with an extra param",
			send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1,"x":0}}`,
			want: []string{invalidRequest}},
		{name: "cancel with an extra param first",
			send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"x":0,"id":1}}`,
			want: []string{invalidRequest}},
		{name: "cancel null id", send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":null}}`, want: []string{invalidRequest}},
		{name: "cancel float id", send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1.0}}`, want: []string{invalidRequest}},
		{name: "cancel empty params", send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{}}`, want: []string{invalidRequest}},
		{name: "cancel array params", send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":[1]}`, want: []string{invalidRequest}},
		{name: "cancel without params", send: `{"jsonrpc":"2.0","method":"$/cancelRequest"}`, want: []string{invalidRequest}},
		{name: "cancel with duplicate method keys",
			send: `{"jsonrpc":"2.0","method":"$/cancelRequest","method":"$/cancelRequest","params":{"id":1}}`,
			want: []string{invalidRequest}},
		{name: "cancel with duplicate params keys",
			send: `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1},"params":{"id":1}}`,
			want: []string{invalidRequest}},

		// Section 2.3: an unknown subscription is a silent no-op.
		{name: "subscription/cancel unknown id",
			send: `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"nope"}}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "env-" + strconv.Itoa(i)
			c := dial(t, gw)
			c.sendText(gate("1", name))
			gw.waitGate(name, 1)
			c.sendText(tt.send)
			// Inline answers precede the stats answer; backend answers may
			// come before or after it.
			_, got := c.stats()
			for len(got) < len(tt.want) {
				got = append(got, c.readText())
			}
			pending := map[string]int{}
			for _, w := range tt.want {
				pending[w]++
			}
			for _, g := range got {
				if pending[g] == 0 {
					t.Fatalf("unexpected answer %s\nwant %q", g, tt.want)
				}
				pending[g]--
			}
			// The gated request is untouched: it alone waits and completes.
			opener.t = t
			opener.open(name, 1)
			c.expectText(gateResult("1", name))
			c.expectSettled(0, 0)
		})
	}
}

// TestCancelFreesIDForReuse checks that a cancelled pending request never
// answers, that its id is free at once, and that the reused id can be
// cancelled again; once the cancelled workers return, no id and no slot is
// held (CONTRACT.md sections 3 and 4).
func TestCancelFreesIDForReuse(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	opener := dial(t, gw)
	c.sendText(gate("1", "reuse"))
	c.sendText(gate("2", "reuse")) // not cancelled: answers when the gate opens
	gw.waitGate("reuse", 2)
	c.sendText(cancel("1"))
	if s, others := c.stats(); s.InFlightIDs != 1 || len(others) > 0 {
		t.Fatalf("after cancel: stats %+v, messages %q; want id 1 released at once and no answer", s, others)
	}
	c.sendText(gate("1", "reuse")) // the id is free: no DUPLICATE_REQUEST_ID
	if s, others := c.stats(); s.InFlightIDs != 2 || len(others) > 0 {
		t.Fatalf("after reuse: stats %+v, messages %q; want ids 1 and 2 in flight", s, others)
	}
	c.sendText(cancel("1"))
	if s, others := c.stats(); s.InFlightIDs != 1 || len(others) > 0 {
		t.Fatalf("after second cancel: stats %+v, messages %q", s, others)
	}
	// Cancelled waiters leave the gate; id 2 is the one left waiting.
	gw.waitGate("reuse", 1)
	opener.open("reuse", 1)
	c.expectText(gateResult("2", "reuse"))
	c.expectSettled(0, 0)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"again":true}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"again":true}}`)
}

// TestCancelSleep cancels edge/sleep: the worker returns early and the
// request never answers.
func TestCancelSleep(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	c.sendText(`{"jsonrpc":"2.0","id":"s","method":"edge/sleep","params":{"ms":600000}}`)
	c.sendText(cancel(`"s"`))
	c.expectSettled(0, 0) // far less than the 10 minutes asked for
}

// TestStaleCompletionAfterCancel is the late-completion race of CONTRACT.md
// section 4: request 1 is cancelled while its backend call ignores the
// cancellation, id 1 is reused by a gated request, then the old call
// completes. Its completion must be dropped: no answer, and the newer request
// keeps id 1 (a third request with id 1 is a duplicate) and still completes.
func TestStaleCompletionAfterCancel(t *testing.T) {
	s := &stubborn{}
	gw := startGateway(t, withStubborn(s))
	t.Cleanup(s.releaseAll)
	c := dial(t, gw)
	opener := dial(t, gw)
	c.sendText(stubbornReq)
	c.sendText(cancel("1"))
	c.sendText(gate("1", "stale"))
	gw.waitGate("stale", 1)
	s.releaseAll()
	// The stubborn call returns and frees its slot; id 1 stays the gate's.
	c.expectSettled(1, 1)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`)
	c.expectText(duplicateID("1"))
	opener.open("stale", 1)
	c.expectText(gateResult("1", "stale"))
	c.expectSettled(0, 0)
}

// TestCancelReplyError checks --cancel-reply=error: a cancelled request gets
// exactly one -32800 Request cancelled error, whether its backend call
// returns early on cancellation (edge/gate) or completes anyway later
// (test/stubborn).
func TestCancelReplyError(t *testing.T) {
	s := &stubborn{}
	gw := startGateway(t, withStubborn(s), func(c *gwConfig) { c.rpc.CancelReply = rpc.CancelReplyError })
	t.Cleanup(s.releaseAll)
	cancelled := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32800,"message":"Request cancelled"}}`
	}
	c := dial(t, gw)
	c.sendText(gate(`"g"`, "reply"))
	gw.waitGate("reply", 1)
	c.sendText(cancel(`"g"`))
	c.expectText(cancelled(`"g"`))
	gw.waitGate("reply", 0) // the worker returned on cancellation
	c.expectSettled(0, 0)
	c.sendText(cancel(`"g"`)) // again: unknown now, silent
	c.expectSettled(0, 0)

	c.sendText(stubbornReq)
	c.sendText(cancel("1"))
	c.expectText(cancelled("1"))
	s.releaseAll()
	c.expectSettled(0, 0) // the late result is dropped
	c.echo()
}

// TestRequestsOnManyConnections runs requests on several connections at once:
// each connection gets exactly its own answers.
func TestRequestsOnManyConnections(t *testing.T) {
	gw := startGateway(t)
	const conns, per = 8, 50
	var cs []*client
	for range conns {
		cs = append(cs, dial(t, gw))
	}
	for i, c := range cs {
		var b strings.Builder
		for j := range per {
			b.Reset()
			b.WriteString(`{"jsonrpc":"2.0","id":` + strconv.Itoa(j) + `,"method":"edge/echo","params":{"c":` + strconv.Itoa(i) + `}}`)
			c.sendText(b.String())
		}
	}
	for i, c := range cs {
		var want []string
		for j := range per {
			want = append(want, `{"jsonrpc":"2.0","id":`+strconv.Itoa(j)+`,"result":{"c":`+strconv.Itoa(i)+`}}`)
		}
		c.expectTexts(want...)
	}
}

// TestBackendErrors checks the error objects of CONTRACT.md sections 7 and 8
// that the memory backend produces: params it cannot decode get -32602 with
// SCHEMA_VIOLATION, unsupported OECP methods -32000 INVALID_PHASE.
func TestBackendErrors(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	schema := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32602,"message":"Invalid params","data":{"code":"SCHEMA_VIOLATION"}}}`
	}
	tests := []struct {
		name string
		send string
		want string
	}{
		{name: "sleep without ms", send: `{"jsonrpc":"2.0","id":1,"method":"edge/sleep","params":{}}`, want: schema("1")},
		{name: "sleep negative", send: `{"jsonrpc":"2.0","id":1,"method":"edge/sleep","params":{"ms":-1}}`, want: schema("1")},
		{name: "sleep over max", send: `{"jsonrpc":"2.0","id":1,"method":"edge/sleep","params":{"ms":600001}}`, want: schema("1")},
		{name: "sleep string", send: `{"jsonrpc":"2.0","id":1,"method":"edge/sleep","params":{"ms":"5"}}`, want: schema("1")},
		{name: "sleep zero", send: `{"jsonrpc":"2.0","id":1,"method":"edge/sleep","params":{"ms":0}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"sleptMs":0}}`},
		{name: "gate without name", send: `{"jsonrpc":"2.0","id":1,"method":"edge/gate","params":{}}`, want: schema("1")},
		{name: "open without name", send: `{"jsonrpc":"2.0","id":1,"method":"edge/open","params":{"name":1}}`, want: schema("1")},
		{name: "open nobody", send: `{"jsonrpc":"2.0","id":1,"method":"edge/open","params":{"name":"none"}}`,
			want: `{"jsonrpc":"2.0","id":1,"result":{"released":0}}`},
		{name: "initialize without version", send: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, want: schema("1")},
		{name: "plan", send: `{"jsonrpc":"2.0","id":1,"method":"plan","params":{}}`,
			want: `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Backend does not support plan","data":{"code":"INVALID_PHASE"}}}`},
		{name: "run/force", send: `{"jsonrpc":"2.0","id":1,"method":"run/force","params":{}}`,
			want: `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Backend does not support run/force","data":{"code":"INVALID_PHASE"}}}`},
		{name: "stats with params", send: `{"jsonrpc":"2.0","id":1,"method":"edge/stats","params":[]}`,
			want: `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			c.sendText(tt.send)
			c.expectText(tt.want)
		})
	}
}

// TestBackendFailures checks how backend failures reach the client
// (CONTRACT.md section 7): internal errors and panics become -32603 with a
// data code and without details, application errors keep their message, code
// and details, and the connection keeps serving with its slots freed.
func TestBackendFailures(t *testing.T) {
	s := &stubborn{}
	gw := startGateway(t, withStubborn(s))
	t.Cleanup(s.releaseAll)
	c := dial(t, gw)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"test/internal","params":{}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"code":"DB_DOWN"}}}`)
	c.sendText(`{"jsonrpc":"2.0","id":2,"method":"test/app","params":{}}`)
	c.expectText(`{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"Quota exceeded","data":{"code":"QUOTA","details":{"limit":[1,2]}}}}`)
	for _, m := range []string{"test/panic", "test/plain"} {
		c.sendText(`{"jsonrpc":"2.0","id":3,"method":"` + m + `","params":{}}`)
		msg := c.readText()
		r := parseResponse(t, msg)
		if string(r.ID) != "3" || r.Error == nil || r.Error.Code != -32603 || r.Error.Message != "Internal error" ||
			r.Error.Data == nil || r.Error.Data.Code == "" || strings.Contains(msg, "secret") || strings.Contains(msg, "details") {
			t.Fatalf("%s: got %s, want -32603 Internal error with a data code and no details", m, msg)
		}
	}
	c.expectSettled(0, 0)
	c.echo()
}

// TestUntrackedRequestIsNotCancellable checks CONTRACT.md section 2.2: only
// tracked requests take part in cancellation. A request with duplicate id
// keys is untracked, so $/cancelRequest with its id is a no-op and it still
// answers.
func TestUntrackedRequestIsNotCancellable(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	opener := dial(t, gw)
	c.sendText(`{"jsonrpc":"2.0","id":"u","id":"u","method":"edge/gate","params":{"name":"untracked"}}`)
	gw.waitGate("untracked", 1)
	if s, _ := c.stats(); s.InFlightIDs != 0 || s.Tasks != 1 {
		t.Fatalf("stats %+v, want an untracked task holding no id", s)
	}
	c.sendText(cancel(`"u"`))
	c.sendText(gate(`"u"`, "untracked")) // a tracked request with the same id is no duplicate
	gw.waitGate("untracked", 2)
	opener.open("untracked", 2)
	c.expectTexts(gateResult(`"u"`, "untracked"), gateResult(`"u"`, "untracked"))
	c.expectSettled(0, 0)
}

// TestCancelledWorkKeepsItsSlot checks CONTRACT.md section 3: a slot is held
// until the worker has really finished, also after cancellation, so a client
// cannot start more work than it has slots by cancelling.
func TestCancelledWorkKeepsItsSlot(t *testing.T) {
	s := &stubborn{}
	gw := startGateway(t, withStubborn(s), func(c *gwConfig) { c.rpc.MaxConnTasks = 2 })
	t.Cleanup(s.releaseAll)
	c := dial(t, gw)
	c.sendText(stubbornReq)
	c.sendText(cancel("1"))
	c.sendText(gate("2", "slot"))
	c.sendText(gate("3", "slot"))
	c.expectText(serverBusy("3"))
	c.sendText(gate("3", "slot"))
	c.expectText(serverBusy("3"))
	s.releaseAll()
	c.expectSettled(1, 1) // the stubborn worker returned: its slot is free
	c.sendText(gate("3", "slot"))
	gw.waitGate("slot", 2)
	gw.openGate("slot")
	c.expectTexts(gateResult("2", "slot"), gateResult("3", "slot"))
	c.expectSettled(0, 0)
}

// TestCloseFreesGlobalSlots checks CONTRACT.md section 6: closing a
// connection cancels its backend work and frees its slots, also the global
// ones another connection is waiting for.
func TestCloseFreesGlobalSlots(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) { c.maxTasks = 1 })
	a := dial(t, gw)
	b := dial(t, gw)
	a.sendText(gate("1", "global"))
	gw.waitGate("global", 1)
	b.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{}}`)
	b.expectText(serverBusy("1"))
	a.conn.Close()
	gw.waitGate("global", 0)
	gw.waitTasks(0)
	b.echo()
}

// TestBatchedEchoesInOneWrite: the memory backend's edge/echo is
// non-blocking, so the echoes a turn admits run as batches of at most 64
// (rpc.Turn). 200 pipelined in one write, with request 5 cancelled and its
// id reused by a later request in the same write: every other request is
// answered exactly once, id 5 by the newer request, and nothing is left
// held. The cancelled request is dropped when its cancel arrives in the same
// read (the usual case: one write of 14 KB); should the read end between the
// two frames, it completes before the cancel and is answered, which is also
// correct. rpc.TestBatchCancelAndReuseID schedules that race exactly.
func TestBatchedEchoesInOneWrite(t *testing.T) {
	gw := startGateway(t)
	c := dial(t, gw)
	var reqs []byte
	var want []string
	for i := range 200 {
		id := strconv.Itoa(i)
		reqs = append(reqs, textFrame(`{"jsonrpc":"2.0","id":`+id+`,"method":"edge/echo","params":{"i":`+id+`}}`)...)
		switch i {
		case 5:
			reqs = append(reqs, textFrame(cancel("5"))...)
		case 150:
			reqs = append(reqs, textFrame(`{"jsonrpc":"2.0","id":5,"method":"edge/echo","params":{"again":true}}`)...)
			want = append(want, `{"jsonrpc":"2.0","id":5,"result":{"again":true}}`)
		}
		if i != 5 {
			want = append(want, `{"jsonrpc":"2.0","id":`+id+`,"result":{"i":`+id+`}}`)
		}
	}
	c.write(reqs)
	pending := map[string]int{}
	for _, w := range want {
		pending[w]++
	}
	old := `{"jsonrpc":"2.0","id":5,"result":{"i":5}}`
	for left := len(want); left > 0; {
		got := c.readText()
		if got == old {
			t.Logf("request 5 completed before its cancel was read")
			continue
		}
		if pending[got] == 0 {
			t.Fatalf("unexpected message %s", got)
		}
		pending[got]--
		left--
	}
	c.expectSettled(0, 0)
}
