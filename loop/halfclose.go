package loop

import (
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/buffer/elastic"
	"golang.org/x/sys/unix"
)

// An NDJSON client over TCP may half-close (shutdown(SHUT_WR), as `nc -N`
// does) and wait for its answers; stdio answers everything before EOF and a
// final line without its "\n", and the same input must get the same answers
// on both (CONTRACT.md section 1.2). gnet v2.9 ends a connection as soon as a
// read returns 0: it calls OnClose, then closes the descriptor. There is no
// earlier point to catch the EOF at: it often comes alone, in a later read
// than the last request (a FIN arriving after the loop read the data), and
// gnet reads every readable socket; with level-triggered epoll, EPOLLRDHUP
// comes together with EPOLLIN, which gnet handles by reading.
//
// So OnClose keeps the connection: before gnet closes its descriptor, it
// takes a duplicate of it, hands the input still buffered (complete lines not
// consumed while paused, then the final fragment) to the session, and the
// session goes on, on its loop, with no more input. Its output, which gnet
// can no longer write, goes to a tailWriter: a goroutine writing to the
// socket through Go's netpoller, so the loop never blocks. Once the session's
// unary work is done its subscriptions end with "done"; once their producers
// have returned, the writer writes what is left and closes the socket. The
// output gnet still held when it read the EOF is taken out of its buffer
// first (by reflection: gnet does not export it), so nothing is lost or
// reordered; if that is not possible the connection ends as before. Nothing
// of this runs on the hot path: it starts from OnClose, and loop.flush checks
// one slice length.

// tailWriter writes the output of a half-closed NDJSON connection on its own
// goroutine.
type tailWriter struct {
	nc      net.Conn      // immutable: a duplicate of the socket
	wake    chan struct{} // cap 1: buf, fin or abort changed
	pending atomic.Int64  // bytes handed to write and not yet written

	mu      sync.Mutex
	buf     []byte // guarded by mu: output not yet taken by the goroutine
	fin     bool   // guarded by mu: close the socket once buf is written
	aborted bool   // guarded by mu: close the socket now
}

// halfClosed is OnClose for a connection that may live on: an NDJSON
// connection whose peer half-closed while open. It reports whether the
// connection lives on; if not, the caller closes it as usual. Runs on the
// loop, before gnet closes c's descriptor.
func (w *conn) halfClosed(c gnet.Conn, err error) bool {
	if w.proto != protoNDJSON || w.state != stateOpen || w.sess == nil || !errors.Is(err, io.EOF) {
		return false
	}
	held, ok := takeOutbound(c)
	if !ok {
		return false
	}
	nc, derr := dupConn(c.Fd())
	if derr != nil {
		return false
	}
	if w.paused {
		// Nothing is read any more; gnet drops the descriptor from its
		// epoll set itself.
		w.paused = false
		w.l.srv.paused.Add(-1)
	}
	w.more().eof = newTailWriter(nc, held)
	w.l.addTail(w)
	// Everything still buffered, then the final fragment as a message, as
	// ServeStream does at EOF.
	if buf, _ := c.Peek(-1); len(buf) > 0 {
		if rest := buf[w.lines(buf):]; len(rest) > 0 && w.state == stateOpen {
			if rest[len(rest)-1] == '\r' {
				rest = rest[:len(rest)-1]
			}
			w.sess.HandleMessage(rest)
		}
	}
	w.x.lr.Reset()
	w.l.markDirty(w)
	w.l.flush()
	return true
}

// flushTail is flush for a half-closed connection: the output goes to the
// tail writer, and the connection ends once its session has nothing left.
// Runs on the loop.
func (w *conn) flushTail() {
	if len(w.out) > 0 {
		w.x.eof.write(w.out)
	}
	w.releaseOut()
	if w.x.eof.failed() && w.state == stateOpen {
		w.closed() // the peer is gone
		return
	}
	if w.hangup {
		w.hangup = false
		w.x.eof.finish(w.cfg().CloseTimeout)
		w.closed()
		return
	}
	if w.state != stateOpen {
		return
	}
	w.checkOutbound()
	if w.state != stateOpen {
		return // closing: flushed again in this walk of the dirty list
	}
	// As on stdio: unary work finishes, then subscriptions end with "done",
	// then the connection ends once their producers have returned.
	if !w.subsEnded && !w.sess.Busy() {
		w.subsEnded = true
		w.sess.EndSubscriptions()
	}
	if w.subsEnded && w.sess.Stats().Tasks == 0 {
		w.setState(stateClosing)
		w.hangup = true
		w.l.markDirty(w)
		return
	}
	if w.Writable() {
		w.sess.Resume()
	}
}

