package loop

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// edge accepts connections itself instead of leaving it to gnet, because gnet
// v2.9 stops the whole engine when accept fails for want of descriptors:
// its acceptor (eventloop.accept0, run by the main reactor that gnet.Rotate
// starts with multicore) retries only EINTR, ECONNRESET and ECONNABORTED; any
// other error from accept4, EMFILE and ENFILE included, makes it return
// ErrAcceptSocket, the main reactor's Polling returns it, rotate calls
// engine.shutdown and every event loop exits with its connections. No option
// changes that. CONTRACT.md section 6 wants the server to keep serving, pause
// accepting without spinning, and accept again once descriptors are free.
//
// So Server.Start opens the listeners with package net and runs the event
// loops as a gnet.Client, which is gnet's engine without listeners: the same
// EventHandler callbacks, loops and ticker. (A gnet.Rotate engine with no
// address starts too, but its Engine.Register and Engine.Stop refuse to work
// without a listener: Engine.Validate reports ErrEmptyEngine.) One acceptor
// goroutine per listener accepts and hands each connection to the loop with
// the fewest connections with Client.EnrollContext, which dups the descriptor
// onto the loop, closes the net.Conn, and returns once the loop has run
// OnOpen; the context value it is given (the listener's binding) is
// Conn.Context() in OnOpen. Since each acceptor waits for its registration,
// none is still queued when the loops stop. A wss:// listener's acceptor
// does not wait: each registration runs on a goroutine of its own (at most
// maxEnrolling at once), counted in Server.accepting like the acceptor, so
// Close still waits for them before it stops the loops. Waiting for a loop
// costs two goroutine switches per socket, which under CPU load (a storm of
// TLS clients, whose handshakes are work) took 20 ms on average and up to
// 3.5 s: the acceptor took about 50 sockets a second, the rest waited in
// the listen backlog, where no --handshake-timeout runs and which the
// handshake queue's bound never sheds. Such a registration gives up the
// spare descriptor the acceptor held when it accepted the socket.
//
// A registration needs a second descriptor for a moment (the dup), so an
// acceptor holds a spare one (/dev/null) and accepts only while it has it:
// it closes the spare just before registering and reopens it after. Without
// it, a process with exactly one free descriptor would accept a connection
// and then close it when the dup fails, once per retry. On EMFILE, ENFILE,
// ENOBUFS or ENOMEM (from accept, the dup or the spare) the acceptor pauses:
// 5 ms, doubling to 1 s while the condition lasts, reset by a successful
// registration, and cut short when a connection closes (a descriptor was
// freed). Pending connections wait in the kernel's listen backlog meanwhile
// and are served once there is room; none is accepted only to be closed. It
// logs one warning per burst, at most one every 10 s, and one line when it
// accepts again. Connection set-up costs more than under gnet's acceptor
// (Go's netpoller registers the accepted socket and unregisters it at the
// Close after the dup, the spare is closed and reopened, and the acceptor
// waits for the loop), which the request path never sees.

// Bounds of an acceptor's pause when it cannot accept.
const (
	minAcceptPause = 5 * time.Millisecond
	maxAcceptPause = time.Second
	pauseLogEvery  = 10 * time.Second
)

// acceptor accepts the connections of one listener and registers them on the
// event loops. Its fields other than the immutable ones belong to its
// goroutine (run).
type acceptor struct {
	srv   *Server          // immutable
	ln    *net.TCPListener // immutable
	proto proto            // immutable: the binding, Conn.Context() in OnOpen
	hs    *handshakers     // immutable: TLS handshake workers, nil without TLS (tls.go)
	wake  chan struct{}    // capacity 1: a connection closed while paused
	// enrolling holds a slot per wss:// registration in flight (enroll);
	// failed has the error of one that failed, for the acceptor to pause.
	enrolling chan struct{} // capacity maxEnrolling
	failed    chan error    // capacity 1

	spare    int           // reserve descriptor, -1 when not held
	timer    *time.Timer   // pause timer, nil until the first pause
	delay    time.Duration // current pause, 0 when accepting
	since    time.Time     // start of the current burst of pauses
	warned   bool          // the current burst was logged
	lastWarn time.Time     // when a burst was last logged
	unlogged int           // bursts not logged since lastWarn
}

