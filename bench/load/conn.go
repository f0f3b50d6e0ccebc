package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"
)

// Target is a WebSocket server speaking one dialect.
type Target struct {
	Addr    string // host:port, always on 127.0.0.1
	Path    string // the upgrade path; "" means "/"
	Dialect Dialect
	// TLS, when set, makes every connection wss://: a crypto/tls client
	// over the TCP connection, its handshake done before the upgrade (see
	// ClientTLS and DialTLS).
	TLS *tls.Config
}

// DefaultReadBuffer is the per-connection read buffer of the generator.
// Messages that do not fit are read into a per-connection scratch buffer.
const DefaultReadBuffer = 16 << 10

// Conn is one client WebSocket connection of the generator: a bufio.Reader
// whose buffered bytes are parsed in place, and writes of pre-masked frames.
// Next must be called from one goroutine; Write and WriteControl are safe for
// concurrent use with each other and with Next.
//
// A loop that multiplexes many connections on one goroutine (the open and
// the closed loop) attaches them: reads and writes then go straight to the
// socket without ever blocking (see attach).
type Conn struct {
	nc   net.Conn    // what the WebSocket frames go through: tcp, or a *tls.Conn over it
	tcp  net.Conn    // the socket
	sock *rawSock    // wss://: what the *tls.Conn reads and writes (over tcp); nil for ws://
	src  *connReader // what br reads from; nil for a Conn built around a fake net.Conn
	br   *bufio.Reader
	d    Dialect
	mask [4]byte // immutable after Dial

	wmu    sync.Mutex
	ctl    []byte     // guarded by wmu: scratch for control frames
	direct bool       // guarded by wmu: attached: writes never block
	sw     sockWriter // guarded by wmu: ws:// while direct: the socket and what it has not taken yet

	pend    int    // reader-owned: bytes of the last message still in br
	big     []byte // reader-owned: messages that do not fit br, and fragmented ones
	bigLeft int    // reader-owned: payload bytes of a frame larger than br still to read into big
	bigHdr  Header // reader-owned: that frame's header
	frag    bool   // reader-owned: inside a fragmented message
	rest    []byte // reader-owned: further newline-separated messages of the last frame
	at      int64  // reader-owned: when the bytes of the last message arrived (see At)
	read    bool   // reader-owned: Next read from the socket since the last message
}

// connReader is the source of a Conn's bufio.Reader: first the bytes the
// handshake read past the upgrade response, then the socket, through the Go
// netpoller, or, while the Conn is attached, with direct non-blocking reads.
// Every field is owned by the Conn's reader.
type connReader struct {
	nc      net.Conn
	sock    *rawSock // wss://: below nc (a *tls.Conn); nil for ws://
	pre     []byte   // bytes read past the upgrade response, not yet consumed
	fd      int      // the socket, while direct
	direct  bool     // attached: read fd directly, never wait
	drained bool     // direct: the last read came back short, so the socket had nothing more
	at      int64    // when the last read that returned data returned (generator clock)
}

// Read reads what the source has. While attached it reads the socket at most
// until one read comes back short and then reports errWouldBlock without a
// syscall until the loop marks the socket readable again (Conn.readable): a
// short read from a TCP socket means its receive queue was empty, so the
// loop's read-per-readiness costs one syscall, not one plus an empty read.
func (r *connReader) Read(p []byte) (int, error) {
	if len(r.pre) > 0 {
		n := copy(p, r.pre)
		r.pre = r.pre[n:]
		r.at = Now()
		return n, nil
	}
	if !r.direct {
		n, err := r.nc.Read(p)
		if n > 0 && err == nil && r.sock != nil && r.sock.direct {
			n = r.records(p, n)
		}
		if n > 0 {
			r.at = Now()
		}
		return n, err
	}
	n, err := readDirect(r.fd, p, &r.drained)
	if n > 0 {
		r.at = Now()
	}
	return n, err
}

