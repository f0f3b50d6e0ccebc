// Package loop is the event-loop server of edge: gnet v2 loops that terminate
// WebSocket connections, parse frames zero-copy with package codec, and drive
// one rpc.Session per connection. It is the only package that imports gnet.
//
// Every connection, its session and its event loop's bookkeeping are owned by
// that loop's goroutine and have no locks. Workers reach a loop only through
// its completion queue (eventLoop.Post), which the loop drains in one turn and
// answers with one write per connection. The loops also serve the
// forwarders' byte-stream connections to upstreams (wire.go, bytestream.Loops):
// a forwarded call and its answer stay on the loop that owns the connection.
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

	"github.com/openengine/edge/rpc"
)

// Server is a running gateway listener. Each exported method states its
// concurrency class: immutable (a value fixed once Start returned),
// concurrent (safe from any goroutine), loop (on an event loop only) or
// once. gnet's callbacks are not among them: they are handler's.
type Server struct {
	cfg Config      // immutable after New
	rpc *rpc.Server // immutable after New

	cli      *gnet.Client // immutable after Start: the event loops
	addr     net.Addr     // immutable after Start: WebSocket listener
	ndAddr   net.Addr     // immutable after Start: NDJSON listener or nil
	stopOnce sync.Once
	done     chan struct{} // closed when the acceptors and the event loops have stopped
	paused   atomic.Int64  // connections over their soft outbound cap
	limits   connLimits    // open connections, for MaxConns and MaxConnsPerIP
	// parked is the bytes of WebSocket messages in progress that every
	// connection holds (parked.go), parkedClosed the connections closed
	// over Config.MaxParkedBytes. Atomic.
	parked       atomic.Int64
	parkedClosed atomic.Uint64
	tails        tailSet   // half-closed NDJSON connections (halfclose.go)
	nextFull     time.Time // ticker goroutine only: next full timeout sweep

	acceptors []*acceptor    // immutable after Start: one per listener
	accepting sync.WaitGroup // the acceptors' goroutines
	quit      chan struct{}  // closed when accepting stops
	quitOnce  sync.Once
	starved   atomic.Int32 // acceptors pausing for want of descriptors

	accepted [NumTransports]atomic.Uint64 // connections registered, by transport (stats.go)
	// offLoop counts the refusals decided off the loops: acceptor pauses
	// (rejectAcceptPaused).
	offLoop [numRejectReasons]atomic.Uint64
	hs      *handshakers // immutable after Start: nil without TLS

	mu    sync.Mutex
	loops map[gnet.EventLoop]*eventLoop // guarded by mu
	// numbered are the loops by number (bytestream.Loops), set by Start.
	numbered []*eventLoop // guarded by mu while Start numbers them; immutable after
}

// handler is the Server as gnet's EventHandler. Its callbacks run on the
// event loops (OnOpen, OnTraffic, OnClose) or on gnet's ticker goroutine
// (OnTick), so they are off the Server's API: nothing but gnet calls
// them.
type handler struct {
	gnet.BuiltinEventEngine // OnBoot, OnShutdown: nothing to do
	s                       *Server
}

// OnOpen implements gnet.EventHandler. Loop.
func (h *handler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) { return h.s.onOpen(c) }

// OnTraffic implements gnet.EventHandler. Loop.
func (h *handler) OnTraffic(c gnet.Conn) gnet.Action { return h.s.onTraffic(c) }

// OnClose implements gnet.EventHandler. Loop.
func (h *handler) OnClose(c gnet.Conn, err error) gnet.Action { return h.s.onClose(c, err) }

// OnTick implements gnet.EventHandler. On gnet's ticker goroutine.
func (h *handler) OnTick() (time.Duration, gnet.Action) { return h.s.onTick() }

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
		done:  make(chan struct{}),
		quit:  make(chan struct{}),
		loops: make(map[gnet.EventLoop]*eventLoop),
	}, nil
}

