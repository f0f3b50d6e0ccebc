package rpc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/openengine/edge/backend"
)

// Script tests of admission, cancellation and close (CONTRACT.md sections 2-4
// and 7). The race regressions are in race_test.go.

// TestReplyBytes pins the wire helpers the scripts compare against to the
// byte shapes of CONTRACT.md section 7, spelled out literally.
func TestReplyBytes(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"result", resultReply("7", `{"a":1}`), `{"jsonrpc":"2.0","id":7,"result":{"a":1}}`},
		{"duplicate", duplicateReply(`"x"`), `{"jsonrpc":"2.0","id":"x","error":{"code":-32600,"message":"Invalid Request","data":{"code":"DUPLICATE_REQUEST_ID"}}}`},
		{"busy", busyReply("3"), `{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"Server busy","data":{"code":"SERVER_BUSY"}}}`},
		{"cancelled", cancelledReply("3"), `{"jsonrpc":"2.0","id":3,"error":{"code":-32800,"message":"Request cancelled"}}`},
		{"stats", statsReply("1", 2, 3, 4), `{"jsonrpc":"2.0","id":1,"result":{"inFlightIds":2,"tasks":3,"subscriptions":0,"outboundBytes":4}}`},
		{"cancel message", cancelMsg(`"a"`), `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"a"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got  %s\nwant %s", tt.got, tt.want)
			}
		})
	}
}

// TestDuplicateInFlightIDRejectedOriginalUntouched: a second tracked request
// with an id in flight gets DUPLICATE_REQUEST_ID (whatever its method), and
// the original keeps its id, its slot, its ctx and its one response
// (CONTRACT.md section 3.1).
func TestDuplicateInFlightIDRejectedOriginalUntouched(t *testing.T) {
	runScript(t, opts{},
		send(req("7", "get", `{"n":1}`)), backendBlock("orig"),
		send(req("7", "edge/echo", `{}`)),
		expectReply(duplicateReply("7")),
		send(req("7", "no/such/method", `{}`)),
		expectReply(duplicateReply("7")),
		send(req("7", "get", `[]`)),
		expectReply(duplicateReply("7")),
		send(req("7", "edge/stats", `{}`)),
		expectReply(duplicateReply("7")),
		expectStats(1, 1),
		expectCtxCancelled("orig", false),
		expectBackend("orig", "get", `{"n":1}`),
		backendRelease("orig", `"orig"`),
		applyNext(),
		expectReply(resultReply("7", `"orig"`)),
		expectStats(0, 0),
		send(get("7")), backendBlock("again"),
		backendRelease("again", `"again"`),
		applyNext(),
		expectReply(resultReply("7", `"again"`)),
	)
}

// TestIDsKeepTheirType: 1 and "1" are different requests; "a" and "\u0061"
// are the same id, and so are 0 and -0; every id is echoed exactly as sent
// (CONTRACT.md section 2).
func TestIDsKeepTheirType(t *testing.T) {
	runScript(t, opts{},
		send(get("1")), backendBlock("int"),
		send(get(`"1"`)), backendBlock("str"),
		expectNothing(),
		expectStats(2, 2),
		cancel(`"1"`),
		expectCtxCancelled("str", true),
		expectCtxCancelled("int", false),
		expectStats(1, 2),
		send(get(`"a"`)), backendBlock("a"),
		send(get(`"\u0061"`)),
		expectReply(duplicateReply(`"\u0061"`)),
		send(get("-0")), backendBlock("zero"),
		send(get("0")),
		expectReply(duplicateReply("0")),
		send(get("9007199254740993")), backendBlock("big"),
		cancel(`"\u0061"`),
		expectCtxCancelled("a", true),
		backendRelease("int", `"int"`),
		backendRelease("zero", `"zero"`),
		backendRelease("big", `"big"`),
		applyNext(),
		expectReply(resultReply("1", `"int"`)),
		applyNext(),
		expectReply(resultReply("-0", `"zero"`)),
		applyNext(),
		expectReply(resultReply("9007199254740993", `"big"`)),
		backendReturnOnCancel("str"),
		backendReturnOnCancel("a"),
		applyCompletions(),
		expectNothing(),
		expectStats(0, 0),
	)
}

// TestServerBusyReleasesID: with all 256 slots of the connection taken, the
// next request gets SERVER_BUSY and its id is released (asking again is
// SERVER_BUSY again, not DUPLICATE_REQUEST_ID); the duplicate check still
// comes first; a cancelled request keeps its slot until its worker returns;
// once a slot is free the id is admitted (CONTRACT.md section 3.2).
func TestServerBusyReleasesID(t *testing.T) {
	runScript(t, opts{}, cat(fill("p", DefaultMaxConnTasks), []step{
		expectStats(256, 256),
		send(get(`"x"`)),
		expectReply(busyReply(`"x"`)),
		send(get(`"x"`)),
		expectReply(busyReply(`"x"`)),
		send(get(`"p0"`)),
		expectReply(duplicateReply(`"p0"`)),
		send(req(`"x"`, "no/such/method", `{}`)),
		expectReply(busyReply(`"x"`)),
		send(`{"jsonrpc":"2.0","id":"u","id":"u","method":"get","params":{}}`), // untracked
		expectReply(busyReply(`"u"`)),
		send(req(`"x"`, "edge/stats", `{}`)),
		expectReply(busyReply(`"x"`)),
		expectStats(256, 256),
		cancel(`"p0"`),
		expectStats(255, 256),
		send(get(`"x"`)),
		expectReply(busyReply(`"x"`)), // the cancelled call still holds its slot
		backendReturnOnCancel("p0"),
		applyNext(),
		expectStats(255, 255),
		send(get(`"x"`)), backendBlock("x"),
		expectNothing(),
		expectStats(256, 256),
		send(get(`"y"`)),
		expectReply(busyReply(`"y"`)),
	})...)
}

// TestSlotsFullDropsIDLessErrors: while every slot is busy, a message whose
// only answer would be an id-less error (Parse error, Invalid Request with id
// null) is dropped silently; once a slot is free it is answered again
// (CONTRACT.md section 3.2). A tracked envelope with a wrong jsonrpc takes part
// in admission first, so with every slot busy it gets SERVER_BUSY with its id.
func TestSlotsFullDropsIDLessErrors(t *testing.T) {
	idless := []struct{ name, msg, reply string }{
		{"not JSON", `{"jsonrpc":`, parseNull},
		{"empty", ``, parseNull},
		{"batch", `[` + get("1") + `]`, invalidNull},
		{"scalar", `1`, invalidNull},
		{"notification", `{"jsonrpc":"2.0","method":"get","params":{}}`, invalidNull},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"get","params":{}}`, invalidNull},
		{"float id", `{"jsonrpc":"2.0","id":1.5,"method":"get","params":{}}`, invalidNull},
		{"malformed cancel", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1,"id":1}}`, invalidNull},
	}
	var full, free []step
	for _, m := range idless {
		full = append(full, send(m.msg), expectNothing())
		free = append(free, send(m.msg), expectReply(m.reply))
	}
	runScript(t, opts{maxConnTasks: 2}, cat(
		free,
		fill("p", 2),
		full,
		[]step{
			send(`{"jsonrpc":"1.0","id":9,"method":"get","params":{}}`),
			expectReply(busyReply("9")),
			expectStats(2, 2),
			backendRelease("p1", `1`),
			expectStats(2, 2), // posted but not applied: still full
		},
		full,
		[]step{
			applyNext(),
			expectReply(resultReply(`"p1"`, `1`)),
		},
		free,
		[]step{
			send(`{"jsonrpc":"1.0","id":9,"method":"get","params":{}}`),
			expectReply(invalidNull),
			expectStats(1, 1),
		},
	)...)
}

// TestGlobalCapAnswersServerBusy: the pool's global cap on backend tasks,
// shared by every connection, answers SERVER_BUSY the same way and releases
// the id (CONTRACT.md section 3.2). Ids are per connection.
func TestGlobalCapAnswersServerBusy(t *testing.T) {
	runScript(t, opts{poolMax: 2},
		openConn(WebSocket),
		send(get("1")), backendBlock("a"),
		sendTo(1, get("1")), backendBlock("b"), // the same id on another connection
		sendTo(1, get("2")),
		expectReplyOn(1, busyReply("2")),
		send(get("2")),
		expectReply(busyReply("2")),
		send(req("3", "no/such/method", `{}`)), // answered before it needs a backend slot
		expectReply(errorReply("3", -32601, "Method not found", "")),
		send(req("3", "edge/stats", `{}`)), // answered by the connection itself
		expectReply(statsReply("3", 1, 1, 0)),
		expectStatsOn(0, 1, 1),
		expectStatsOn(1, 1, 1),
		backendRelease("a", `"a"`),
		applyNext(),
		expectReply(resultReply("1", `"a"`)),
		awaitGlobalRunning(1),
		sendTo(1, get("2")), backendBlock("c"),
		expectStatsOn(1, 2, 2),
		send(get("2")),
		expectReply(busyReply("2")),
		backendRelease("b", `"b"`),
		backendRelease("c", `"c"`),
		applyCompletions(),
		expectReplyOn(1, resultReply("1", `"b"`)),
		expectReplyOn(1, resultReply("2", `"c"`)),
		expectStatsOn(0, 0, 0),
		expectStatsOn(1, 0, 0),
		awaitGlobalRunning(0),
	)
}

// TestWrongJSONRPCTrackedEnvelope: an envelope that is tracked (jsonrpc a
// string, id, method and params once each) but whose jsonrpc is not "2.0"
// takes part in duplicate-id admission first: with its id live it gets
// DUPLICATE_REQUEST_ID; otherwise -32600 with id null, and it reaches no
// backend (CONTRACT.md sections 2 and 3.1, golden malformed-request.ndjson).
// A non-string jsonrpc is not tracked at all.
func TestWrongJSONRPCTrackedEnvelope(t *testing.T) {
	runScript(t, opts{},
		send(get("5")), backendBlock("a"),
		send(`{"jsonrpc":"1.0","id":5,"method":"get","params":{}}`),
		expectReply(duplicateReply("5")),
		send(`{"jsonrpc":"1.0","id":6,"method":"get","params":{}}`),
		expectReply(invalidNull),
		send(`{"jsonrpc":2,"id":5,"method":"get","params":{}}`),
		expectReply(invalidNull),
		expectStats(1, 1),
		expectCtxCancelled("a", false),
		backendRelease("a", `"a"`),
		applyNext(),
		expectReply(resultReply("5", `"a"`)),
		send(`{"jsonrpc":"1.0","id":5,"method":"get","params":{}}`),
		expectReply(invalidNull),
		send(`{"jsonrpc":"1.0","id":6,"method":"get","params":{}}`), // golden malformed-request
		expectReply(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`),
		expectStats(0, 0),
	)
}

