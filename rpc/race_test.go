package rpc

import (
	"fmt"
	"testing"

	"github.com/openengine/edge/backend"
)

// Race regressions of the session (CONTRACT.md sections 3 and 4). Each is a
// script that schedules one interleaving of loop and worker deterministically
// (see harness_test.go) and names the naive implementation it catches.

// TestCancelWhilePendingReleasesIDAndLeavesNoBookkeeping: request 7 is blocked
// in the backend when $/cancelRequest 7 arrives. The id must be free at once (a
// new request 7 is admitted, not DUPLICATE_REQUEST_ID), nothing is sent for the
// cancelled request (cancel-reply none), its backend ctx is cancelled, but its
// slot stays taken until the worker has really returned and the loop applied
// that; afterwards the session holds no id and no slot.
//
// Catches a cancel that only cancels the ctx and leaves the id to be released
// when the worker returns (the new 7 gets DUPLICATE_REQUEST_ID), a cancel that
// frees the slot at once (tasks drops to 0 while the worker still runs), and a
// cancel that forgets the backend ctx.
func TestCancelWhilePendingReleasesIDAndLeavesNoBookkeeping(t *testing.T) {
	t.Run("id reused before the worker returns", func(t *testing.T) {
		runScript(t, opts{},
			send(get("7")), backendBlock("old"),
			expectStats(1, 1),
			cancel("7"),
			expectNothing(),
			expectCtxCancelled("old", true),
			expectStats(0, 1), // id free, slot held: the worker still runs
			send(get("7")), backendBlock("new"),
			expectNothing(), // admitted, not DUPLICATE_REQUEST_ID
			expectCtxCancelled("new", false),
			expectStats(1, 2),
			backendReturnOnCancel("old"),
			expectStats(1, 2), // returned and posted, not yet applied: slot still held
			applyNext(),
			expectNothing(),
			expectStats(1, 1),
			backendRelease("new", `{"v":"new"}`),
			applyNext(),
			expectReply(resultReply("7", `{"v":"new"}`)),
			expectStats(0, 0),
		)
	})
	t.Run("no reuse", func(t *testing.T) {
		runScript(t, opts{},
			send(get("7")), backendBlock("a"),
			cancel("7"),
			expectNothing(),
			expectCtxCancelled("a", true),
			expectStats(0, 1),
			backendReturnOnCancel("a"),
			applyNext(),
			expectNothing(),
			expectStats(0, 0),
		)
	})
}

