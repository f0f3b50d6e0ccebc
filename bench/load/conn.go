package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gobwas/ws"
)

// Target is a WebSocket server speaking one dialect.
type Target struct {
	Addr    string // host:port, always on 127.0.0.1
	Path    string // the upgrade path; "" means "/"
	Dialect Dialect
}

// DefaultReadBuffer is the per-connection read buffer of the generator.
// Messages that do not fit are read into a per-connection scratch buffer.
const DefaultReadBuffer = 16 << 10

// Conn is one client WebSocket connection of the generator: a bufio.Reader
// whose buffered bytes are parsed in place, and writes of pre-masked frames.
// Next must be called from one goroutine; Write and WriteControl are safe for
// concurrent use with each other and with Next.
type Conn struct {
	nc   net.Conn
	br   *bufio.Reader
	d    Dialect
	mask [4]byte // immutable after Dial

	wmu sync.Mutex
	ctl []byte // guarded by wmu: scratch for control frames

	pend int    // reader-owned: bytes of the last message still in br
	big  []byte // reader-owned: messages that do not fit br, and fragmented ones
	frag bool   // reader-owned: inside a fragmented message
	rest []byte // reader-owned: further newline-separated messages of the last frame
	at   int64  // reader-owned: when the bytes of the last message arrived (see At)
	read bool   // reader-owned: Next read from the socket since the last message
}

// Dial connects and upgrades, then performs the dialect's hello exchange
// (centrifuge's connect command). readBuf <= 0 means DefaultReadBuffer.
func Dial(ctx context.Context, t Target, readBuf int) (*Conn, error) {
	if readBuf <= 0 {
		readBuf = DefaultReadBuffer
	}
	path := t.Path
	if path == "" {
		path = "/"
	}
	d := ws.Dialer{Timeout: 10 * time.Second}
	nc, br, _, err := d.Dial(ctx, "ws://"+t.Addr+path)
	if err != nil {
		return nil, err
	}
	var src io.Reader = nc
	if br != nil {
		pre, _ := br.Peek(br.Buffered())
		src = io.MultiReader(bytes.NewReader(append([]byte(nil), pre...)), nc)
		ws.PutReader(br)
	}
	c := &Conn{nc: nc, br: bufio.NewReaderSize(src, readBuf), d: t.Dialect}
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

// Write writes pre-built wire bytes. Safe for concurrent use.
func (c *Conn) Write(b []byte) error {
	c.wmu.Lock()
	_, err := c.nc.Write(b)
	c.wmu.Unlock()
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
	_, err := c.nc.Write(c.ctl)
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
	h, hl, ok, err := ParseHeader(b[c.pend:])
	return err == nil && ok && hl+h.Len <= n
}

// At is when the last message returned by Next arrived on the generator
// clock: the time the read that completed it returned. Messages parsed from
// one read share it, so the clock is read once per read, not per message.
// Must be called from the reading goroutine.
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
		c.at = Now()
		c.read = false
	}
	return msg, nil
}

// Next returns the next data message from the server, answering pings and
// reassembling fragments on the way. The message is valid until the next call
// of Next. It does not allocate unless a message is larger than the read
// buffer or fragmented (then a per-connection scratch buffer grows once).
// Must be called from one goroutine.
func (c *Conn) Next() ([]byte, error) {
	if len(c.rest) > 0 {
		return c.popRest(), nil
	}
	for {
		if c.pend > 0 {
			c.br.Discard(c.pend)
			c.pend = 0
		}
		b, err := c.peek(max(c.br.Buffered(), 2))
		if len(b) < 2 {
			return nil, err
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
			c.br.Discard(hl)
			start := 0
			if h.Op == ws.OpContinuation && c.frag {
				start = len(c.big)
			}
			c.big = grow(c.big[:start], h.Len)
			c.read = true
			if _, err := io.ReadFull(c.br, c.big[start:]); err != nil {
				return nil, err
			}
			if h.Masked {
				ws.Cipher(c.big[start:], h.Mask, 0)
			}
			switch {
			case h.Op.IsControl():
				return nil, ErrFrameTooLarge
			case !h.Fin:
				c.frag = true
				continue
			}
			c.frag = false
			return c.ret(c.deliver(c.big))
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
		if tc, ok := c.nc.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	c.nc.Close()
	return done
}
