package rpc

import (
	"testing"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/hist"
)

// setClock sets the loop's per-turn clock of the default connection's
// counters, as an event loop does at the start of a turn.
func setClock(ns int64) step {
	return step{"setClock", func(h *harness) { h.sess.ctr.Now = ns }}
}

// TestCountersByOutcome: every request is counted once, by method and
// outcome, where its fate is decided: ok and errors when answered, busy and
// not found when refused (method "other" outside the registry), cancelled
// at $/cancelRequest or when the connection closes first, timeout and
// unavailable from the upstream errors. Durations run on the loop's
// per-turn clock from admission to the answer, for answered requests only.
func TestCountersByOutcome(t *testing.T) {
	h := runScript(t, opts{maxConnTasks: 2},
		setClock(1e6),
		send(get("1")), backendBlock("ok"),
		setClock(3e6), // 2 ms later
		backendRelease("ok", `{}`), applyCompletions(),
		expectReply(resultReply("1", `{}`)),
		send(req("2", "nope", `{}`)),
		expectReply(errorReply("2", -32601, "Method not found", "")),
		send(get("3")), backendBlock("cancelled"),
		cancel("3"),
		backendReturnOnCancel("cancelled"), applyCompletions(),
		send(get("4")), backendBlock("timeout"),
		send(get("5")), backendBlock("unavailable"),
		send(get("6")),
		expectReply(busyReply("6")),
		backendFail("timeout", backend.ErrUpstreamTimeout),
		backendFail("unavailable", backend.ErrUpstreamUnavailable),
		applyCompletions(),
		expectReply(errorReply("4", -32000, "Upstream timeout", "UPSTREAM_TIMEOUT")),
		expectReply(errorReply("5", -32000, "Upstream unavailable", "UPSTREAM_UNAVAILABLE")),
		send(get("7")), backendBlock("closed"),
		closeSession(),
		backendReturnOnCancel("closed"), applyCompletions(),
	)
	c := h.sess.ctr
	names := h.srv.MethodNames()
	by := map[string]*MethodCounters{}
	for i, n := range names {
		by[n] = &c.Methods[i]
	}
	want := map[string][NumOutcomes]uint64{
		"get":   {OutcomeOK: 1, OutcomeCancelled: 2, OutcomeBusy: 1, OutcomeTimeout: 1, OutcomeUnavailable: 1},
		"other": {OutcomeError: 1},
	}
	for i, n := range names {
		if got := c.Methods[i].Outcomes; got != want[n] {
			t.Errorf("%s: outcomes %v, want %v", n, got, want[n])
		}
	}
	d := &by["get"].Duration
	if n := d.Count(); n != 3 {
		t.Errorf("get: %d durations, want 3 (ok, timeout, unavailable)", n)
	}
	if i := hist.Index(2e6); d.Counts[i] != 1 || d.SumNanos != 2e6 {
		t.Errorf("get: durations %v sum %d, want the 2 ms one in bucket %d", d.Counts, d.SumNanos, i)
	}
	if n := by["other"].Duration.Count(); n != 0 {
		t.Errorf("other: %d durations, want none (refused)", n)
	}
}