// records fills p after its first n bytes with the further records
// crypto/tls has already read from an attached wss:// socket, or reads
// until the socket comes back short, as a ws:// read takes every byte the
// socket has (a *tls.Conn's Read returns one record): the loop then sees
// every reply of the read at once (Conn.Ready) and writes the requests they
// release with one write, not one per record. An error ends the filling;
// crypto/tls reports it again on the next Read (a permanent one is sticky,
// errWouldBlock comes back until the socket is readable).
func (r *connReader) records(p []byte, n int) int {
	for n < len(p) {
		m, err := r.nc.Read(p[n:])
		n += m
		if err != nil || m == 0 {
			break
		}
	}
	return n
}

// readDirect reads a non-blocking socket once, at most until one read comes
// back short: *drained is then set and later calls report errWouldBlock
// without a syscall until the caller clears it (the socket is readable
// again).
func readDirect(fd int, p []byte, drained *bool) (int, error) {
	if *drained || len(p) == 0 {
		return 0, errWouldBlock
	}
	for {
		n, e := rawRead(fd, p)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			*drained = true
			return 0, errWouldBlock
		case e != 0:
			return 0, e
		case n == 0:
			return 0, io.EOF
		}
		*drained = n < len(p)
		return n, nil
	}
}

// dialTimeout bounds a connection's TCP connect, TLS handshake and upgrade.
const dialTimeout = 10 * time.Second

// Dial connects and upgrades (wss:// when t.TLS is set), then performs the
// dialect's hello exchange (centrifuge's connect command). readBuf <= 0
// means DefaultReadBuffer.
func Dial(ctx context.Context, t Target, readBuf int) (*Conn, error) {
	if readBuf <= 0 {
		readBuf = DefaultReadBuffer
	}
	path := t.Path
	if path == "" {
		path = "/"
	}
	var (
		nc, tcp net.Conn
		sock    *rawSock
		br      *bufio.Reader
		err     error
	)
	if t.TLS == nil {
		d := ws.Dialer{Timeout: dialTimeout}
		nc, br, _, err = d.Dial(ctx, "ws://"+t.Addr+path)
		tcp = nc
	} else {
		nc, sock, br, err = dialTLS(ctx, t.Addr, path, t.TLS)
		if sock != nil {
			tcp = sock.Conn
		}
	}
	if err != nil {
		return nil, err
	}
	src := &connReader{nc: nc, sock: sock, fd: -1}
	if br != nil {
		pre, _ := br.Peek(br.Buffered())
		src.pre = append([]byte(nil), pre...)
		ws.PutReader(br)
	}
	c := &Conn{nc: nc, tcp: tcp, sock: sock, src: src, br: bufio.NewReaderSize(src, readBuf), d: t.Dialect, sw: sockWriter{fd: -1}}
	if _, err := rand.Read(c.mask[:]); err != nil {
		nc.Close()
		return nil, err
	}
	if c.mask == [4]byte{} {
		c.mask[0] = 1
	}
	if hello := t.Dialect.Hello(); hello != nil {
		if err := c.hello(ctx, hello); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *Conn) hello(ctx context.Context, msg []byte) error {
	dl := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	c.nc.SetDeadline(dl)
	defer c.nc.SetDeadline(time.Time{})
	if err := c.WriteText(msg); err != nil {
		return err
	}
	for {
		b, err := c.Next()
		if err != nil {
			return fmt.Errorf("hello: %w", err)
		}
		m := c.d.Classify(b)
		switch {
		case m.Kind == KindPing:
			c.WriteText(c.d.PingReply())
		case m.HasID && m.ID == HelloID && m.Kind == KindReply:
			return nil
		case m.HasID && m.ID == HelloID:
			return fmt.Errorf("%w: %.200s", ErrHello, b)
		}
	}
}

// Mask is the connection's masking key, for building templates.
func (c *Conn) Mask() [4]byte { return c.mask }

// Dialect is the connection's dialect.
func (c *Conn) Dialect() Dialect { return c.d }

// NetConn is the underlying socket (deadlines, close).
func (c *Conn) NetConn() net.Conn { return c.nc }

// Write writes pre-built wire bytes. While the Conn is attached it never
// blocks: what the socket does not take now is kept and written, in order,
// by flushBacklog; b is refused whole with errBacklog when that would keep
// more than backlogLimit bytes. Safe for concurrent use.
func (c *Conn) Write(b []byte) error {
	c.wmu.Lock()
	err := c.write(b)
	c.wmu.Unlock()
	return err
}

// backlogLimit bounds the bytes an attached Conn keeps for a socket that
// does not take them (a server that stopped reading).
const backlogLimit = 1 << 20

// write is Write with wmu held.
func (c *Conn) write(b []byte) error {
	if !c.direct {
		_, err := c.nc.Write(b)
		return err
	}
	w := c.out()
	if len(w.backlog) > 0 && len(w.backlog)+len(b) > backlogLimit {
		return errBacklog
	}
	if c.sock != nil {
		// crypto/tls encrypts; c.sock, below it, writes what the socket
		// takes and keeps the rest in w.
		_, err := c.nc.Write(b)
		return err
	}
	return w.write(b)
}

// out is the writer of an attached Conn's socket: its own (ws://), or the
// one below crypto/tls (wss://), which keeps encrypted bytes. wmu held.
func (c *Conn) out() *sockWriter {
	if c.sock != nil {
		return &c.sock.sw
	}
	return &c.sw
}

// sockWriter writes to a non-blocking socket without ever blocking and
// keeps, in order, the bytes the socket has not taken yet.
type sockWriter struct {
	fd      int
	backlog []byte
}

// write writes b after the backlog; what the socket does not take now is
// kept.
func (w *sockWriter) write(b []byte) error {
	if len(w.backlog) > 0 {
		w.backlog = append(w.backlog, b...)
		return w.flush()
	}
	n, err := writeNonblock(w.fd, b)
	if err != nil {
		return err
	}
	if n < len(b) {
		w.backlog = append(w.backlog, b[n:]...)
	}
	return nil
}

// flush writes as much of the backlog as the socket takes.
func (w *sockWriter) flush() error {
	for len(w.backlog) > 0 {
		n, err := writeNonblock(w.fd, w.backlog)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		w.backlog = w.backlog[:copy(w.backlog, w.backlog[n:])]
	}
	return nil
}

// writeNonblock writes b to a non-blocking socket once; a full socket is
// not an error (n is then 0).
func writeNonblock(fd int, b []byte) (int, error) {
	for {
		n, e := rawWrite(fd, b)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return 0, nil
		case e != 0:
			return 0, e
		}
		return n, nil
	}
}

