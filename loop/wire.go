package loop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/openengine/edge/bytestream"
)

// This file serves a forwarder's byte-stream connections (an upstream's
// NDJSON and WebSocket connections, an exec child's socket) on the event
// loops: Server implements bytestream.Loops. The forwarder dials, then Attach
// enrolls the connection on the loop it names, the way the acceptors enroll
// clients (accept.go), with a context value that marks it as a wire. From
// then on the loop reads it in OnTraffic and hands the bytes to the
// forwarder's bytestream.Wire; the answers to calls of sessions on the same
// loop are applied as the Wire parses them (backend.LoopCall), and anything
// it posts meanwhile (a failure) by the drain the post schedules. What it queued for the upstream is
// written once the loop has handled every socket of the poller's round
// (eventLoop.flushDeferred), in one write for the calls of every client
// read in the round, or at once past 64 KiB (the forwarder's choice).

var _ bytestream.Loops = (*Server)(nil)

// wire is a forwarder's connection on a loop: the loop's side of it
// (bytestream.WireConn). Loop-owned.
type wire struct {
	w     bytestream.Wire // immutable
	c     gnet.Conn       // set in OnOpen
	l     *eventLoop      // set in OnOpen
	dirty bool            // in l.wires, to be flushed
}

// probe marks the connections Start enrolls to learn the loops' numbering.
type probe struct{}

// NumLoops implements bytestream.Loops. Immutable after Start.
func (s *Server) NumLoops() int { return len(s.numbered) }

// Attach implements bytestream.Loops. Concurrent; not on an event loop, as
// it waits for loop i to open the connection.
func (s *Server) Attach(i int, c net.Conn, w bytestream.Wire) error {
	if i < 0 || i >= len(s.numbered) {
		c.Close()
		return fmt.Errorf("loop: no event loop %d", i)
	}
	ch, err := s.numbered[i].el.Enroll(gnet.NewContext(context.Background(), &wire{w: w}), c)
	if err != nil {
		c.Close()
		return err
	}
	res := <-ch
	return res.Err
}

// Run implements bytestream.Loops. Concurrent.
func (s *Server) Run(i int, f func()) bool {
	if i < 0 || i >= len(s.numbered) {
		return false
	}
	l := s.numbered[i]
	err := l.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		f()
		l.flush()
		return nil
	}))
	return err == nil
}

// Home implements backend.Homed: sessions name their loop to the forwarders.
func (l *eventLoop) Home() (any, int) { return l.srv, l.index }

// number learns which gnet event loop is which: it enrolls one end of a
// socket pair at a time, each held open until every loop has one, so that
// gnet's load balancing (least connections, or round robin) puts each on a
// loop without one; OnOpen numbers the loops as they come. Called by Start
// before the acceptors run, so the probes are the only connections enrolled
// meanwhile. The probes are closed at the end.
func (s *Server) number(n int) error {
	var probes []gnet.Conn
	var peers []int
	defer func() {
		for _, c := range probes {
			_ = c.Close()
		}
		for _, fd := range peers {
			_ = unix.Close(fd)
		}
	}()
	for tries := 0; len(s.numbered) < n && tries < 4*n; tries++ {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		peers = append(peers, fds[1])
		c, err := fileConn(fds[0])
		if err != nil {
			return err
		}
		gc, err := s.cli.EnrollContext(c, probe{})
		if err != nil {
			return err
		}
		probes = append(probes, gc)
	}
	if len(s.numbered) < n {
		return errors.New("loop: cannot number the event loops")
	}
	return nil
}

// openWire is OnOpen of a wire or a probe.
func (s *Server) openWire(c gnet.Conn, l *eventLoop) gnet.Action {
	switch x := c.Context().(type) {
	case probe:
		s.mu.Lock()
		if l.index < 0 {
			l.index = len(s.numbered)
			s.numbered = append(s.numbered, l)
		}
		s.mu.Unlock()
	case *wire:
		x.c, x.l = c, l
		x.w.Open(x)
	}
	return gnet.None
}

// traffic is OnTraffic of a wire, whose input was read at now (the loop's
// clock): the Wire consumes what it can, completing the calls of this
// loop's sessions as it goes, and what that queued for them is flushed.
func (x *wire) traffic(now int64) gnet.Action {
	buf, _ := x.c.Peek(-1)
	if len(buf) == 0 {
		return gnet.None
	}
	// The answers to this loop's sessions are applied as they are parsed
	// (backend.LoopCall); what else the Wire finishes meanwhile (a
	// failure, a call of a session on no loop) is posted, and applied by
	// the drain the post schedules.
	n, err := x.w.Traffic(buf, now)
	if n > 0 {
		_, _ = x.c.Discard(n)
	}
	x.l.flush()
	if err != nil {
		return gnet.Close
	}
	return gnet.None
}

// Dirty implements bytestream.WireConn.
func (x *wire) Dirty() {
	if !x.dirty {
		x.dirty = true
		x.l.wires = append(x.l.wires, x)
	}
}

// flush writes what the Wire queued.
func (x *wire) flush() {
	x.dirty = false
	if p := x.w.Output(); len(p) > 0 && x.c != nil {
		_, _ = x.c.Write(p)
	}
}

// Buffered implements bytestream.WireConn.
func (x *wire) Buffered() int {
	if x.c == nil {
		return 0
	}
	return x.c.OutboundBuffered()
}

// Write implements bytestream.WireConn.
func (x *wire) Write(p []byte) {
	if x.c != nil {
		_, _ = x.c.Write(p)
	}
}

// CloseWrite implements bytestream.WireConn.
func (x *wire) CloseWrite() {
	if x.c == nil {
		return
	}
	if x.c.OutboundBuffered() > 0 {
		_ = x.c.Flush()
	}
	_ = unix.Shutdown(x.c.Fd(), unix.SHUT_WR)
}

// Close implements bytestream.WireConn.
func (x *wire) Close() {
	if x.c != nil {
		_ = x.c.Close()
	}
}

// closed is OnClose of a wire.
func (x *wire) closed(err error) {
	x.c = nil
	x.w.Closed(err)
}

// fileConn returns a net.Conn of the socket fd, which it takes over.
func fileConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "socket")
	defer f.Close()
	return net.FileConn(f)
}