// listen opens a TCP listener on addr. Go sets SO_REUSEADDR on listeners, as
// gnet.WithReuseAddr did; accepted sockets get TCP_NODELAY (Go's default for
// TCP connections, as gnet.TCPNoDelay) and no keep-alive (as under gnet).
func listen(addr string) (*net.TCPListener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

func newAcceptor(s *Server, ln *net.TCPListener, p proto) *acceptor {
	return &acceptor{
		srv:   s,
		ln:    ln,
		proto: p,
		wake:  make(chan struct{}, 1),
		spare: -1,
		// enrolling and failed serve a wss:// listener only (register).
		enrolling: make(chan struct{}, maxEnrolling),
		failed:    make(chan error, 1),
	}
}

// run accepts until the listener is closed.
func (a *acceptor) run() {
	defer a.srv.accepting.Done()
	defer a.dropSpare()
	for {
		var err error
		select {
		case err = <-a.failed: // a wss:// registration (enroll)
		default:
			err = a.reserve()
		}
		if err == nil {
			var c *net.TCPConn
			c, err = a.ln.AcceptTCP()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil && !a.srv.cfg.peerAllowed(a.proto, c.RemoteAddr()) {
				_ = c.Close() // unanswered (proxy.go)
				a.srv.offLoop[rejectProxyUntrusted].Add(1)
				continue
			}
			if err == nil {
				err = a.register(c)
			}
		}
		if err == nil {
			a.resume()
			continue
		}
		if !a.pause(err) {
			return
		}
	}
}

// register hands c to an event loop and returns once the loop has opened
// it; c itself is closed. The spare descriptor is given up for the dup.
// A wss:// connection goes to the loop before its TLS handshake, which
// waits there for its first bytes (tls.go); it counts as accepted once its
// handshake is done. Its registration runs on a goroutine of its own
// (enroll), and register returns at once, unless maxEnrolling are in flight.
func (a *acceptor) register(c *net.TCPConn) error {
	if a.hs != nil {
		a.enrolling <- struct{}{}
		t := &tlsState{accepted: time.Now()}
		if h := testHookTLSAccepted; h != nil {
			h()
		}
		spare := a.spare
		a.spare = -1
		a.srv.accepting.Add(1) // while the acceptor's own count is held
		go a.enroll(c, t, spare)
		return nil
	}
	a.dropSpare()
	_, err := a.srv.cli.EnrollContext(c, a.proto)
	if err == nil {
		a.srv.accepted[a.proto-1].Add(1)
	}
	return err
}

// maxEnrolling bounds the wss:// registrations of an acceptor in flight:
// a loop that is busy takes the ones queued meanwhile in one turn.
const maxEnrolling = 64

// enroll registers a wss:// socket on an event loop, giving up spare (the
// acceptor's spare descriptor when it accepted c) for the dup. A failure
// (no descriptor for the dup) makes the acceptor pause as if its own
// registration had failed. Runs on its own goroutine.
func (a *acceptor) enroll(c *net.TCPConn, t *tlsState, spare int) {
	defer a.srv.accepting.Done()
	defer func() { <-a.enrolling }()
	if spare >= 0 {
		_ = unix.Close(spare)
	}
	_, err := a.srv.cli.EnrollContext(c, t)
	if err != nil {
		select {
		case a.failed <- err:
		default:
		}
	}
}

// Test hooks, set before Start and cleared after Close: a wss:// socket
// was accepted (the acceptor), a wss:// socket is being opened (OnOpen, on
// its loop).
var testHookTLSAccepted, testHookTLSOpen func()

// reserve makes sure the spare descriptor is held.
func (a *acceptor) reserve() error {
	if a.spare >= 0 {
		return nil
	}
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &net.OpError{Op: "open", Net: "spare", Err: err}
	}
	a.spare = fd
	return nil
}

func (a *acceptor) dropSpare() {
	if a.spare >= 0 {
		_ = unix.Close(a.spare)
		a.spare = -1
	}
}

// pause waits after err before the next accept: the current delay, less if
// a connection closes meanwhile. It reports false if accepting stopped.
func (a *acceptor) pause(err error) bool {
	if a.delay == 0 {
		a.delay = minAcceptPause
		a.since = time.Now()
		a.logPause(err)
	} else {
		a.delay = min(2*a.delay, maxAcceptPause)
	}
	if a.timer == nil {
		a.timer = time.NewTimer(a.delay)
	} else {
		a.timer.Reset(a.delay)
	}
	a.srv.offLoop[rejectAcceptPaused].Add(1)
	a.srv.starved.Add(1)
	defer a.srv.starved.Add(-1)
	select {
	case <-a.timer.C:
	case <-a.wake:
		a.timer.Stop()
	case <-a.srv.quit:
		a.timer.Stop()
		return false
	}
	return true
}

// logPause logs the start of a burst of pauses, at most once per
// pauseLogEvery.
func (a *acceptor) logPause(err error) {
	now := time.Now()
	if !a.lastWarn.IsZero() && now.Sub(a.lastWarn) < pauseLogEvery {
		a.warned = false
		a.unlogged++
		return
	}
	msg := "accept failed; pausing accepts"
	switch {
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		msg = "out of file descriptors; pausing accepts"
	case errors.Is(err, syscall.ENOBUFS), errors.Is(err, syscall.ENOMEM):
		msg = "out of memory for sockets; pausing accepts"
	}
	a.srv.cfg.Logger.Warn(msg, "listener", a.ln.Addr().String(), "err", err, "unloggedPauses", a.unlogged)
	a.warned, a.lastWarn, a.unlogged = true, now, 0
}

// resume ends a burst of pauses after a successful registration.
func (a *acceptor) resume() {
	if a.delay == 0 {
		return
	}
	if a.warned {
		a.srv.cfg.Logger.Info("accepting again", "listener", a.ln.Addr().String(), "paused", time.Since(a.since).Round(time.Millisecond))
	}
	a.delay, a.warned = 0, false
}

// poke cuts a pause short. Safe for concurrent use.
func (a *acceptor) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}