// Start opens the listeners, starts the event loops and the acceptors, and
// returns once connections are accepted, or with the error that kept it from
// starting. The listeners and their acceptors are edge's, not gnet's
// (accept.go). Once.
func (s *Server) Start() error {
	ws, err := listen(s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("loop: listen %s: %w", s.cfg.Listen, err)
	}
	s.addr = ws.Addr()
	s.acceptors = []*acceptor{newAcceptor(s, ws, protoWebSocket)}
	if s.cfg.TLS != nil {
		s.hs = newHandshakers(s, s.cfg.TLS, s.cfg.HandshakePool, s.cfg.HandshakeQueue)
		s.acceptors[0].hs = s.hs
	}
	if s.cfg.NDJSONListen != "" {
		nd, err := listen(s.cfg.NDJSONListen)
		if err != nil {
			ws.Close()
			return fmt.Errorf("loop: ndjson-listen %s: %w", s.cfg.NDJSONListen, err)
		}
		s.ndAddr = nd.Addr()
		s.acceptors = append(s.acceptors, newAcceptor(s, nd, protoNDJSON))
	}
	cli, err := gnet.NewClient(&handler{s: s},
		gnet.WithNumEventLoop(s.cfg.Loops),
		gnet.WithTicker(true),
		gnet.WithReadBufferCap(s.cfg.ReadBufferBytes),
		// Go has set TCP_NODELAY on the accepted socket already; this only
		// keeps EnrollContext from setting it again.
		gnet.WithTCPNoDelay(gnet.TCPDelay),
		gnet.WithLogger(gnetLogger{s.cfg.Logger}),
	)
	if err == nil {
		err = cli.Start()
	}
	if err != nil {
		for _, a := range s.acceptors {
			a.close()
		}
		return fmt.Errorf("loop: start event loops: %w", err)
	}
	s.cli = cli
	err = s.number(s.cfg.Loops)
	if err == nil {
		err = checkGnet(s.numbered[0].el) // gnetfd.go
	}
	if err != nil {
		_ = cli.Stop()
		for _, a := range s.acceptors {
			a.close()
		}
		return fmt.Errorf("loop: start event loops: %w", err)
	}
	for _, a := range s.acceptors {
		s.accepting.Add(1)
		go a.run()
	}
	return nil
}

// stopAccepting closes the listeners and waits for their acceptors to
// return. Safe for concurrent use.
func (s *Server) stopAccepting() {
	s.quitOnce.Do(func() {
		close(s.quit)
		for _, a := range s.acceptors {
			a.close()
		}
		if s.hs != nil {
			s.hs.abort()
		}
	})
	s.accepting.Wait()
}

// TLSHandshakes reports the TLS handshakes running on the pool's workers
// and those waiting in its queue (--handshake-pool, --handshake-queue).
// Concurrent.
func (s *Server) TLSHandshakes() (running, queued int) {
	if s.hs == nil {
		return 0, 0
	}
	return s.hs.queued()
}

// Addr is the address the WebSocket listener is bound to (useful with port
// 0). Immutable after Start.
func (s *Server) Addr() net.Addr { return s.addr }

// NDJSONAddr is the address of the NDJSON listener, or nil when it is off.
// Immutable after Start.
func (s *Server) NDJSONAddr() net.Addr { return s.ndAddr }

// Done is closed once Close (or Shutdown) has stopped the acceptors and the
// event loops. gnet's loops do not stop on their own: without listeners no
// accept error reaches them, and Polling returns otherwise only if
// epoll_wait fails. Immutable (the channel); concurrent.
func (s *Server) Done() <-chan struct{} { return s.done }

