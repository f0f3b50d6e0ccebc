// Package wire names the subjects and headers of JSON-RPC over NATS
// (CONTRACT.md section 13), the one place the nats upstream (edge's side) and
// package worker (the serving side) agree on them.
//
// A call is published on PREFIX.<method> with a reply subject
// _INBOX.<nuid>.<id> under the edge connection's one wildcard inbox
// subscription (_INBOX.<nuid>.>); its body is the JSON-RPC request carrying
// edge's integer id. The worker that takes it (one member of the queue group
// PREFIX) first answers an empty message with header Edge-Worker (so edge
// knows whom to send a cancel to), then the JSON-RPC response; a call it
// answers at once (a method that does not block) gets the response alone,
// and the edge, which has nothing to cancel or probe then, needs no
// worker id. A subscription request also carries header Edge-Stream, a
// subject under the same inbox (_INBOX.<nuid>.s.<id>): the worker publishes
// the establishment response and then the subscription's event and
// subscription/closed notifications there. Cancels go to the worker that took the call, on
// PREFIX.$cancel.<worker id>: {"id":<edge id>} with header Edge-Reply naming
// the call's reply subject (edge ids are unique per edge connection only, the
// reply subject is unique everywhere), or {"subscriptionId":<worker's id>}.
//
// A worker that dies mid-call says nothing, and NATS request/reply has no
// connection between edge and worker to break. So while it serves, a worker
// holds a subscription on its alive subject, outside PREFIX.> (whose queue
// subscriptions would answer for it), and answers nothing there: an edge
// with calls on a worker publishes an empty probe to it with a reply subject
// _INBOX.<nuid>.w.<worker id>, and the NATS server's no-responders status
// on that reply means the worker's connection is gone.
//
// The other way round, a worker whose edge went away (crashed, or closed
// before its subscription/cancel left) would stream into the void for
// ever (and a long call would run for nobody). So a worker probes the inbox
// of each edge it runs calls or subscriptions for, on _INBOX.<nuid>.alive
// with a reply subject of its own; the edge's wildcard subscription takes
// it and answers nothing, and no-responders means the edge's connection is
// gone: the worker cancels what it runs for that edge.
package wire

import "time"

// The liveness of a connection to the NATS server, for nats.go's
// PingInterval and MaxPingsOutstanding options, the same for every
// connection edge makes (the nats:// upstreams, the topics): a server that
// goes silent without closing the connection (a stall, a partition) is
// noticed within (MaxPingsOut+1) x PingInterval, 3 s, instead of nats.go's
// default of 2 minutes and 2 pings, and the connection is failed and
// redialled.
const (
	PingInterval = time.Second
	MaxPingsOut  = 2
)

// Headers.
const (
	// Worker is the header of a worker's "accepted" message: its id.
	Worker = "Edge-Worker"
	// Stream is the header of a subscription request: the subject its
	// response and notifications go to.
	Stream = "Edge-Stream"
	// Reply is the header of a cancel by id: the reply subject of the call
	// it cancels.
	Reply = "Edge-Reply"
	// Status and NoResponders are the NATS server's answer to a request no
	// subscriber takes: header Status 503, no body.
	Status       = "Status"
	NoResponders = "503"
)

// CancelToken is the subject token after PREFIX of a worker's cancel
// subject: PREFIX.$cancel.<worker id>.
const CancelToken = "$cancel"

// CancelSubject returns the subject a worker takes cancels on.
func CancelSubject(prefix, worker string) string { return prefix + "." + CancelToken + "." + worker }

// AliveSubject returns the subject a worker of prefix holds while it serves
// (see the package doc). Worker ids are one token, so no two workers of
// any prefixes share one.
func AliveSubject(prefix, worker string) string { return "_EDGE.alive." + prefix + "." + worker }

// ProbeToken starts the part of an inbox subject after _INBOX.<nuid>. that
// answers a probe of a worker: w.<worker id>.
const ProbeToken = "w."

// EdgeAliveToken ends the subject a worker probes an edge inbox on:
// _INBOX.<nuid>.alive.
const EdgeAliveToken = "alive"

// StreamToken starts the part of an inbox subject after _INBOX.<nuid>. that
// names a subscription's stream: s.<id>.
const StreamToken = "s."
