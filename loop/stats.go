package loop

import (
	"context"
	"strconv"
	"time"

	"github.com/gobwas/ws"
	"github.com/panjf2000/gnet/v2"

	"github.com/openengine/edge/rpc"
)

// This file is the loop's side of edge's metrics (CONTRACT.md section 12).
// An event loop counts into plain fields that only it writes (loopCounters,
// and the rpc.Counters its sessions share): no lock and no atomic per
// message. Server.Stats reads them by posting a task to every loop that
// copies them into the loop's snapshot, under a mutex the loop takes only
// then, once per scrape. What happens off the loops (accepting) is counted
// with atomics by the acceptors.

// rejectReason is why a connection was refused before it spoke JSON-RPC, a
// label of edge_connections_rejected_total. A new reason is one line in
// rejectReasons.
type rejectReason uint8

const (
	rejectBadRequest        rejectReason = iota // 400: not a valid upgrade request
	rejectNotFound                              // 404: not the --ws-path
	rejectHeaderTooLarge                        // 431: the request head is over --max-header-bytes
	rejectUpgradeRequired                       // 426: an unsupported WebSocket version
	rejectHandshakeTimeout                      // no complete upgrade within --handshake-timeout
	rejectHandshakeAborted                      // the peer left before completing the upgrade
	rejectOrigin                                // 403: a browser Origin not allowed (CONTRACT.md section 11.2)
	rejectLimit                                 // 503: --max-conns or --max-conns-per-ip reached (CONTRACT.md section 11.1)
	rejectUnauthorized                          // 401: no token or an invalid one (CONTRACT.md section 11.3)
	rejectDraining                              // the server is shutting down
	rejectAcceptPaused                          // the acceptor paused for want of descriptors or memory (accept.go)
	rejectTLSHandshake                          // the TLS handshake failed (tls.go); its timeouts count as handshake_timeout
	rejectHandshakePoolFull                     // every TLS handshake worker was busy and the queue full (--handshake-pool, --handshake-queue)
	rejectProxyHeader                           // --proxy-protocol: no valid PROXY header first (CONTRACT.md section 11.5)
	rejectProxyUntrusted                        // --proxy-protocol: a peer outside --proxy-protocol-from (CONTRACT.md section 11.5)
	numRejectReasons
)

// rejectReasons gives each reason its label and, for an HTTP answer, its
// status.
var rejectReasons = [numRejectReasons]struct {
	label  string
	status int
}{
	rejectBadRequest:        {"bad_request", 400},
	rejectNotFound:          {"not_found", 404},
	rejectHeaderTooLarge:    {"header_too_large", 431},
	rejectUpgradeRequired:   {"upgrade_required", 426},
	rejectHandshakeTimeout:  {"handshake_timeout", 0},
	rejectHandshakeAborted:  {"handshake_aborted", 0},
	rejectOrigin:            {"origin", 403},
	rejectLimit:             {"limit", 503},
	rejectUnauthorized:      {"unauthorized", 401},
	rejectDraining:          {"draining", 0},
	rejectAcceptPaused:      {"accept_paused", 0},
	rejectTLSHandshake:      {"tls_handshake", 0},
	rejectHandshakePoolFull: {"handshake_pool_full", 0},
	rejectProxyHeader:       {"proxy_header", 0},
	rejectProxyUntrusted:    {"proxy_untrusted", 0},
}

// rejectFor returns the reason answered with an HTTP status.
func rejectFor(status int) rejectReason {
	for r, x := range rejectReasons {
		if x.status == status {
			return rejectReason(r)
		}
	}
	return rejectBadRequest
}

// closeCodes are the close codes counted by edge_connections_closed_total:
// those of CONTRACT.md section 1.1, 1000 (the peer's normal close) and 1006
// (no close frame: the TCP connection ended without one). Any other code
// counts as "other".
var closeCodes = [...]ws.StatusCode{1000, 1001, 1002, 1003, 1006, 1007, 1008, 1009, 4401}

// NumCloseCodes is the length of Stats.Closes: closeCodes and "other".
const NumCloseCodes = len(closeCodes) + 1

// CloseCodeLabel is the label of Stats.Closes[i].
func CloseCodeLabel(i int) string {
	if i < len(closeCodes) {
		return strconv.Itoa(int(closeCodes[i]))
	}
	return "other"
}

func closeCodeIndex(c ws.StatusCode) int {
	for i, x := range closeCodes {
		if x == c {
			return i
		}
	}
	return len(closeCodes)
}

// NumRejectReasons is the length of Stats.Rejected.
const NumRejectReasons = int(numRejectReasons)

// RejectReasonLabel is the label of Stats.Rejected[i].
func RejectReasonLabel(i int) string { return rejectReasons[i].label }

// Transports, the index of Stats.Conns and Stats.Accepted.
const (
	TransportWebSocket = int(protoWebSocket) - 1
	TransportNDJSON    = int(protoNDJSON) - 1
	NumTransports      = 2
)

// TransportLabel is the label of transport i: "ws" or "ndjson".
func TransportLabel(i int) string {
	if i == TransportNDJSON {
		return "ndjson"
	}
	return "ws"
}

// loopCounters are an event loop's connection counters. loop-owned.
type loopCounters struct {
	rejected [numRejectReasons]uint64
	closes   [NumCloseCodes]uint64
	slow     uint64 // connections closed 1008 slow consumer
}

