package loop

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/panjf2000/gnet/v2"
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
// goroutine per listener waits in Go's netpoller until the listener is
// readable (syscall.RawConn.Read) and then calls accept4(2) on its
// descriptor itself, non-blocking and close-on-exec, until the backlog is
// empty or it holds acceptBurst sockets. It gives each socket to the event
// loop with the fewest connections, one task per loop and burst (a
// pooled acceptBatch, gnet.EventLoop.Execute), which opens them there
// (enrollFD, gnetfd.go): gnet's connection is made for the descriptor as
// gnet's own acceptor makes it, without the net package's objects
// (net.TCPConn, its netFD and netpoll registration, two net.TCPAddr, the
// dup'ed descriptor that Client.Enroll needs) and without any address
// object: the peer's address is read from the raw sockaddr into a
// netip.AddrPort and formatted only when asked. The listener's
// TCP_NODELAY (set once by listen) is inherited by every accepted socket
// (Linux copies it), as Go's accepted sockets get it.
//
// On EMFILE, ENFILE, ENOBUFS or ENOMEM from accept4 the acceptor opens the
// sockets it already took and pauses: 5 ms, doubling to 1 s while the
// condition lasts, reset by a successful accept, and cut short when a
// connection closes (a descriptor was freed). Pending connections wait in
// the kernel's listen backlog meanwhile and are served once there is room;
// none is accepted only to be closed: a socket needs no other descriptor to
// be opened on a loop. It logs one warning per burst, at most one every
// 10 s, and one line when it accepts again. An acceptor does not wait for
// the loops to open what it handed them; when accepting stops it waits for
// the tasks still queued (Server.stopAccepting), so that none is left behind
// when the loops stop.
//
// A wss:// listener's acceptor takes net.TCPConns instead (AcceptTCP), for
// the TLS handshake needs a net.Conn, and registers each with
// Client.EnrollContext, which dups the descriptor onto a loop, where the
// socket waits for its first bytes before a handshake worker takes it
// (tls.go). It does not wait for the loop: each registration runs on a
// goroutine of its own (at most maxEnrolling at once), counted in
// Server.accepting like the acceptor, so Close still waits for them before
// it stops the loops. (Waiting for a loop costs two goroutine switches per
// socket, which under CPU load, a storm of TLS clients, took 20 ms on
// average and up to 3.5 s: the acceptor took about 50 sockets a second,
// the rest waited in the listen backlog, where no --handshake-timeout runs.)
// A registration needs a second descriptor for a moment (the dup), so this
// acceptor holds a spare one (/dev/null) and accepts only while it has it,
// giving it up to the registration; without it, a process with exactly one
// free descriptor would accept a connection and then close it when the dup
// fails, once per retry.

// Bounds of an acceptor's pause when it cannot accept.
const (
	minAcceptPause = 5 * time.Millisecond
	maxAcceptPause = time.Second
	pauseLogEvery  = 10 * time.Second
)

// acceptBurst is the most sockets an acceptor takes before it hands them to
// the loops.
const acceptBurst = 64

// acceptor accepts the connections of one listener and registers them on the
// event loops. Its fields other than the immutable ones belong to its
// goroutine (run).
type acceptor struct {
	srv   *Server          // immutable
	ln    *net.TCPListener // immutable
	proto proto            // immutable: the binding, Conn.Context() in OnOpen
	hs    *handshakers     // immutable: TLS handshake workers, nil without TLS
	wake  chan struct{}    // capacity 1: a connection closed while paused
	// queued counts the tasks handed to the loops and not yet run
	// (openAccepted).
	queued sync.WaitGroup
	// enrolling holds a slot per wss:// registration in flight (enroll);
	// failed has the error of one that failed, for the acceptor to pause.
	enrolling chan struct{} // capacity maxEnrolling
	failed    chan error    // capacity 1
	spare     int           // wss:// only: reserve descriptor, -1 when not held

	mu sync.Mutex
	// file is the listener's descriptor, dup'ed, which the acceptor polls
	// and accepts on: a net.TCPListener's RawConn cannot wait for
	// readiness (its Read is EINVAL). nil until run opens it (not with
	// TLS), and after close.
	file   *os.File // guarded by mu
	closed bool     // guarded by mu: close was called

	// ready is accept's callback for RawConn.Read, made once (a closure
	// made per wake-up was two allocations: itself and err); err is the
	// error it met. burst has the sockets of the current burst, load the
	// loops' connection counts while hand spreads them.
	ready    func(fd uintptr) bool
	err      error
	burst    []accepted
	load     []int32
	batches  sync.Pool     // *acceptBatch, back from the loops
	timer    *time.Timer   // pause timer, nil until the first pause
	delay    time.Duration // current pause, 0 when accepting
	since    time.Time     // start of the current burst of pauses
	warned   bool          // the current burst was logged
	lastWarn time.Time     // when a burst was last logged
	unlogged int           // bursts not logged since lastWarn
}