// attach hands the socket to the calling loop until detach, and returns its
// descriptor for the loop's epoll set. Meanwhile Next reads the socket
// directly and, once it has nothing more, returns errWouldBlock instead of
// waiting, until the loop calls readable; writes (Write, and the pongs Next
// sends) never block (see Write and flushBacklog). No other goroutine may use
// c while it is attached, and c must not be closed: the descriptor would be
// reused. Must be called from the reading goroutine.
func (c *Conn) attach() (int, error) {
	if c.src == nil {
		return -1, errNotSocket
	}
	sc, ok := c.tcp.(syscall.Conn)
	if !ok {
		return -1, errNotSocket
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, err
	}
	// Go's sockets are non-blocking already; make sure, a blocked read
	// would stall every connection of the loop.
	if err := unix.SetNonblock(fd, true); err != nil {
		return -1, err
	}
	c.wmu.Lock()
	if c.sock != nil {
		// wss://: crypto/tls stays in between; the socket below it is
		// read and written directly.
		c.sock.fd, c.sock.direct, c.sock.drained = fd, true, false
		c.sock.sw.fd = fd
	} else {
		c.src.fd, c.src.direct, c.src.drained = fd, true, false
		c.sw.fd = fd
	}
	c.direct = true
	c.wmu.Unlock()
	return fd, nil
}

// readable tells an attached Conn that its socket has something to read:
// Next reads it again. Must be called from the reading goroutine.
func (c *Conn) readable() {
	c.src.drained = false
	if c.sock != nil {
		c.sock.drained = false
	}
}

// flushBacklog writes what the socket takes of the bytes an attached Conn
// kept; pending reports whether some are still waiting.
// Safe for concurrent use.
func (c *Conn) flushBacklog() (pending bool, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w := c.out()
	err = w.flush()
	return len(w.backlog) > 0, err
}

