// Package upstream puts edge in front of other JSON-RPC servers (CONTRACT.md
// section 10): it forwards calls over exec children (NDJSON on stdio), TCP
// (NDJSON), WebSocket, HTTP and NATS (section 13, nats.go), rewriting ids so that many client
// connections share a few upstream connections.
//
// An Upstream is a backend.Forwarder. Forward runs on an event loop and never
// waits for I/O: it appends the request to a connection's output buffer and
// returns. The exec, tcp and ws connections live on the gateway's event
// loops (Loops, see link): a call from a session goes to a
// connection its own loop owns when one is up, so the request is written in
// the loop's flush and the answer is read, parsed and completed on that loop,
// with no goroutine and no lock hand-off in between; a call from another loop
// goes through the owning loop's task queue. A call in flight is one table
// entry, not a goroutine (HTTP, whose protocol has no multiplexing, is the
// exception: one request per call; NATS connections are nats.go's).
//
// # Where a forwarded call lives
//
// From Forward to its end a call over a link (exec, tcp, ws, nats) is one
// entry of that link's call table (calltable.go), in one of the states of
// callState; every change of state goes through link.moveLocked, which
// applies what the transition calls for: the transport's cancel or
// subscription/cancel, the in-flight count of the replica choice, the
// request metric, and the call's one Finish. A call over HTTP is one
// entry of its replica's table (http.go), in the states of callState an
// HTTP call takes (sent, dropped, ended), and one request and its
// goroutine; httpReplica.moveLocked is its one transition, with the same
// side effects (the request aborted, its slot given back, the metric, the
// one Finish). A call no table takes (no connection up, every http replica
// at its bound, a backlog over Config.MaxPendingBytes) ends through
// Upstream.refuse.
// A plain JSON-RPC subscription (NS_subscribe, NS_subscription,
// NS_unsubscribe) is an entry of a link's table too, on the exec, tcp and ws
// links (plain.go).
//
// # Lock order
//
// The locks a forwarded call or a topic subscription meets, outer first (a
// lock is only taken while holding those above it, never below):
//
//	topics.Topics.mu      the topic tables; held while joining (Fanout.Join)
//	                      and establishing (Stream.Establish) a subscriber
//	backend.Fanout.mu     a topic's subscribers; held for a whole fan-out
//	                      (Stream.Emit of each), on the NATS delivery goroutine
//	rpc stream.mu         one subscription's event ring
//	rpc budget.mu         a connection's waiting paced producers (EmitWait
//	                      registers under stream.mu); a leaf
//	loop eventLoop.mu     a loop's completion queue (Post); a leaf: taken
//	                      under Topics.mu and Fanout.mu (a Post after
//	                      stream.mu is released), never under stream.mu, and
//	                      released before the queued completions are applied
//	upstream link.mu      a NATS link's table and output (a byte-stream link's
//	                      loop owns them and takes no lock, link.lock); taken
//	                      with none of the above held, and none of them is
//	                      taken under it: Finish, Establish and Emit run after
//	                      it is released (moveLocked returns the finish for
//	                      that), as they do on a byte-stream link, where
//	                      FinishOnLoop applies an answer's completion at once.
//	                      Below it only the loop's WireConn.Buffered (goLoop's
//	                      goConn.mu).
package upstream