// loopSnapshot is what a loop's snapshot task copies: its counters and
// what it reads of its connections.
type loopSnapshot struct {
	counts  loopCounters
	rpc     rpc.Counters
	conns   [NumTransports]int
	pending int64
}

// Stats is a snapshot of the gateway's counters, summed over the event
// loops.
type Stats struct {
	// Conns is the connections by transport (TransportWebSocket,
	// TransportNDJSON), from accept to close, upgrading ones included.
	Conns [NumTransports]int
	// Accepted counts accepted connections by transport.
	Accepted [NumTransports]uint64
	// Rejected counts connections refused before they spoke JSON-RPC, by
	// reason (RejectReasonLabel); accept_paused counts the acceptors'
	// pauses.
	Rejected [NumRejectReasons]uint64
	// Closes counts the connections that ended after the upgrade, by close
	// code (CloseCodeLabel): the server's, or the peer's that the server
	// answered; 1006 when none was exchanged. NDJSON has no close
	// message: a peer's EOF counts as 1000, the server's closes with the
	// code a WebSocket would get.
	Closes [NumCloseCodes]uint64
	// SlowConsumers counts connections closed 1008 slow consumer.
	SlowConsumers uint64
	// PendingBytes is the output the connections hold, not yet taken by
	// the kernel.
	PendingBytes int64
	// Paused is the connections whose reads are paused for backpressure.
	Paused int64
	// RPC is the request counters of every loop's sessions.
	RPC rpc.Counters
	// Stale is the number of loops that did not answer in time; their
	// counters are as of their previous snapshot.
	Stale int
	// LogDropped counts the log lines dropped because the log output did
	// not keep up (Config.LogDropped, LogWriter).
	LogDropped uint64
}

// Counters implements rpc.CountingPoster. Safe for concurrent use (the
// pointer is immutable; the Counters are loop-owned).
func (l *eventLoop) Counters() *rpc.Counters { return l.ctr }

// clock sets the loop's per-turn clock (rpc.Counters.Now). Runs on the loop.
func (l *eventLoop) clock(now time.Time) {
	if l.ctr != nil { // nil only in tests that build an eventLoop by hand
		l.ctr.Now = now.UnixNano()
	}
}

// takeSnapshot copies the loop's counters into its snapshot. Runs on the loop.
func (l *eventLoop) takeSnapshot() {
	var conns [NumTransports]int
	var pending int64
	for _, w := range l.conns {
		conns[w.proto-1]++
		pending += int64(w.OutboundBytes())
	}
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.snap.counts = l.counts
	if l.ctr != nil {
		l.ctr.CopyTo(&l.snap.rpc)
	}
	l.snap.conns = conns
	l.snap.pending = pending
}

// Stats returns the gateway's counters. It asks every event loop to copy
// its own and waits up to timeout for them; a loop that does not answer in
// time (busy for that long, or stopped) contributes its previous snapshot
// and counts in Stats.Stale. Concurrent; not on an event loop, as it
// waits for them.
func (s *Server) Stats(timeout time.Duration) Stats {
	ls := s.eventLoops()
	done := make(chan struct{}, len(ls))
	asked := 0
	for _, l := range ls {
		task := func(context.Context) error {
			l.takeSnapshot()
			done <- struct{}{}
			return nil
		}
		if l.el.Execute(context.Background(), gnet.RunnableFunc(task)) == nil {
			asked++
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	answered := 0
wait:
	for answered < asked {
		select {
		case <-done:
			answered++
		case <-timer.C:
			break wait
		}
	}
	st := Stats{Stale: len(ls) - answered, Paused: s.paused.Load()}
	if s.cfg.LogDropped != nil {
		st.LogDropped = s.cfg.LogDropped()
	}
	for i := range st.Accepted {
		st.Accepted[i] = s.accepted[i].Load()
	}
	for i := range st.Rejected {
		st.Rejected[i] = s.offLoop[i].Load()
	}
	if s.rpc != nil {
		st.RPC = *s.rpc.NewCounters()
	}
	for _, l := range ls {
		l.snapMu.Lock()
		sn := &l.snap
		for i, n := range sn.counts.rejected {
			st.Rejected[i] += n
		}
		for i, n := range sn.counts.closes {
			st.Closes[i] += n
		}
		st.SlowConsumers += sn.counts.slow
		for i, n := range sn.conns {
			st.Conns[i] += n
		}
		st.PendingBytes += sn.pending
		st.RPC.Add(&sn.rpc)
		l.snapMu.Unlock()
	}
	return st
}

var _ rpc.CountingPoster = (*eventLoop)(nil)

// countClose counts the end of the connection: a close by its code once it
// spoke JSON-RPC, an abandoned upgrade before. A refused upgrade was
// counted when it was refused. Runs on the loop, from closed.
func (w *conn) countClose() {
	switch {
	case w.sess != nil:
		code := w.code
		if code == 0 {
			code = ws.StatusAbnormalClosure // RFC 6455 section 7.1.5
			if w.proto == protoNDJSON {
				code = ws.StatusNormalClosure
			}
		}
		w.l.counts.closes[closeCodeIndex(code)]++
	case w.state == stateHandshake:
		w.l.counts.rejected[rejectHandshakeAborted]++
	}
}