// backlogged reports whether an attached Conn keeps bytes the socket has
// not taken. Safe for concurrent use.
func (c *Conn) backlogged() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.out().backlog) > 0
}

// detach ends attach: reads and writes go through the Go netpoller again.
// Kept bytes are written first, waiting up to wait for the socket to take
// them. Must be called from the reading goroutine.
func (c *Conn) detach(wait time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.src == nil || !c.direct {
		return nil
	}
	w := c.out()
	c.direct, w.fd = false, -1
	c.src.direct, c.src.fd = false, -1
	if c.sock != nil {
		c.sock.direct, c.sock.fd = false, -1
	}
	if len(w.backlog) == 0 {
		return nil
	}
	// The bytes as the socket takes them (encrypted for wss://).
	c.tcp.SetWriteDeadline(time.Now().Add(wait))
	_, err := c.tcp.Write(w.backlog)
	c.tcp.SetWriteDeadline(time.Time{})
	w.backlog = w.backlog[:0]
	return err
}

// WriteText writes one masked text message built now (not on a hot path).
// Safe for concurrent use.
func (c *Conn) WriteText(payload []byte) error {
	return c.WriteControl(ws.OpText, payload)
}

// WriteControl writes one masked frame with opcode op. Safe for concurrent use.
func (c *Conn) WriteControl(op ws.OpCode, payload []byte) error {
	c.wmu.Lock()
	c.ctl = AppendControl(c.ctl[:0], op, payload, c.mask)
	err := c.write(c.ctl)
	c.wmu.Unlock()
	return err
}

// Close closes the socket without a closing handshake.
func (c *Conn) Close() error { return c.nc.Close() }

// Ready reports whether Next can return a message without reading from the
// socket. Must be called from the reading goroutine.
func (c *Conn) Ready() bool {
	if len(c.rest) > 0 {
		return true
	}
	n := c.br.Buffered() - c.pend
	if n < 2 {
		return false
	}
	b, _ := c.br.Peek(c.br.Buffered())
	b = b[c.pend:]
	if b[1] < 126 { // unmasked, short: a 2-byte header
		return 2+int(b[1]) <= n
	}
	h, hl, ok, err := ParseHeader(b)
	return err == nil && ok && hl+h.Len <= n
}

// At is when the last message returned by Next arrived on the generator
// clock: the time the read that completed it returned (taken right after the
// read). Messages parsed from one read share it, so the clock is read once
// per read, not per message. Must be called from the reading goroutine.
func (c *Conn) At() int64 { return c.at }

// peek is bufio.Reader.Peek that notes when it has to read the socket.
func (c *Conn) peek(n int) ([]byte, error) {
	if n > c.br.Buffered() {
		c.read = true
	}
	return c.br.Peek(n)
}

func (c *Conn) ret(msg []byte) ([]byte, error) {
	if c.read || c.at == 0 {
		if c.src != nil && c.src.at != 0 {
			c.at = c.src.at
		} else {
			c.at = Now()
		}
		c.read = false
	}
	return msg, nil
}

