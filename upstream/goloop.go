package upstream

import (
	"net"
	"sync"
)

// goLoop is the event loop of an upstream started without the gateway's
// (Upstream.Start: edge --stdio, tests): one goroutine runs the tasks the
// links would run on a gateway loop, in order, and each connection has a
// reader goroutine, which hands what it reads to the loop, and a writer
// goroutine, which writes what the loop queued. It implements
// Loops with one loop.
type goLoop struct {
	mu      sync.Mutex
	cond    *sync.Cond
	q       []func()  // guarded by mu
	stopped bool      // guarded by mu
	dirty   []*goConn // loop-owned
	done    chan struct{}
}

func newGoLoop() *goLoop {
	g := &goLoop{done: make(chan struct{})}
	g.cond = sync.NewCond(&g.mu)
	go g.run()
	return g
}

// NumLoops implements Loops.
func (g *goLoop) NumLoops() int { return 1 }

// Run implements Loops.
func (g *goLoop) Run(_ int, f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.q = append(g.q, f)
	g.cond.Signal()
	return true
}

// wait runs f on the loop and returns once it has run.
func (g *goLoop) wait(f func()) bool {
	done := make(chan struct{})
	if !g.Run(0, func() { f(); close(done) }) {
		return false
	}
	<-done
	return true
}

func (g *goLoop) run() {
	defer close(g.done)
	for {
		g.mu.Lock()
		for len(g.q) == 0 && !g.stopped {
			g.cond.Wait()
		}
		q := g.q
		g.q = nil
		stopped := g.stopped
		g.mu.Unlock()
		for _, f := range q {
			f()
		}
		for i, c := range g.dirty {
			g.dirty[i] = nil
			c.flush()
		}
		g.dirty = g.dirty[:0]
		if stopped && len(q) == 0 {
			return
		}
	}
}

// stop ends the loop once the tasks queued have run.
func (g *goLoop) stop() {
	g.mu.Lock()
	g.stopped = true
	g.cond.Signal()
	g.mu.Unlock()
	<-g.done
}

// Attach implements Loops.
func (g *goLoop) Attach(_ int, c net.Conn, w Wire) error {
	gc := &goConn{g: g, c: c, w: w, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	if !g.wait(func() { w.Open(gc) }) {
		c.Close()
		return net.ErrClosed
	}
	go gc.write()
	go gc.read()
	return nil
}

// goConn is a connection of a goLoop: the WireConn of its Wire.
type goConn struct {
	g *goLoop
	c net.Conn
	w Wire

	dirty bool // loop-owned
	// closed is set on the loop once Closed has been called.
	closed bool // loop-owned

	mu      sync.Mutex
	out     []byte        // guarded by mu: for the writer
	writing int           // guarded by mu: bytes the writer took and has not written yet
	wake    chan struct{} // cap 1
	quit    chan struct{} // closed by the reader when it ends
}

// read reads until the connection fails and hands the bytes to the Wire on
// the loop.
func (gc *goConn) read() {
	buf := make([]byte, 0, 64<<10)
	var err error
	for err == nil {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var n int
		n, err = gc.c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n == 0 {
			continue
		}
		var consumed int
		var terr error
		if !gc.g.wait(func() { consumed, terr = gc.w.Traffic(buf, nowNanos()) }) {
			break
		}
		buf = buf[:copy(buf, buf[consumed:])]
		if terr != nil {
			err = terr
		}
	}
	gc.c.Close()
	close(gc.quit)
	gc.g.Run(0, func() {
		gc.closed = true
		gc.w.Closed(err)
	})
}

// write writes what the loop queued until the reader ends.
func (gc *goConn) write() {
	var spare []byte
	for {
		select {
		case <-gc.quit:
			return
		case <-gc.wake:
		}
		gc.mu.Lock()
		out := gc.out
		gc.out = spare[:0]
		gc.writing = len(out)
		gc.mu.Unlock()
		_, err := gc.c.Write(out)
		gc.mu.Lock()
		gc.writing = 0
		gc.mu.Unlock()
		if err != nil {
			gc.c.Close()
			return
		}
		spare = out
	}
}

// flush hands the Wire's output to the writer. On the loop.
func (gc *goConn) flush() {
	gc.dirty = false
	if gc.closed {
		return
	}
	gc.Write(gc.w.Output())
}

// Dirty implements WireConn.
func (gc *goConn) Dirty() {
	if !gc.dirty {
		gc.dirty = true
		gc.g.dirty = append(gc.g.dirty, gc)
	}
}

// Buffered implements WireConn: what waits for the writer and what it is
// writing.
func (gc *goConn) Buffered() int {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return len(gc.out) + gc.writing
}

// Write implements WireConn.
func (gc *goConn) Write(p []byte) {
	if len(p) == 0 {
		return
	}
	gc.mu.Lock()
	gc.out = append(gc.out, p...)
	gc.mu.Unlock()
	select {
	case gc.wake <- struct{}{}:
	default:
	}
}

// CloseWrite implements WireConn: once what is queued is written.
func (gc *goConn) CloseWrite() {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if cw, ok := gc.c.(interface{ CloseWrite() error }); ok && len(gc.out) == 0 {
		_ = cw.CloseWrite()
		return
	}
	// Rare (output still queued at shutdown): the child gets EOF when the
	// connection closes instead.
	_ = gc.c.Close()
}

// Close implements WireConn.
func (gc *goConn) Close() { _ = gc.c.Close() }