// TestFastCompletionLeavesNoEntry: the fastest completion, a worker that
// returns before the loop has even looked again. Until the loop applies it,
// the request still owns its id and slot (a duplicate is rejected); once
// applied, exactly one response is written and neither an in-flight entry nor
// a slot is left, also when this repeats back to back with the same id and on
// the error path.
//
// Catches a success path that writes the response but keeps the in-flight
// entry (the next request 1 gets DUPLICATE_REQUEST_ID and inFlightIds stays 1)
// and one that frees the slot only when dropping a stale completion (tasks
// stays 1 after the response).
func TestFastCompletionLeavesNoEntry(t *testing.T) {
	steps := []step{
		send(req("1", "edge/echo", `{"x":1}`)), backendReturned("a"),
		expectQueued(1),
		expectStats(1, 1),
		send(req("1", "edge/echo", `{"x":2}`)),
		expectReply(duplicateReply("1")),
		applyNext(),
		expectReply(resultReply("1", `{"x":1}`)),
		expectStats(0, 0),
	}
	for i := range 3 {
		steps = append(steps,
			send(req("1", "edge/echo", `{"again":true}`)), backendReturned(fmt.Sprintf("again%d", i)),
			applyNext(),
			expectReply(resultReply("1", `{"again":true}`)),
			expectStats(0, 0),
		)
	}
	steps = append(steps,
		send(get("1")), backendBlock("err"),
		backendFail("err", backend.InvalidPhase("get")),
		applyNext(),
		expectReply(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Backend does not support get","data":{"code":"INVALID_PHASE"}}}`),
		expectStats(0, 0),
		send(get("1")), backendBlock("after"),
		expectStats(1, 1),
		backendRelease("after", `true`),
		applyNext(),
		expectReply(resultReply("1", `true`)),
		expectStats(0, 0),
	)
	runScript(t, opts{}, steps...)
}

// TestLateCompletionCannotTouchNewerSameID: request 7 (old) is cancelled while
// blocked, a new request 7 is admitted and blocks, and then the old worker
// returns late with a result (it ignored its cancellation, as a backend that
// already committed may). The old completion must be dropped: no response, and
// it must neither release the new 7's id (a duplicate 7 is still rejected) nor
// cancel or answer it; a later cancel of 7 cancels the new one, and a normal
// completion of the new one answers exactly once.
//
// Catches a Complete that finds its entry by id alone, without the
// generation: it writes the old result as the answer to 7 and deletes the new
// request's entry, so the duplicate is admitted and the cancel finds nothing.
func TestLateCompletionCannotTouchNewerSameID(t *testing.T) {
	prefix := []step{
		send(get("7")), backendBlock("old"),
		cancel("7"),
		expectCtxCancelled("old", true),
		send(get("7")), backendBlock("new"),
		expectStats(1, 2),
		backendRelease("old", `{"from":"old"}`),
		applyNext(),
		expectNothing(),
		expectStats(1, 1),
		expectCtxCancelled("new", false),
		send(get("7")),
		expectReply(duplicateReply("7")),
		expectStats(1, 1),
	}
	t.Run("new one cancelled", func(t *testing.T) {
		runScript(t, opts{}, cat(prefix, []step{
			cancel("7"),
			expectNothing(),
			expectCtxCancelled("new", true),
			expectStats(0, 1),
			backendReturnOnCancel("new"),
			applyNext(),
			expectNothing(),
			expectStats(0, 0),
		})...)
	})
	t.Run("new one completes", func(t *testing.T) {
		runScript(t, opts{}, cat(prefix, []step{
			backendRelease("new", `{"from":"new"}`),
			applyNext(),
			expectReply(resultReply("7", `{"from":"new"}`)),
			expectStats(0, 0),
		})...)
	})
	t.Run("old one fails late", func(t *testing.T) {
		runScript(t, opts{cancelReply: CancelReplyError},
			send(get("7")), backendBlock("old"),
			cancel("7"),
			expectReply(cancelledReply("7")),
			send(get("7")), backendBlock("new"),
			backendFail("old", backend.InvalidPhase("get")),
			applyNext(),
			expectNothing(),
			expectStats(1, 1),
			backendRelease("new", `"new"`),
			applyNext(),
			expectReply(resultReply("7", `"new"`)),
			expectStats(0, 0),
		)
	})
}

// TestCompletionRacingCancelAtMostOneResponse: the worker has returned and
// posted its completion, but the loop handles the client's $/cancelRequest
// before it applies the completion. Whatever the worker returned, the request
// gets exactly one terminal response: none with cancel-reply none, one -32800
// with cancel-reply error (sent when the cancel is processed), never a result
// or an error in addition. The id is free for reuse at once. A cancel that
// arrives after the completion was applied is a silent no-op.
//
// Catches a Complete that answers whatever the worker returned once it has
// returned (a result after the cancel, or a result and a -32800 both), and a
// cancel that answers -32800 for a request already answered.
func TestCompletionRacingCancelAtMostOneResponse(t *testing.T) {
	outcomes := []struct {
		name string
		do   step
	}{
		{"result", backendRelease("a", `{"done":true}`)},
		{"error", backendFail("a", backend.InvalidPhase("get"))},
		{"panic", backendPanic("a")},
	}
	for _, cr := range []CancelReply{CancelReplyNone, CancelReplyError} {
		for _, oc := range outcomes {
			t.Run("cancel-reply "+cr.String()+"/"+oc.name, func(t *testing.T) {
				afterCancel := expectNothing()
				if cr == CancelReplyError {
					afterCancel = expectReply(cancelledReply("7"))
				}
				runScript(t, opts{cancelReply: cr},
					send(get("7")), backendBlock("a"),
					oc.do,
					expectQueued(1),
					expectNothing(),
					cancel("7"),
					afterCancel,
					expectNothing(),
					expectStats(0, 1),
					applyNext(),
					expectNothing(),
					expectStats(0, 0),
					send(get("7")), backendBlock("b"),
					backendRelease("b", `"b"`),
					applyNext(),
					expectReply(resultReply("7", `"b"`)),
					expectStats(0, 0),
				)
			})
		}
		t.Run("cancel-reply "+cr.String()+"/cancel after the response", func(t *testing.T) {
			runScript(t, opts{cancelReply: cr},
				send(get("7")), backendBlock("a"),
				backendRelease("a", `"a"`),
				applyNext(),
				expectReply(resultReply("7", `"a"`)),
				cancel("7"),
				expectNothing(),
				expectStats(0, 0),
			)
		})
	}
}