// Next returns the next data message from the server, answering pings and
// reassembling fragments on the way. The message is valid until the next call
// of Next. It does not allocate unless a message is larger than the read
// buffer or fragmented (then a per-connection scratch buffer grows once).
// While the Conn is attached it returns errWouldBlock when the socket has
// nothing more, and resumes where it stopped on the next call.
// Must be called from one goroutine.
func (c *Conn) Next() ([]byte, error) {
	if len(c.rest) > 0 {
		return c.popRest(), nil
	}
	for {
		if c.bigLeft > 0 {
			msg, ok, err := c.readBig()
			if err != nil {
				return nil, err
			}
			if ok {
				return c.ret(msg)
			}
			continue
		}
		if c.pend > 0 {
			c.br.Discard(c.pend)
			c.pend = 0
		}
		b, err := c.peek(max(c.br.Buffered(), 2))
		if len(b) < 2 {
			return nil, err
		}
		// The usual server message: one short unmasked final text frame,
		// whole in the buffer. What the general path below does with it.
		if b[0] == 0x80|byte(ws.OpText) && b[1] < 126 && 2+int(b[1]) <= len(b) {
			total := 2 + int(b[1])
			c.pend, c.frag = total, false
			return c.ret(c.deliver(b[2:total]))
		}
		h, hl, ok, err := ParseHeader(b)
		if err != nil {
			return nil, err
		}
		if !ok {
			if _, err := c.peek(len(b) + 1); err != nil {
				return nil, err
			}
			continue
		}
		total := hl + h.Len
		var payload []byte
		switch {
		case total <= len(b):
			payload, c.pend = b[hl:total], total
		case total <= c.br.Size():
			if b, err = c.peek(total); err != nil {
				return nil, err
			}
			payload, c.pend = b[hl:total], total
		default:
			if h.Op.IsControl() {
				return nil, ErrFrameTooLarge
			}
			c.br.Discard(hl)
			start := 0
			if h.Op == ws.OpContinuation && c.frag {
				start = len(c.big)
			}
			c.big = grow(c.big[:start], h.Len)
			c.bigHdr, c.bigLeft = h, h.Len
			continue // readBig
		}
		if h.Masked {
			ws.Cipher(payload, h.Mask, 0)
		}
		switch h.Op {
		case ws.OpPing:
			if err := c.WriteControl(ws.OpPong, payload); err != nil {
				return nil, err
			}
		case ws.OpPong:
		case ws.OpClose:
			return nil, ErrClosed
		case ws.OpText, ws.OpBinary:
			if !h.Fin {
				c.big = append(c.big[:0], payload...)
				c.frag = true
				continue
			}
			c.frag = false
			return c.ret(c.deliver(payload))
		case ws.OpContinuation:
			c.big = append(c.big, payload...)
			if h.Fin {
				c.frag = false
				return c.ret(c.deliver(c.big))
			}
		}
	}
}

// readBig reads the rest of a frame larger than the read buffer into the
// tail of big; it resumes after errWouldBlock. ok reports a whole message.
func (c *Conn) readBig() (msg []byte, ok bool, err error) {
	c.read = true
	for c.bigLeft > 0 {
		n, err := c.br.Read(c.big[len(c.big)-c.bigLeft:])
		c.bigLeft -= n
		if err != nil && c.bigLeft > 0 {
			return nil, false, err
		}
	}
	h := c.bigHdr
	if h.Masked {
		ws.Cipher(c.big[len(c.big)-h.Len:], h.Mask, 0)
	}
	if !h.Fin {
		c.frag = true
		return nil, false, nil
	}
	c.frag = false
	return c.deliver(c.big), true, nil
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, (len(b)+n)*5/4)
	copy(nb, b)
	return nb
}

// deliver splits a frame holding several newline-separated messages
// (centrifuge's JSON batching) and returns the first.
func (c *Conn) deliver(p []byte) []byte {
	if !c.d.MultiPerFrame() || bytes.IndexByte(p, '\n') < 0 {
		return p
	}
	c.rest = p
	return c.popRest()
}

func (c *Conn) popRest() []byte {
	for {
		i := bytes.IndexByte(c.rest, '\n')
		var m []byte
		if i < 0 {
			m, c.rest = c.rest, nil
		} else {
			m, c.rest = c.rest[:i], c.rest[i+1:]
		}
		if len(m) > 0 || len(c.rest) == 0 {
			return m
		}
	}
}

// CloseHandshake sends a normal close frame, waits up to wait for the
// server's close frame or EOF, and closes the socket. It reports whether the
// server completed the handshake in time; when it did not the socket is reset
// (SO_LINGER 0) so that no TIME_WAIT state piles up on the client.
// Must be called from the reading goroutine.
func (c *Conn) CloseHandshake(wait time.Duration) bool {
	c.WriteControl(ws.OpClose, ws.NewCloseFrameBody(ws.StatusNormalClosure, ""))
	c.nc.SetReadDeadline(time.Now().Add(wait))
	done := false
	for {
		_, err := c.Next()
		if err != nil {
			done = err == ErrClosed || err == io.EOF
			break
		}
	}
	if !done {
		if tc, ok := c.tcp.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	c.nc.Close()
	return done
}
