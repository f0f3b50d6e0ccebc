// Package loop is the event-loop server of edge: gnet v2 loops that terminate
// WebSocket connections, parse frames zero-copy with package codec, and drive
// one rpc.Session per connection. It is the only package that imports gnet.
//
// Every connection, its session and its event loop's bookkeeping are owned by
// that loop's goroutine and have no locks. Workers reach a loop only through
// its completion queue (eventLoop.Post), which the loop drains in one turn and
// answers with one write per connection.
package loop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/openengine/edge/rpc"
)

// Server is a running gateway listener. Its exported methods are safe for
// concurrent use.
type Server struct {
	gnet.BuiltinEventEngine

	cfg Config      // immutable after New
	rpc *rpc.Server // immutable after New

	eng      gnet.Engine // set in OnBoot, before ready is closed
	addr     net.Addr    // set in OnBoot, before ready is closed: WebSocket listener
	ndAddr   net.Addr    // set in OnBoot, before ready is closed: NDJSON listener or nil
	ready    chan struct{}
	done     chan struct{} // closed when the engine has stopped
	runErr   error         // set before done is closed
	paused   atomic.Int64  // connections over their soft outbound cap
	tails    tailSet       // half-closed NDJSON connections (halfclose.go)
	nextFull time.Time     // ticker goroutine only: next full timeout sweep

	mu    sync.Mutex
	loops map[gnet.EventLoop]*eventLoop // guarded by mu
}

// New validates cfg and returns a server that serves sessions of srv.
func New(cfg Config, srv *rpc.Server) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if srv == nil && !cfg.Echo {
		return nil, errors.New("loop: no rpc server")
	}
	return &Server{
		cfg:   cfg.withDefaults(),
		rpc:   srv,
		ready: make(chan struct{}),
		done:  make(chan struct{}),
		loops: make(map[gnet.EventLoop]*eventLoop),
	}, nil
}

// Start starts the event loops and returns once the listener accepts
// connections, or with the error that kept it from starting.
func (s *Server) Start() error {
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(s.cfg.Loops),
		gnet.WithReuseAddr(true),
		gnet.WithTicker(true),
		gnet.WithReadBufferCap(s.cfg.ReadBufferBytes),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetLogger{s.cfg.Logger}),
	}
	addrs := []string{"tcp://" + s.cfg.Listen}
	if s.cfg.NDJSONListen != "" {
		addrs = append(addrs, "tcp://"+ndjsonAddress(s.cfg.Listen, s.cfg.NDJSONListen))
	}
	go func() {
		s.runErr = gnet.Rotate(s, addrs, opts...)
		s.tails.closeAll() // the loops have stopped
		close(s.done)
	}()
	select {
	case <-s.ready:
		return nil
	case <-s.done:
		if s.runErr == nil {
			return errors.New("loop: engine stopped before it started")
		}
		return fmt.Errorf("loop: listen %s: %w", s.cfg.Listen, s.runErr)
	}
}

// Addr is the address the WebSocket listener is bound to (useful with port 0).
func (s *Server) Addr() net.Addr { return s.addr }

// NDJSONAddr is the address of the NDJSON listener, or nil when it is off.
func (s *Server) NDJSONAddr() net.Addr { return s.ndAddr }

// Done is closed when the engine has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// OnBoot implements gnet.EventHandler.
func (s *Server) OnBoot(eng gnet.Engine) gnet.Action {
	s.eng = eng
	s.addr = listenerAddr(eng, s.cfg.Listen)
	if s.cfg.NDJSONListen != "" {
		s.ndAddr = listenerAddr(eng, ndjsonAddress(s.cfg.Listen, s.cfg.NDJSONListen))
	}
	close(s.ready)
	return gnet.None
}

// ndjsonAddress returns the address string the NDJSON listener is opened
// with. gnet finds a listener by its address string, so when both listeners
// ask for the same ephemeral address (127.0.0.1:0, as tests do) the NDJSON one
// is spelled with port "00": the same port 0 to the kernel, a different string
// to gnet. Equal non-zero ports fail to bind anyway.
func ndjsonAddress(ws, nd string) string {
	if nd != ws {
		return nd
	}
	host, port, err := net.SplitHostPort(nd)
	if err != nil || port != "0" {
		return nd
	}
	return net.JoinHostPort(host, "00")
}

// listenerAddr returns the bound address of the engine's listener on addr.
func listenerAddr(eng gnet.Engine, addr string) net.Addr {
	fd, err := eng.DupListener("tcp", addr)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil
	}
	return sockaddrToTCP(sa)
}

// isNDJSON reports whether c was accepted by the NDJSON listener.
func (s *Server) isNDJSON(c gnet.Conn) bool {
	if s.ndAddr == nil {
		return false
	}
	// gnet reports the listener's configured address as LocalAddr (port 0
	// stays 0), so ask the kernel where the connection was accepted.
	sa, err := unix.Getsockname(c.Fd())
	if err != nil {
		return false
	}
	la, ok := sockaddrToTCP(sa).(*net.TCPAddr)
	nd, _ := s.ndAddr.(*net.TCPAddr)
	return ok && nd != nil && la.Port == nd.Port && (nd.IP.IsUnspecified() || la.IP.Equal(nd.IP))
}

