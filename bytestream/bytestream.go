// Package bytestream is how an upstream's byte-stream connections (its
// NDJSON and WebSocket connections, an exec child's socket) run on the
// gateway's event loops instead of goroutines of their own: the loop reads
// the socket and hands the bytes to the forwarder's Wire, and writes what
// the Wire queued once per loop turn. A call forwarded from a session on
// the loop that owns the connection reaches the upstream with no goroutine,
// lock hand-off or wake-up in between, and its answer completes it on the
// same loop.
//
// Package loop implements Loops and WireConn, package upstream implements
// Wire; this leaf package names the three so that neither imports the
// other (loop stays off the upstream layer and its NATS and HTTP clients).
package bytestream

import "net"

// Loops runs byte-stream connections on the gateway's event loops. Its
// methods are safe for concurrent use.
type Loops interface {
	// NumLoops is the number of event loops, numbered from 0.
	NumLoops() int
	// Attach moves c onto event loop i: the loop serves a descriptor of
	// its own, c is closed, and w.Open has run on the loop when Attach
	// returns without error.
	Attach(i int, c net.Conn, w Wire) error
	// Run runs f on event loop i, then writes what f queued. It reports
	// false, and f does not run, when the loops have stopped.
	Run(i int, f func()) bool
}

// Wire is the forwarder's side of a connection an event loop serves. Every
// method runs on that loop.
type Wire interface {
	// Open is called once the connection is on the loop.
	Open(c WireConn)
	// Traffic hands the Wire the bytes read and not yet consumed, and
	// the loop's clock of the read (Unix nanoseconds: the loop reads it
	// once per read, for the Wire and the sessions it completes); it
	// returns how many bytes it consumed (the rest is given again with
	// what arrives next) or an error, which closes the connection.
	Traffic(in []byte, now int64) (int, error)
	// Output returns what the Wire queued since the last call, for the
	// loop to write before it calls the Wire again.
	Output() []byte
	// Closed is called once the connection is closed, by either side.
	Closed(err error)
}

// WireConn is the loop's side of a Wire's connection. Its methods must be
// called on the loop.
type WireConn interface {
	// Dirty asks the loop to take the Wire's Output soon: at the end of
	// this turn, or after the other sockets of the poller's round (calls
	// forwarded from several clients' reads then go out in one write). A
	// Wire that wants its output written now calls Write.
	Dirty()
	// Buffered is how many bytes the loop holds that the socket has not
	// taken yet.
	Buffered() int
	// Write writes p now (what the socket does not take is buffered).
	Write(p []byte)
	// CloseWrite shuts the connection down for writing: the peer reads
	// EOF.
	CloseWrite()
	// Close closes the connection; Closed follows.
	Close()
}