// TestMalformedCancelCancelsNothing: a $/cancelRequest that is not
// well-formed (CONTRACT.md section 2.1) is an ordinary envelope: without an id
// it is -32600 with id null, and it cancels nothing.
func TestMalformedCancelCancelsNothing(t *testing.T) {
	tests := []struct{ name, msg string }{
		{"duplicate id keys in params", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":5,"id":5}}`},
		{"escaped duplicate id key", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":5,"\u0069d":5}}`},
		{"extra member in params", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":5,"x":1}}`},
		{"float id", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":5.0}}`},
		{"null id", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":null}}`},
		{"params array", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":[5]}`},
		{"params twice", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":5},"params":{"id":5}}`},
		{"method twice", `{"jsonrpc":"2.0","method":"$/cancelRequest","method":"$/cancelRequest","params":{"id":5}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runScript(t, opts{cancelReply: CancelReplyError},
				send(get("5")), backendBlock("a"),
				send(tt.msg),
				expectReply(invalidNull),
				expectCtxCancelled("a", false),
				expectStats(1, 1),
				send(get("5")),
				expectReply(duplicateReply("5")),
				backendRelease("a", `"a"`),
				applyNext(),
				expectReply(resultReply("5", `"a"`)),
			)
		})
	}
}

// TestWellFormedCancelIgnoresOtherMembers: top-level members other than
// jsonrpc, method and params do not stop a $/cancelRequest from being one
// (CONTRACT.md section 2.1): it cancels and nothing is sent, not even for its
// own id member.
func TestWellFormedCancelIgnoresOtherMembers(t *testing.T) {
	runScript(t, opts{},
		send(get("5")), backendBlock("a"),
		send(`{"id":9,"jsonrpc":"2.0","method":"$/cancelRequest","params":{ "id" : 5 },"extra":[1]}`),
		expectNothing(),
		expectCtxCancelled("a", true),
		expectStats(0, 1),
		backendReturnOnCancel("a"),
		applyNext(),
		expectNothing(),
		expectStats(0, 0),
	)
}

// TestUnknownIDCancelIsSilentNoop: cancelling an id that is not in flight (never
// used, another type, already answered) sends nothing, also with cancel-reply
// error, and touches nothing (CONTRACT.md section 4).
func TestUnknownIDCancelIsSilentNoop(t *testing.T) {
	for _, cr := range []CancelReply{CancelReplyNone, CancelReplyError} {
		t.Run("cancel-reply "+cr.String(), func(t *testing.T) {
			runScript(t, opts{cancelReply: cr},
				cancel("99"),
				expectNothing(),
				expectStats(0, 0),
				send(get("5")), backendBlock("a"),
				cancel(`"5"`),
				cancel("6"),
				cancel(`"x"`),
				expectNothing(),
				expectCtxCancelled("a", false),
				expectStats(1, 1),
				send(`{"jsonrpc":"2.0","id":6,"id":6,"method":"get","params":{}}`), backendBlock("untracked"),
				cancel("6"), // untracked requests cannot be cancelled
				expectNothing(),
				expectCtxCancelled("untracked", false),
				backendRelease("a", `"a"`),
				backendRelease("untracked", `"u"`),
				applyCompletions(),
				expectReply(resultReply("5", `"a"`)),
				expectReply(resultReply("6", `"u"`)),
				cancel("5"),
				expectNothing(),
				expectStats(0, 0),
			)
		})
	}
}

// TestCancelledReplyEchoesTheRequestID: with cancel-reply error the -32800
// answers the cancelled request, so it carries that request's id token as the
// request spelled it, not the cancel's spelling of the same id (CONTRACT.md
// sections 2 and 4).
func TestCancelledReplyEchoesTheRequestID(t *testing.T) {
	runScript(t, opts{cancelReply: CancelReplyError},
		send(get(`"\u0061"`)), backendBlock("a"),
		cancel(`"a"`),
		expectReply(cancelledReply(`"\u0061"`)),
		send(get("-0")), backendBlock("z"),
		cancel("0"),
		expectReply(cancelledReply("-0")),
		backendReturnOnCancel("a"),
		backendReturnOnCancel("z"),
		applyCompletions(),
		expectNothing(),
		expectStats(0, 0),
	)
}

// TestCancelledIDReusedAndCancelledAgain: the same id is admitted, cancelled,
// admitted again and cancelled again several times while every earlier worker
// still runs; each cancel hits exactly the current owner; the workers return
// in scrambled order and none of them answers (CONTRACT.md section 4).
func TestCancelledIDReusedAndCancelledAgain(t *testing.T) {
	for _, cr := range []CancelReply{CancelReplyNone, CancelReplyError} {
		t.Run("cancel-reply "+cr.String(), func(t *testing.T) {
			cancelled := expectNothing()
			if cr == CancelReplyError {
				cancelled = expectReply(cancelledReply("7"))
			}
			runScript(t, opts{cancelReply: cr},
				send(get("7")), backendBlock("a"),
				cancel("7"), cancelled,
				send(get("7")), backendBlock("b"),
				expectCtxCancelled("b", false),
				cancel("7"), cancelled,
				expectCtxCancelled("b", true),
				send(get("7")), backendBlock("c"),
				expectStats(1, 3),
				cancel("7"), cancelled,
				expectCtxCancelled("c", true),
				cancel("7"), // nothing left to cancel
				expectNothing(),
				expectStats(0, 3),
				backendReturnOnCancel("b"),
				backendRelease("c", `"late"`),
				backendReturnOnCancel("a"),
				applyCompletions(),
				expectNothing(),
				expectStats(0, 0),
			)
		})
	}
}

// TestClosePendingWorkCancelsEveryCtxAndFreesSlots: closing the connection
// cancels the ctx of every running backend call (tracked or not, also one
// already returned and posted), releases every id at once, ignores later
// messages, and the completions that arrive afterwards send nothing and free
// their slots, connection and global (CONTRACT.md section 6).
func TestClosePendingWorkCancelsEveryCtxAndFreesSlots(t *testing.T) {
	runScript(t, opts{},
		send(get("1")), backendBlock("a"),
		send(get(`"2"`)), backendBlock("b"),
		send(`{"jsonrpc":"2.0","id":3,"id":3,"method":"get","params":{}}`), backendBlock("untracked"),
		send(get("4")), backendBlock("ignores-cancel"),
		backendRelease("b", `"posted before close"`),
		expectStats(3, 4),
		closeSession(),
		expectNothing(),
		expectCtxCancelled("a", true),
		expectCtxCancelled("untracked", true),
		expectCtxCancelled("ignores-cancel", true),
		expectStats(0, 4),
		send(get("5")),
		send(`{"jsonrpc":`),
		cancel("1"),
		expectNothing(),
		expectStats(0, 4),
		applyNext(),
		expectNothing(),
		expectStats(0, 3),
		backendReturnOnCancel("a"),
		backendReturnOnCancel("untracked"),
		backendRelease("ignores-cancel", `"late"`),
		applyCompletions(),
		expectNothing(),
		expectStats(0, 0),
		awaitGlobalRunning(0),
		closeSession(), // idempotent
		expectNothing(),
	)
}

// TestBackendPanicAnswersInternalError: a backend call that panics is answered
// with -32603 data.code BACKEND_PANIC, frees its id and slots, and the session
// keeps serving (CONTRACT.md section 7).
func TestBackendPanicAnswersInternalError(t *testing.T) {
	runScript(t, opts{},
		send(get("1")), backendBlock("a"),
		send(get("2")), backendBlock("b"),
		backendPanic("a"),
		applyNext(),
		expectReply(`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"code":"BACKEND_PANIC"}}}`),
		expectStats(1, 1),
		send(get("1")), backendBlock("c"),
		backendRelease("b", `"b"`),
		backendRelease("c", `"c"`),
		applyCompletions(),
		expectReply(resultReply("2", `"b"`)),
		expectReply(resultReply("1", `"c"`)),
		send(req("3", "edge/echo", `{"still":"serving"}`)), backendReturned("echo"),
		applyNext(),
		expectReply(resultReply("3", `{"still":"serving"}`)),
		expectStats(0, 0),
		awaitGlobalRunning(0),
	)
}

// TestBackendErrorsMapToWireErrors: errors returned by a backend reach the
// client as the error objects of CONTRACT.md section 7, byte for byte.
func TestBackendErrorsMapToWireErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"application", &backend.Error{Code: -32000, Message: "Idempotency key was reused with different parameters", DataCode: "IDEMPOTENCY_REUSE"},
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Idempotency key was reused with different parameters","data":{"code":"IDEMPOTENCY_REUSE"}}}`},
		{"application with details", &backend.Error{Code: -32000, Message: "Unsupported protocol version", DataCode: "UNSUPPORTED_PROTOCOL_VERSION", Details: []byte(`{"a":1}`)},
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Unsupported protocol version","data":{"code":"UNSUPPORTED_PROTOCOL_VERSION","details":{"a":1}}}}`},
		{"schema violation", backend.SchemaViolation([]byte(`{"reason":"dry-run apply must omit idempotencyKey"}`)),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params","data":{"code":"SCHEMA_VIOLATION","details":{"reason":"dry-run apply must omit idempotencyKey"}}}}`},
		{"schema violation without details", backend.SchemaViolation(nil),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params","data":{"code":"SCHEMA_VIOLATION"}}}`},
		{"internal keeps its code, loses details", &backend.Error{Code: backend.CodeInternal, Message: "db down at 10.0.0.7", DataCode: "STORE_UNAVAILABLE", Details: []byte(`{"host":"10.0.0.7"}`)},
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"code":"STORE_UNAVAILABLE"}}}`},
		{"internal without code", &backend.Error{Code: backend.CodeInternal, Message: "x"},
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"code":"INTERNAL"}}}`},
		{"wrapped backend error", fmt.Errorf("upstream: %w", backend.InvalidPhase("get")),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Backend does not support get","data":{"code":"INVALID_PHASE"}}}`},
		{"unknown method", backend.ErrUnknownMethod,
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}`},
		{"plain error", errors.New("secret detail"),
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"code":"INTERNAL"}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runScript(t, opts{},
				send(get("1")), backendBlock("a"),
				backendFail("a", tt.err),
				applyNext(),
				expectReply(tt.want),
				expectStats(0, 0),
			)
		})
	}
}

// TestBackendContextErrorOnLiveRequestIsNotACancellation: a backend may return
// a context error of its own for a request nobody cancelled (an upstream call
// with its own deadline, a context it derived and cancelled). The client did
// not cancel, so the answer must not be -32800 "Request cancelled", which
// CONTRACT.md section 7 reserves for --cancel-reply=error and which an LSP-style
// client would take for the answer to a cancel it never sent. It is a backend
// internal error like any other.
//
// Fails today: errorFields (task.go) maps context.Canceled and
// context.DeadlineExceeded to -32800 whatever the cancel-reply mode.
func TestBackendContextErrorOnLiveRequestIsNotACancellation(t *testing.T) {
	const want = `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"code":"INTERNAL"}}}`
	for _, err := range []error{context.Canceled, context.DeadlineExceeded, fmt.Errorf("upstream: %w", context.DeadlineExceeded)} {
		for _, cr := range []CancelReply{CancelReplyNone, CancelReplyError} {
			t.Run(fmt.Sprintf("%v/cancel-reply %v", err, cr), func(t *testing.T) {
				runScript(t, opts{cancelReply: cr},
					send(get("1")), backendBlock("a"),
					backendFail("a", err),
					applyNext(),
					expectReply(want),
					expectStats(0, 0),
				)
			})
		}
	}
}

// TestStatsExcludesItself: edge/stats is answered by the connection itself
// with its bookkeeping, not counting the stats request: it takes neither an id
// nor a slot (CONTRACT.md section 8). A cancelled call still running counts as
// a task, not as an in-flight id.
func TestStatsExcludesItself(t *testing.T) {
	runScript(t, opts{},
		send(req("1", "edge/stats", `{}`)),
		expectReply(statsReply("1", 0, 0, 0)),
		send(req("1", "edge/stats", `{}`)), // its id was never reserved
		expectReply(statsReply("1", 0, 0, 0)),
		send(get("2")), backendBlock("a"),
		send(get("3")), backendBlock("b"),
		cancel("3"),
		step{"outbound 77", func(h *harness) { h.sink.outbound = 77 }},
		send(req(`"s"`, "edge/stats", `{}`)),
		expectReply(statsReply(`"s"`, 1, 2, 77)),
		send(req("2", "edge/stats", `{}`)),
		expectReply(duplicateReply("2")),
		send(req("4", "edge/stats", `[]`)),
		expectReply(errorReply("4", -32602, "Invalid params", "")),
		send(`{"jsonrpc":"2.0","id":5,"id":5,"method":"edge/stats","params":{}}`), // untracked
		expectReply(statsReply("5", 1, 2, 77)),
		send(`{"jsonrpc":"2.0","id":6,"method":"edge/stats"}`), // untracked, params missing = null
		expectReply(errorReply("6", -32602, "Invalid params", "")),
		expectStats(1, 2),
		backendRelease("a", `"a"`),
		backendReturnOnCancel("b"),
		applyCompletions(),
		expectReply(resultReply("2", `"a"`)),
		send(req("7", "edge/stats", `{}`)),
		expectReply(statsReply("7", 0, 0, 77)),
	)
}

// TestNDJSONCancelRequestIsOrdinaryEnvelope: on the NDJSON binding
// $/cancelRequest is not honoured: the notification is an ordinary envelope
// and gets -32600 with id null, and the request stays in flight; with an id it
// is a tracked request for an unknown method (CONTRACT.md section 1.2).
func TestNDJSONCancelRequestIsOrdinaryEnvelope(t *testing.T) {
	runScript(t, opts{transport: NDJSON},
		send(get("1")), backendBlock("a"),
		send(cancelMsg("1")),
		expectReply(invalidNull),
		send(`{"jsonrpc":"2.0","id":9,"method":"$/cancelRequest","params":{"id":1}}`),
		expectReply(errorReply("9", -32601, "Method not found", "")),
		send(`{"jsonrpc":"2.0","id":1,"method":"$/cancelRequest","params":{"id":1}}`),
		expectReply(duplicateReply("1")),
		expectCtxCancelled("a", false),
		expectStats(1, 1),
		backendRelease("a", `"a"`),
		applyNext(),
		expectReply(resultReply("1", `"a"`)),
		expectStats(0, 0),
	)
}

// TestUntrackedRequestsTakeSlotsButNoID: an envelope that is valid only after
// last-wins decoding (a member twice) runs like a request and is answered with
// its id, but takes no part in duplicate-id admission or cancellation
// (CONTRACT.md section 2.2); it holds a slot while it runs.
func TestUntrackedRequestsTakeSlotsButNoID(t *testing.T) {
	const untracked = `{"jsonrpc":"2.0","id":1,"id":1,"method":"get","params":{"n":1}}`
	runScript(t, opts{},
		send(untracked), backendBlock("u1"),
		send(untracked), backendBlock("u2"),
		send(get("1")), backendBlock("tracked"),
		expectNothing(),
		expectStats(1, 3),
		expectBackend("u1", "get", `{"n":1}`),
		send(`{"jsonrpc":"2.0","id":2,"method":"get","params":{"a":1},"params":{"b":2}}`), backendBlock("lastwins"),
		expectBackend("lastwins", "get", `{"b":2}`),
		send(`{"jsonrpc":"2.0","id":3,"method":"get"}`),
		expectReply(errorReply("3", -32602, "Invalid params", "")),
		send(`{"jsonrpc":"2.0","id":3,"id":3,"method":"nope","params":{}}`),
		expectReply(errorReply("3", -32601, "Method not found", "")),
		backendRelease("u2", `"u2"`),
		backendRelease("u1", `"u1"`),
		backendRelease("lastwins", `"lw"`),
		backendRelease("tracked", `"t"`),
		applyCompletions(),
		expectReply(resultReply("1", `"u2"`)),
		expectReply(resultReply("1", `"u1"`)),
		expectReply(resultReply("2", `"lw"`)),
		expectReply(resultReply("1", `"t"`)),
		expectStats(0, 0),
	)
}

// TestUnaryPathErrors: method and params checks of the unary path
// (CONTRACT.md section 2.5), answered inline without a slot or an id.
func TestUnaryPathErrors(t *testing.T) {
	tests := []struct{ name, msg, want string }{
		{"unknown method", req("1", "nope", `{}`), errorReply("1", -32601, "Method not found", "")},
		{"subscription method without a subscriber", req("1", "watch", `{}`), errorReply("1", -32601, "Method not found", "")},
		{"params array", req("1", "get", `[1]`), errorReply("1", -32602, "Invalid params", "")},
		{"params null", req("1", "get", `null`), errorReply("1", -32602, "Invalid params", "")},
		{"params string", req("1", "get", `"{}"`), errorReply("1", -32602, "Invalid params", "")},
		{"escaped method name", req(`"e"`, `g\u0065t`, `[]`), errorReply(`"e"`, -32602, "Invalid params", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runScript(t, opts{},
				send(tt.msg),
				expectReply(tt.want),
				expectStats(0, 0),
			)
		})
	}
}

// TestDrainingAnswersShuttingDown: after Drain new requests get
// SERVER_SHUTTING_DOWN while admitted work still completes and answers
// (CONTRACT.md section 9).
func TestDrainingAnswersShuttingDown(t *testing.T) {
	runScript(t, opts{},
		send(get("1")), backendBlock("a"),
		step{"drain", func(h *harness) { h.srv.Drain() }},
		send(get("2")),
		expectReply(errorReply("2", -32000, "Server shutting down", "SERVER_SHUTTING_DOWN")),
		send(get("1")),
		expectReply(duplicateReply("1")),
		backendRelease("a", `"a"`),
		applyNext(),
		expectReply(resultReply("1", `"a"`)),
		expectStats(0, 0),
	)
}

// TestReqCtx: the request context is a context.Context whose Done channel is
// made lazily, closed by the first cancel, and already closed when asked for
// after it.
func TestReqCtx(t *testing.T) {
	t.Run("done before cancel", func(t *testing.T) {
		var c reqCtx
		d := c.Done()
		select {
		case <-d:
			t.Fatal("done before cancel")
		default:
		}
		if c.Err() != nil {
			t.Fatal("err before cancel")
		}
		c.cancel()
		c.cancel()
		<-d
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("err %v", c.Err())
		}
		if c.Done() != d {
			t.Fatal("Done changed")
		}
	})
	t.Run("done after cancel", func(t *testing.T) {
		var c reqCtx
		c.cancel()
		<-c.Done()
		if _, ok := c.Deadline(); ok || c.Value("k") != nil {
			t.Fatal("deadline or value")
		}
	})
	t.Run("derived context sees the cancel", func(t *testing.T) {
		var c reqCtx
		d, stop := context.WithCancel(&c)
		defer stop()
		done := make(chan struct{})
		go func() { <-d.Done(); close(done) }()
		c.cancel()
		<-done
	})
}

// TestConfig: Validate reports every problem at once; ParseCancelReply parses
// the flag.
func TestConfig(t *testing.T) {
	err := (&Config{MaxConnTasks: -1, CancelReply: 7}).Validate()
	for _, want := range []string{"max conn tasks", "no backend handler", "no worker pool", "cancel reply"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to mention %q", err, want)
		}
	}
	for _, tt := range []struct {
		in   string
		want CancelReply
		ok   bool
	}{{"", CancelReplyNone, true}, {"none", CancelReplyNone, true}, {"error", CancelReplyError, true}, {"Error", 0, false}} {
		got, err := ParseCancelReply(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseCancelReply(%q) = %v, %v", tt.in, got, err)
		}
	}
}

// TestLoadOpenRPCSeed: the registry loaded from the protocol's OpenRPC
// document agrees with the built-in OECP v1 registry.
func TestLoadOpenRPCSeed(t *testing.T) {
	f, err := os.Open("../../shared/seed-fixtures/openrpc.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := LoadOpenRPC(f)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultRegistry()
	for name, m := range def.methods {
		got := r.Lookup([]byte(name))
		if got == nil || got.Kind != m.Kind {
			t.Errorf("%s: loaded %+v, default %+v", name, got, m)
		}
	}
	for name := range r.methods {
		if def.Lookup([]byte(name)) == nil {
			t.Errorf("%s: in the document, not in the default registry", name)
		}
	}
}

// TestTrimReleasesIdleMemoryOnly: Trim keeps the id table while any id is in
// flight, so a trimmed session still knows its requests, and releases it
// once the session holds no id.
func TestTrimReleasesIdleMemoryOnly(t *testing.T) {
	trim := func(wantTable bool) step {
		return step{fmt.Sprintf("trim (table kept: %v)", wantTable), func(h *harness) {
			h.t.Helper()
			s := h.conns[0].sess
			s.Trim()
			if got := s.inflight.ints.slots != nil; got != wantTable {
				h.fatalf("after Trim the id table is held: %v, want %v", got, wantTable)
			}
		}}
	}
	var steps []step
	for i := range 20 {
		steps = append(steps, send(req(fmt.Sprint(100+i), "get", `{}`)), backendBlock(fmt.Sprint("b", i)))
	}
	steps = append(steps,
		trim(true),
		send(req("105", "get", `{}`)),
		expectReply(duplicateReply("105")),
	)
	for i := range 20 {
		steps = append(steps, backendRelease(fmt.Sprint("b", i), `1`), applyNext(),
			expectReply(resultReply(fmt.Sprint(100+i), `1`)))
	}
	steps = append(steps, expectStats(0, 0), trim(false),
		send(req("105", "edge/echo", `{"a":1}`)), backendReturned("again"), applyNext(),
		expectReply(resultReply("105", `{"a":1}`)))
	runScript(t, opts{}, steps...)
}

// TestHandleUncheckedUTF8: a message whose UTF-8 the transport did not check
// is answered like any other when it is valid UTF-8 (whatever its JSON), and
// refused with nothing sent and no state touched when it is not, whether
// Classify stopped at the bad byte or at a JSON error before it.
func TestHandleUncheckedUTF8(t *testing.T) {
	tests := []struct {
		msg   string
		ok    bool
		reply string
	}{
		{req("1", "edge/stats", `{}`), true, statsReply("1", 0, 0, 0)},
		{`{"a":`, true, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`},
		{`[1,"é"]`, true, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`},
		{req("2", "edge/stats", `{"s":"`+"\xff"+`"}`), false, ""},
		{`{"a":,"b":"` + "\xe9" + `"}`, false, ""},
		{`{}` + "\xc0\xaf", false, ""},
	}
	for _, tt := range tests {
		h := newHarness(t, opts{})
		c := h.conns[0]
		if got := c.sess.HandleUnchecked([]byte(tt.msg)); got != tt.ok {
			t.Fatalf("HandleUnchecked(%q) = %v, want %v", tt.msg, got, tt.ok)
		}
		if tt.reply != "" {
			c.expectReply(tt.reply)
		}
		c.expectNothing()
		if st := c.sess.Stats(); st != (Stats{}) {
			t.Fatalf("%q: stats %+v after it", tt.msg, st)
		}
	}
}

// TestDrainBetweenCheckAndAdmission is the regression test of the shutdown
// admission race (hardening issue, item 4). Graceful shutdown drains, then
// waits while InFlight() > 0 and closes every connection once it reads 0. The
// loop used to read the drain flag in one step and count the request as in
// flight in a later one: a drain in between saw 0 in flight, closed the
// connection, and the request that was admitted anyway got no answer. The
// hook runs the whole shutdown check exactly there (before the admission
// step now; between the check and the increment before the fix): a request
// that shutdown did not see as owing must be refused, never dispatched.
func TestDrainBetweenCheckAndAdmission(t *testing.T) {
	owing := -1
	runScript(t, opts{},
		step{"drain and read InFlight just before admission", func(h *harness) {
			testHookAdmit = func() {
				testHookAdmit = nil
				h.srv.Drain()
				owing = h.srv.InFlight()
			}
			h.t.Cleanup(func() { testHookAdmit = nil })
		}},
		send(get("1")),
		step{"shutdown saw nothing owing", func(h *harness) {
			if owing != 0 {
				h.fatalf("InFlight at the drain: %d, want 0", owing)
			}
		}},
		expectReply(errorReply("1", -32000, "Server shutting down", "SERVER_SHUTTING_DOWN")),
		expectStats(0, 0),
	)
}

// TestGoAwayAnswersEverythingOwed: at the shutdown deadline the session
// answers every request still running SERVER_SHUTTING_DOWN and cancels its
// work (hardening issue, item 5; CONTRACT.md section 9); a cancelled request
// stays unanswered, and the late completion of an answered one is dropped.
func TestGoAwayAnswersEverythingOwed(t *testing.T) {
	runScript(t, opts{},
		send(get("1")), backendBlock("a"),
		send(get("2")), backendBlock("b"),
		cancel("2"),
		send(`{"jsonrpc":"2.0","id":3,"method":"get","params":{},"id":3}`), backendBlock("untracked"),
		step{"go away", func(h *harness) { h.sess.GoAway() }},
		expectReply(errorReply("3", -32000, "Server shutting down", "SERVER_SHUTTING_DOWN")),
		expectReply(errorReply("1", -32000, "Server shutting down", "SERVER_SHUTTING_DOWN")),
		expectCtxCancelled("a", true),
		expectCtxCancelled("untracked", true),
		expectStats(0, 3),
		backendRelease("a", `"late"`),
		applyNext(),
		expectNothing(),
		backendReturnOnCancel("b"),
		backendReturnOnCancel("untracked"),
		applyCompletions(),
		expectNothing(),
		expectStats(0, 0),
	)
}