// loopOf returns edge's state for a gnet event loop, creating it on first use.
func (s *Server) loopOf(el gnet.EventLoop) *eventLoop {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.loops[el]
	if l == nil {
		l = &eventLoop{srv: s, el: el, index: -1, epfd: epollFD(el), spareMax: s.cfg.SpareOutputBytes, ctr: &rpc.Counters{}}
		if s.rpc != nil {
			l.turn = s.rpc.NewTurn()
			l.ctr = s.rpc.NewCounters()
		}
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

// onOpen is gnet's OnOpen (handler). Loop.
func (s *Server) onOpen(c gnet.Conn) ([]byte, gnet.Action) {
	l := s.loopOf(c.EventLoop())
	switch c.Context().(type) {
	case probe, *wire:
		return nil, s.openWire(c, l)
	}
	if s.rpc != nil && s.rpc.Draining() {
		l.counts.rejected[rejectDraining]++
		return nil, gnet.Close
	}
	now := time.Now()
	over := s.limits.admit(s.cfg.MaxConns)
	w := &conn{c: c, l: l, proto: protoWebSocket, lastRead: at(now), deadline: at(now.Add(s.cfg.HandshakeTimeout)), over: over}
	p, peer := l.openedAs(c)
	t, _ := c.Context().(*tlsState) // the wss:// acceptor's (tls.go)
	if t != nil {
		if h := testHookTLSOpen; h != nil {
			h()
		}
		// Until its first bytes the connection has the silent peer's
		// deadline; then the whole handshake timeout (tls.go).
		w.more().tls = t
		w.deadline = at(t.accepted.Add(min(s.cfg.HandshakeSilentTimeout, s.cfg.HandshakeTimeout)))
	}
	if p == protoNDJSON {
		w.countIP(peer)
		if w.over { // no handshake to answer 503 on
			w.releaseLimits()
			l.counts.rejected[rejectLimit]++
			return nil, gnet.Close
		}
		w.proto = protoNDJSON
		w.open()
	} else {
		// The client's address (CONTRACT.md section 11.5): a PROXY header's
		// (read first, proxy.go), X-Forwarded-For's from a trusted proxy
		// (at the upgrade), or the peer's, counted now.
		// On a TLS connection the PROXY header comes before the
		// ClientHello (tlsHello).
		w.remote = peer
		switch {
		case s.cfg.ProxyProtocol:
			w.proxyPending = true
		case s.cfg.trustedProxy(peer.Addr()):
			w.viaProxy = true
		default:
			w.countIP(peer)
		}
	}
	l.add(w)
	c.SetContext(w)
	return nil, gnet.None
}

// onTraffic is gnet's OnTraffic (handler). Loop.
func (s *Server) onTraffic(c gnet.Conn) gnet.Action {
	w, ok := c.Context().(*conn)
	if !ok {
		if x, ok := c.Context().(*wire); ok {
			now := time.Now()
			x.l.clock(now)
			return x.traffic(now.UnixNano())
		}
		return gnet.Close
	}
	now := time.Now()
	w.l.clock(now)
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
	s.input(w, buf, now)
	return gnet.None
}

// input handles the input gnet holds for w, buf, and ends the turn.
func (s *Server) input(w *conn, buf []byte, now time.Time) {
	w.input(buf, now)
	w.l.endTurn()
	w.l.flushDeferred()
}

// onClose is gnet's OnClose (handler). Loop.
func (s *Server) onClose(c gnet.Conn, err error) gnet.Action {
	if x, ok := c.Context().(*wire); ok {
		x.closed(err)
		c.SetContext(nil)
	}
	if w, ok := c.Context().(*conn); ok {
		if !w.halfClosed(c, err) {
			w.closed()
		}
		c.SetContext(nil)
	}
	if s.starved.Load() > 0 {
		// gnet closes the descriptor after OnClose returns: wake paused
		// acceptors from a task that runs after that.
		_ = c.EventLoop().Execute(context.Background(), gnet.RunnableFunc(s.wakeAcceptors))
	}
	return gnet.None
}

// wakeAcceptors cuts the pauses of the acceptors short. Safe for concurrent use.
func (s *Server) wakeAcceptors(context.Context) error {
	for _, a := range s.acceptors {
		a.poke()
	}
	return nil
}

// onTick is gnet's OnTick (handler): it asks every loop to sweep its
// connections for timeouts. It runs on gnet's ticker goroutine, not a loop.
//
// While any connection is paused for backpressure it ticks every 10 ms so that
// a consumer that catches up is resumed promptly.
func (s *Server) onTick() (time.Duration, gnet.Action) {
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

// Shutdown drains the gateway (CONTRACT.md section 9): the listeners are
// closed, so new connections are refused, new requests are answered
// SERVER_SHUTTING_DOWN, in-flight work gets up to ShutdownTimeout to finish
// and deliver its responses, then every WebSocket is closed with 1001 and the
// engine stops. Concurrent (a second call, or Close, stops what the first
// started); not on an event loop, as it waits for them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
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

// Close stops accepting and stops the event loops at once: every connection
// is closed. Concurrent; not on an event loop, as it waits for them to
// stop.
func (s *Server) Close(ctx context.Context) error {
	s.stopAccepting()
	s.stopOnce.Do(func() {
		if s.cli == nil { // never started
			close(s.done)
			return
		}
		go func() {
			if err := s.cli.Stop(); err != nil {
				s.cfg.Logger.Warn("stopping the event loops", "err", err)
			}
			s.tails.closeAll() // the loops have stopped
			close(s.done)
		}()
	})
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