func sockaddrToTCP(sa unix.Sockaddr) net.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	}
	return nil
}

// loopOf returns edge's state for a gnet event loop, creating it on first use.
func (s *Server) loopOf(el gnet.EventLoop) *eventLoop {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.loops[el]
	if l == nil {
		l = &eventLoop{srv: s, el: el, epfd: epollFD(el), spareMax: s.cfg.SpareOutputBytes}
		if l.epfd < 0 {
			s.cfg.Logger.Warn("cannot pause reads on this gnet build; slow consumers that keep sending are closed instead")
		}
		s.loops[el] = l
	}
	return l
}

func (s *Server) eventLoops() []*eventLoop {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := make([]*eventLoop, 0, len(s.loops))
	for _, l := range s.loops {
		ls = append(ls, l)
	}
	return ls
}

// OnOpen implements gnet.EventHandler.
func (s *Server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if s.rpc != nil && s.rpc.Draining() {
		return nil, gnet.Close
	}
	l := s.loopOf(c.EventLoop())
	now := time.Now()
	w := &conn{c: c, l: l, proto: protoWebSocket, lastRead: now, deadline: now.Add(s.cfg.HandshakeTimeout)}
	if s.isNDJSON(c) {
		w.proto = protoNDJSON
		w.open()
	}
	l.add(w)
	c.SetContext(w)
	return nil, gnet.None
}

// OnTraffic implements gnet.EventHandler.
func (s *Server) OnTraffic(c gnet.Conn) gnet.Action {
	w, ok := c.Context().(*conn)
	if !ok {
		return gnet.Close
	}
	now := time.Now()
	if w.paused {
		if !w.Writable() {
			// Fallback when reads cannot be paused: input piles up in gnet's
			// buffer; a peer that keeps sending past a bound is closed.
			if c.InboundBuffered() > s.cfg.MaxMessageBytes+s.cfg.ReadBufferBytes {
				w.slowConsumer()
				w.l.flush()
			}
			return gnet.None
		}
		w.unpause(now)
		w.l.flush()
		return gnet.None
	}
	buf, _ := c.Peek(-1)
	if len(buf) == 0 {
		return gnet.None // a Wake, or nothing new
	}
	if n := w.traffic(buf, now); n > 0 {
		_, _ = c.Discard(n)
	}
	w.l.endTurn()
	w.l.flush()
	return gnet.None
}

// OnClose implements gnet.EventHandler.
func (s *Server) OnClose(c gnet.Conn, err error) gnet.Action {
	if w, ok := c.Context().(*conn); ok {
		if !w.halfClosed(c, err) {
			w.closed()
		}
		c.SetContext(nil)
	}
	return gnet.None
}

// OnTick implements gnet.EventHandler: it asks every loop to sweep its
// connections for timeouts. It runs on gnet's ticker goroutine, not a loop.
//
// While any connection is paused for backpressure it ticks every 10 ms so that
// a consumer that catches up is resumed promptly.
func (s *Server) OnTick() (time.Duration, gnet.Action) {
	now := time.Now()
	full := !now.Before(s.nextFull)
	if full {
		s.nextFull = now.Add(s.cfg.tickInterval())
	}
	paused := s.paused.Load() > 0
	for _, l := range s.eventLoops() {
		if full {
			l.scheduleSweep()
		}
		if paused {
			l.schedulePausedSweep()
		}
	}
	if paused {
		return pausedTick, gnet.None
	}
	return time.Until(s.nextFull), gnet.None
}

// pausedTick is the sweep period while connections are paused.
const pausedTick = 10 * time.Millisecond

// Shutdown drains the gateway (CONTRACT.md section 9): new connections are
// refused, new requests are answered SERVER_SHUTTING_DOWN, in-flight work gets
// up to ShutdownTimeout to finish and deliver its responses, then every
// WebSocket is closed with 1001 and the engine stops.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.rpc == nil {
		return s.Close(ctx)
	}
	s.rpc.Drain()
	wait, cancel := context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.rpc.InFlight() > 0 {
		select {
		case <-wait.Done():
			s.cfg.Logger.Warn("shutdown timeout with backend work still running", "running", s.rpc.InFlight())
			goto closeAll
		case <-tick.C:
		}
	}
closeAll:
	for _, l := range s.eventLoops() {
		_ = l.el.Execute(context.Background(), gnet.RunnableFunc(l.closeAll))
	}
	// Give peers a moment to answer the close frames before the engine stops;
	// the engine flushes what is queued when it closes each connection.
	grace := time.NewTimer(min(s.cfg.CloseTimeout, 200*time.Millisecond))
	select {
	case <-grace.C:
	case <-ctx.Done():
		grace.Stop()
	}
	return s.Close(ctx)
}

// Close stops the engine at once: every connection is closed.
func (s *Server) Close(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	// gnet's Engine.Stop polls for the end every 500 ms; the engine is done
	// when Run returns, so wait for that instead.
	stopErr := make(chan error, 1)
	go func() { stopErr <- s.eng.Stop(ctx) }()
	select {
	case <-s.done:
		return nil
	case err := <-stopErr:
		if err != nil {
			return err
		}
		<-s.done
		return nil
	}
}