// accepted is a socket accept4 returned, on its way to an event loop: what
// OnOpen needs to know about it besides gnet's connection.
type accepted struct {
	fd    int
	proto proto
	peer  netip.AddrPort // the peer's address, IPv4-mapped ones as IPv4
}

// listen opens a TCP listener on addr. Go sets SO_REUSEADDR on listeners, as
// gnet.WithReuseAddr did, and TCP_NODELAY here, which accepted sockets
// inherit (Go's default for TCP connections, as gnet.TCPNoDelay); no
// keep-alive (as under gnet).
func listen(addr string) (*net.TCPListener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
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
	defer a.queued.Wait()
	if a.hs != nil {
		a.runTLS()
		return
	}
	raw, err := a.open()
	if err != nil {
		if !errors.Is(err, net.ErrClosed) {
			a.srv.cfg.Logger.Error("cannot accept", "listener", a.ln.Addr().String(), "err", err)
		}
		return
	}
	for {
		err := a.accept(raw)
		if errors.Is(err, net.ErrClosed) || err != nil && a.stopped() {
			return
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

// open dups the listener's descriptor for accept.
func (a *acceptor) open() (syscall.RawConn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, net.ErrClosed
	}
	f, err := a.ln.File() // non-blocking like the listener, in the netpoller
	if err != nil {
		return nil, err
	}
	a.file = f
	return f.SyscallConn()
}

// close closes the listener: run returns. Safe for concurrent use.
func (a *acceptor) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	_ = a.ln.Close()
	if a.file != nil {
		_ = a.file.Close()
		a.file = nil
	}
}

// stopped reports whether close was called. Safe for concurrent use.
func (a *acceptor) stopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// accept takes the sockets waiting in the listen backlog, at most
// acceptBurst, waiting in the netpoller while there is none, and hands them
// to the loops. It returns accept4's error, or the listener's once it is
// closed.
func (a *acceptor) accept(raw syscall.RawConn) error {
	if a.ready == nil {
		a.ready = a.acceptReady
	}
	a.err = nil
	err := raw.Read(a.ready)
	if len(a.burst) > 0 {
		a.hand(a.burst)
		clear(a.burst)
		a.burst = a.burst[:0]
	}
	if err != nil {
		return err
	}
	return a.err
}

// acceptReady is accept's RawConn.Read callback: it takes sockets into
// a.burst until the backlog is empty, the burst full or accept4 fails
// (a.err), and reports false to wait for readiness when there was none.
func (a *acceptor) acceptReady(lfd uintptr) bool {
	for len(a.burst) < acceptBurst {
		fd, peer, err := accept4(int(lfd))
		switch err {
		case nil:
			if !a.srv.cfg.peerAllowed(a.proto, peer) {
				_ = unix.Close(fd) // unanswered (proxy.go)
				a.srv.offLoop[rejectProxyUntrusted].Add(1)
				continue
			}
			a.burst = append(a.burst, accepted{fd: fd, proto: a.proto, peer: peer})
			continue
		case unix.EAGAIN:
			return len(a.burst) > 0 // wait for readiness when there was none
		case unix.EINTR, unix.ECONNABORTED:
			continue // a connection reset in the backlog (accept(2))
		}
		a.err = &net.OpError{Op: "accept", Net: "tcp", Addr: a.ln.Addr(), Err: os.NewSyscallError("accept4", err)}
		return true
	}
	return true
}

// accept4 accepts one connection of the listener lfd: a non-blocking,
// close-on-exec socket, and its peer's address. The sockaddr stays on the
// stack (unix.Accept4 would allocate one per call).
func accept4(lfd int) (int, netip.AddrPort, error) {
	var rsa unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	fd, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(lfd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)),
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, netip.AddrPort{}, e
	}
	return int(fd), sockaddrPeer(&rsa), nil
}

// sockaddrPeer is the address in a raw sockaddr, IPv4-mapped IPv6 as IPv4,
// or the zero AddrPort for another family.
func sockaddrPeer(rsa *unix.RawSockaddrAny) netip.AddrPort {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), netPort(sa.Port))
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), netPort(sa.Port))
	}
	return netip.AddrPort{}
}

