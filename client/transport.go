package client

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// wsTransport frames messages as WebSocket text frames (client side: masked).
type wsTransport struct {
	conn    net.Conn
	rd      *wsutil.Reader
	ctl     wsutil.FrameHandlerFunc
	max     int
	buf     []byte        // read loop only
	wmu     *sync.Mutex   // Client.wmu: serialises every write
	closing atomic.Bool   // set under wmu once the close frame is written
	timeout time.Duration // Options.CloseTimeout
}

// lockedWriter serialises the read loop's pongs and close replies with the
// client's own writes. It writes in the background: a Call stuck in a write
// (the server pushing back) must not stall the read loop behind the lock.
// Nothing follows the client's close frame.
type lockedWriter struct{ t *wsTransport }

func (l lockedWriter) Write(p []byte) (int, error) {
	b := append([]byte(nil), p...)
	go func() {
		l.t.wmu.Lock()
		defer l.t.wmu.Unlock()
		if !l.t.closing.Load() {
			_, _ = l.t.conn.Write(b)
		}
	}()
	return len(p), nil
}

func newWSTransport(conn net.Conn, br *bufio.Reader, max int, timeout time.Duration, wmu *sync.Mutex) *wsTransport {
	var src io.Reader = conn
	if br != nil && br.Buffered() > 0 {
		src = io.MultiReader(br, conn)
	}
	t := &wsTransport{conn: conn, max: max, wmu: wmu, timeout: timeout}
	t.ctl = wsutil.ControlFrameHandler(lockedWriter{t}, ws.StateClientSide)
	t.rd = &wsutil.Reader{
		Source:         src,
		State:          ws.StateClientSide,
		CheckUTF8:      true,
		OnIntermediate: t.ctl,
	}
	return t
}

func (t *wsTransport) read() ([]byte, error) {
	for {
		h, err := t.rd.NextFrame()
		if err != nil {
			return nil, err
		}
		if h.OpCode == ws.OpClose && t.closing.Load() {
			return nil, io.EOF // the server's answer to our close: done
		}
		if h.OpCode.IsControl() {
			if err := t.ctl(h, t.rd); err != nil {
				return nil, err
			}
			continue
		}
		if h.OpCode != ws.OpText && h.OpCode != ws.OpBinary {
			continue
		}
		t.buf = t.buf[:0]
		n, err := readAtMost(t.rd, &t.buf, t.max)
		if err != nil {
			return nil, err
		}
		if n > t.max {
			return nil, ErrMessageTooBig
		}
		return append([]byte(nil), t.buf...), nil
	}
}

// readAtMost reads r to EOF into *buf, stopping after max+1 bytes.
func readAtMost(r io.Reader, buf *[]byte, max int) (int, error) {
	b := *buf
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b) > max {
			*buf = b
			return len(b), nil
		}
		if errors.Is(err, io.EOF) {
			*buf = b
			return len(b), nil
		}
		if err != nil {
			return 0, err
		}
	}
}

func (t *wsTransport) write(msg []byte) error {
	if t.closing.Load() {
		return net.ErrClosed
	}
	return wsutil.WriteClientMessage(t.conn, ws.OpText, msg)
}

// shut sends the close frame (1000) and bounds the wait for the server's:
// the write deadline first, so that a write stuck on a server that does not
// read gives up the lock within the timeout.
func (t *wsTransport) shut() error {
	deadline := time.Now().Add(t.timeout)
	_ = t.conn.SetWriteDeadline(deadline)
	t.wmu.Lock()
	if t.closing.Swap(true) {
		t.wmu.Unlock()
		return nil
	}
	frame := ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusNormalClosure, ""))
	err := ws.WriteFrame(t.conn, ws.MaskFrameInPlace(frame))
	t.wmu.Unlock()
	if err != nil {
		return t.close()
	}
	return t.conn.SetReadDeadline(deadline)
}

func (t *wsTransport) close() error { return t.conn.Close() }

// lineTransport frames messages as NDJSON lines.
type lineTransport struct {
	conn net.Conn
	br   *bufio.Reader
	max  int
	buf  []byte // read loop only
}

func (t *lineTransport) read() ([]byte, error) {
	t.buf = t.buf[:0]
	for {
		frag, err := t.br.ReadSlice('\n')
		t.buf = append(t.buf, frag...)
		if len(t.buf) > t.max+2 {
			return nil, ErrMessageTooBig
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
	line := t.buf[:len(t.buf)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > t.max {
		return nil, ErrMessageTooBig
	}
	return append([]byte(nil), line...), nil
}

func (t *lineTransport) write(msg []byte) error {
	buf := make([]byte, 0, len(msg)+1)
	buf = append(append(buf, msg...), '\n')
	_, err := t.conn.Write(buf)
	return err
}

// close aborts the connection with a reset: to the gateway a FIN is a
// half-close, after which it still answers every request in flight (as stdio
// does at EOF), while a client that closes gives up on them, and the reset
// makes the gateway cancel their backend work at once (CONTRACT.md section 6).
func (t *lineTransport) shut() error { return t.close() }

func (t *lineTransport) close() error {
	if tc, ok := t.conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return t.conn.Close()
}
