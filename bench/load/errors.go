package load

import "errors"

// Sentinel errors of the load generator.
var (
	ErrFrameTooLarge  = errors.New("load: frame too large")
	ErrClosed         = errors.New("load: server sent a close frame")
	ErrHello          = errors.New("load: handshake message refused")
	ErrNotSupported   = errors.New("load: the dialect does not support this workload")
	ErrNotEstablished = errors.New("load: not every connection or subscription was established")
	ErrClosedByPeer   = errors.New("load: the server closed connections during the run")

	// errWouldBlock: an attached Conn's socket has nothing more to read for
	// now (see Conn.attach). A temporary net.Error, so that crypto/tls
	// reading an attached wss:// socket keeps the partial record it has and
	// resumes on the next Read (see rawSock).
	errWouldBlock error = wouldBlock{}
	// errBacklog: an attached Conn refused a write because the bytes its
	// socket has not taken would exceed backlogLimit.
	errBacklog = errors.New("load: too many unsent bytes on the connection")
	// errNotSocket: the Conn has no socket to attach (a test fake).
	errNotSocket = errors.New("load: connection has no socket to attach")
)

// wouldBlock is errWouldBlock's type: a net.Error that is Temporary and not
// a Timeout (a stopped reader's deadline is a Timeout, see isTimeout).
type wouldBlock struct{}

func (wouldBlock) Error() string   { return "load: no more data on the socket for now" }
func (wouldBlock) Timeout() bool   { return false }
func (wouldBlock) Temporary() bool { return true }