// netPort reads a port stored in network byte order.
func netPort(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// hand gives each socket of burst to the loop with the fewest connections,
// one task per loop (an acceptBatch). The sockets are closed if a loop is
// stopping.
func (a *acceptor) hand(burst []accepted) {
	loops := a.srv.numbered
	if len(loops) == 1 {
		b := a.batch(loops[0])
		b.cs = append(b.cs, burst...)
		a.queue(b)
		return
	}
	a.load = a.load[:0]
	for _, l := range loops {
		a.load = append(a.load, l.open.Load())
	}
	var per [8]*acceptBatch // most deployments have as many loops as cores
	batches := per[:0]
	for range loops {
		batches = append(batches, nil)
	}
	for _, c := range burst {
		i := 0
		for j, n := range a.load {
			if n < a.load[i] {
				i = j
			}
		}
		a.load[i]++
		if batches[i] == nil {
			batches[i] = a.batch(loops[i])
		}
		batches[i].cs = append(batches[i].cs, c)
	}
	for _, b := range batches {
		if b != nil {
			a.queue(b)
		}
	}
}

// acceptBatch is the task that opens sockets of a burst on their loop
// (openAccepted): one per loop and burst, pooled by its acceptor, so
// that handing a burst over allocates nothing of edge's (a closure and a
// copy of the burst were two allocations per burst, that is per
// connection when they come one at a time).
type acceptBatch struct {
	a  *acceptor  // set by batch
	l  *eventLoop // set by batch
	cs []accepted // the sockets, owned by the task until it ran
}

// batch returns an empty acceptBatch for l from the pool.
func (a *acceptor) batch(l *eventLoop) *acceptBatch {
	b, _ := a.batches.Get().(*acceptBatch)
	if b == nil {
		b = &acceptBatch{a: a, cs: make([]accepted, 0, acceptBurst)}
	}
	b.l = l
	return b
}

// Run opens the batch's sockets on its loop and gives the batch back to
// the pool. Runs on the loop (gnet.Runnable).
func (b *acceptBatch) Run(context.Context) error {
	a := b.a
	defer a.queued.Done()
	b.l.openAccepted(b.cs)
	a.release(b)
	return nil
}

// release empties b and puts it back in the pool.
func (a *acceptor) release(b *acceptBatch) {
	clear(b.cs)
	b.cs, b.l = b.cs[:0], nil
	a.batches.Put(b)
}

// queue has b's loop open its sockets.
func (a *acceptor) queue(b *acceptBatch) {
	a.queued.Add(1)
	if err := b.l.el.Execute(context.Background(), b); err != nil { // the engine is stopping
		for _, c := range b.cs {
			_ = unix.Close(c.fd)
		}
		a.release(b)
		a.queued.Done()
	}
}

// openAccepted opens the accepted sockets cs on the loop: OnOpen runs for
// each. Runs on the loop.
func (l *eventLoop) openAccepted(cs []accepted) {
	for i := range cs {
		c := &cs[i]
		l.opening = c
		err := enrollFD(l.el, c.fd)
		l.opening = nil
		if err != nil {
			// gnet closed the socket: the loop's epoll set refused it
			// (ENOMEM, ENOSPC at max_user_watches).
			l.srv.cfg.Logger.Warn("cannot open an accepted connection", "err", err)
			continue
		}
		l.srv.accepted[c.proto-1].Add(1)
	}
}

// runTLS accepts the connections of a wss:// listener until it is closed.
func (a *acceptor) runTLS() {
	defer a.dropSpare()
	for {
		var err error
		select {
		case err = <-a.failed: // a registration (enroll)
		default:
			err = a.reserve()
		}
		if err == nil {
			var c *net.TCPConn
			c, err = a.ln.AcceptTCP()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil && !a.srv.cfg.peerAllowed(a.proto, remoteAddr(c.RemoteAddr())) {
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

// register hands the wss:// connection c to an event loop before its TLS
// handshake, which waits there for its first bytes (tls.go); it counts as
// accepted once its handshake is done. Its registration runs on a goroutine
// of its own (enroll), and register returns at once, unless maxEnrolling
// are in flight. The spare descriptor goes with it, for the dup.
func (a *acceptor) register(c *net.TCPConn) error {
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

// openedAs returns the binding and the peer's address of the connection c
// that gnet is opening on l: an accepted socket's (openAccepted), or, for a
// net.Conn enrolled by the wss:// acceptor (register), the WebSocket binding and the
// net.Conn's remote address. Runs on the loop, in OnOpen.
func (l *eventLoop) openedAs(c gnet.Conn) (proto, netip.AddrPort) {
	if a := l.opening; a != nil {
		return a.proto, a.peer
	}
	return protoWebSocket, remoteAddr(c.RemoteAddr())
}