// takeOutbound removes and returns the output gnet has buffered for c and not
// yet written. It reports false if there is some and gnet's layout is not
// what this code expects (see epollFD).
func takeOutbound(c gnet.Conn) ([]byte, bool) {
	if c.OutboundBuffered() == 0 {
		return nil, true
	}
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	f := v.Elem().FieldByName("outboundBuffer")
	if !f.IsValid() || f.Type() != reflect.TypeFor[elastic.Buffer]() || !f.CanAddr() {
		return nil, false
	}
	mb := (*elastic.Buffer)(unsafe.Pointer(f.UnsafeAddr()))
	bs, err := mb.Peek(-1)
	if err != nil {
		return nil, false
	}
	var held []byte
	for _, b := range bs {
		held = append(held, b...)
	}
	if _, err := mb.Discard(len(held)); err != nil || c.OutboundBuffered() != 0 {
		return nil, false
	}
	return held, true
}

// dupConn returns a net.Conn on a duplicate of the socket fd.
func dupConn(fd int) (net.Conn, error) {
	nfd, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "ndjson")
	defer f.Close()
	return net.FileConn(f)
}

// newTailWriter starts the goroutine writing held and then everything write
// is given to nc.
func newTailWriter(nc net.Conn, held []byte) *tailWriter {
	tw := &tailWriter{nc: nc, wake: make(chan struct{}, 1), buf: held}
	tw.pending.Store(int64(len(held)))
	go tw.run()
	tw.signal()
	return tw
}

func (tw *tailWriter) signal() {
	select {
	case tw.wake <- struct{}{}:
	default:
	}
}

// write queues a copy of b. Safe for concurrent use.
func (tw *tailWriter) write(b []byte) {
	tw.mu.Lock()
	tw.buf = append(tw.buf, b...)
	tw.mu.Unlock()
	tw.pending.Add(int64(len(b)))
	tw.signal()
}

// finish closes the socket once everything queued is written, or after
// timeout. Safe for concurrent use.
func (tw *tailWriter) finish(timeout time.Duration) {
	_ = tw.nc.SetWriteDeadline(time.Now().Add(timeout))
	tw.mu.Lock()
	tw.fin = true
	tw.mu.Unlock()
	tw.signal()
}

// abort closes the socket at once, dropping what is not written. Safe for
// concurrent use.
func (tw *tailWriter) abort() {
	tw.mu.Lock()
	tw.aborted = true
	tw.mu.Unlock()
	_ = tw.nc.Close()
	tw.signal()
}

// failed reports whether the writer has stopped before being told to finish
// (a write error: the peer is gone). Safe for concurrent use.
func (tw *tailWriter) failed() bool {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.aborted
}

func (tw *tailWriter) run() {
	var spare []byte
	for range tw.wake {
		for {
			tw.mu.Lock()
			b, fin, aborted := tw.buf, tw.fin, tw.aborted
			tw.buf = spare[:0]
			tw.mu.Unlock()
			if aborted {
				return
			}
			if len(b) == 0 {
				if fin {
					_ = tw.nc.Close()
					return
				}
				break
			}
			_, err := tw.nc.Write(b)
			tw.pending.Add(-int64(len(b)))
			if err != nil {
				tw.abort()
				return
			}
			spare = b
		}
	}
}

// addTail records a half-closed connection of the loop. Runs on the loop.
func (l *eventLoop) addTail(w *conn) {
	l.tails = append(l.tails, w)
	l.srv.tails.Add(w)
}

// removeTail forgets a half-closed connection. Runs on the loop.
func (l *eventLoop) removeTail(w *conn) {
	for i, t := range l.tails {
		if t == w {
			l.tails[i] = l.tails[len(l.tails)-1]
			l.tails[len(l.tails)-1] = nil
			l.tails = l.tails[:len(l.tails)-1]
			break
		}
	}
	l.srv.tails.Remove(w)
}

// tailSet is every half-closed connection of a server, for closing them once
// the engine has stopped (gnet closes only the connections it still owns).
type tailSet struct {
	mu    sync.Mutex
	conns map[*conn]struct{} // guarded by mu
}

func (s *tailSet) Add(w *conn) {
	s.mu.Lock()
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[w] = struct{}{}
	s.mu.Unlock()
}

func (s *tailSet) Remove(w *conn) {
	s.mu.Lock()
	delete(s.conns, w)
	s.mu.Unlock()
}

// closeAll closes every half-closed connection left. Called once the event
// loops have stopped, so nothing else touches the connections.
func (s *tailSet) closeAll() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for w := range conns {
		w.x.eof.abort()
		w.sess.Close()
	}
}
