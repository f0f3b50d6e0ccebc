package client

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// wsTransport frames messages as WebSocket text frames (client side: masked).
type wsTransport struct {
	conn net.Conn
	rd   *wsutil.Reader
	ctl  wsutil.FrameHandlerFunc
	max  int
	buf  []byte // read loop only
}

// lockedWriter serialises the read loop's pongs and close replies with the
// client's own writes. It writes in the background: a Call stuck in a write
// (the server pushing back) must not stall the read loop behind the lock.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	b := append([]byte(nil), p...)
	go func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		_, _ = l.w.Write(b)
	}()
	return len(p), nil
}

func newWSTransport(conn net.Conn, br *bufio.Reader, max int, wmu *sync.Mutex) *wsTransport {
	var src io.Reader = conn
	if br != nil && br.Buffered() > 0 {
		src = io.MultiReader(br, conn)
	}
	ctl := wsutil.ControlFrameHandler(lockedWriter{wmu, conn}, ws.StateClientSide)
	return &wsTransport{
		conn: conn,
		ctl:  ctl,
		max:  max,
		rd: &wsutil.Reader{
			Source:         src,
			State:          ws.StateClientSide,
			CheckUTF8:      true,
			OnIntermediate: ctl,
		},
	}
}

func (t *wsTransport) read() ([]byte, error) {
	for {
		h, err := t.rd.NextFrame()
		if err != nil {
			return nil, err
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
	return wsutil.WriteClientMessage(t.conn, ws.OpText, msg)
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
func (t *lineTransport) close() error {
	if tc, ok := t.conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return t.conn.Close()
}
