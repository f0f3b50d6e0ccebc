package loop

import (
	"bufio"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/rpc"
)

// StreamConfig configures ServeStream. Zero values mean the defaults.
type StreamConfig struct {
	// MaxLineBytes is the longest accepted line [1048576].
	MaxLineBytes int
	// ShutdownTimeout bounds the wait for in-flight work once the input ends or
	// ctx is cancelled [5s].
	ShutdownTimeout time.Duration
}

// ServeStream serves one NDJSON session over r and w (edge --stdio, CONTRACT.md
// section 1.2) on the calling goroutine, which owns the session as a gnet loop
// would. w carries protocol messages only. It returns nil once r reaches EOF
// (or ctx is cancelled) and the in-flight work has finished: subscriptions end
// with "done", unary requests get their responses. Input that arrives after
// ctx is cancelled is still read and answered SERVER_SHUTTING_DOWN (srv is
// drained) until the in-flight work is done. Not safe for concurrent
// use of r or w by the caller while it runs.
func ServeStream(ctx context.Context, r io.Reader, w io.Writer, srv *rpc.Server, cfg StreamConfig) error {
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = DefaultMaxMessageBytes
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	s := &streamLoop{
		bw:     bufio.NewWriterSize(w, 64<<10),
		notify: make(chan struct{}, 1),
		lr:     codec.LineReader{Max: cfg.MaxLineBytes},
	}
	s.sess = srv.NewSession(rpc.NDJSON, s, s)
	defer s.sess.Close()

	// The reader goroutine and the loop pass two buffers back and forth: the
	// loop copies what it has not split into lines before handing one back.
	in := make(chan []byte)
	free := make(chan []byte, 2)
	free <- make([]byte, 64<<10)
	free <- make([]byte, 64<<10)
	readErr := make(chan error, 1)
	stopRead := make(chan struct{})
	defer close(stopRead)
	go func() {
		for {
			var buf []byte
			select {
			case buf = <-free:
			case <-stopRead:
				return
			}
			n, err := r.Read(buf[:cap(buf)])
			if n > 0 {
				select {
				case in <- buf[:n]:
				case <-stopRead:
					return
				}
			} else {
				free <- buf
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()

	// Once the input ends or ctx is cancelled, unary work finishes and
	// establishing requests get their answers; then the remaining
	// subscriptions end with "done" and the loop returns when their producers
	// have returned. After a cancellation (SIGTERM) the input is still read
	// until then: new requests are answered SERVER_SHUTTING_DOWN, as the
	// drained rpc.Server makes the session do (CONTRACT.md section 9).
	var deadline <-chan time.Time
	ending, subsEnded := false, false
	end := func() {
		if ending {
			return
		}
		ending = true
		deadline = time.After(cfg.ShutdownTimeout)
	}
	for {
		select {
		case chunk := <-in:
			s.input(chunk)
			free <- chunk
		case err := <-readErr:
			if !errors.Is(err, io.EOF) {
				return err
			}
			if len(s.pending) > 0 {
				// EOF in the middle of a line: the fragment is a message too.
				line := s.pending
				if n := len(line); line[n-1] == '\r' {
					line = line[:n-1]
				}
				s.sess.HandleMessage(line)
				s.pending = nil
			}
			in = nil
			end()
		case <-s.notify:
			s.drain()
		case <-ctx.Done():
			srv.Drain()
			end()
			ctx = context.Background()
		case <-deadline:
			s.sess.GoAway()
			return s.flush()
		}
		if err := s.flush(); err != nil {
			return err
		}
		if !ending {
			continue
		}
		if !subsEnded && !s.sess.Busy() {
			subsEnded = true
			s.sess.EndSubscriptions()
			if err := s.flush(); err != nil {
				return err
			}
		}
		if subsEnded && s.sess.Stats().Tasks == 0 {
			return nil
		}
	}
}

// streamLoop is the state of ServeStream. Only its goroutine touches it,
// except the completion queue.
type streamLoop struct {
	sess    *rpc.Session     // loop-owned
	bw      *bufio.Writer    // loop-owned
	lr      codec.LineReader // loop-owned
	pending []byte           // loop-owned: input not yet split into lines
	werr    error            // loop-owned: first write error

	mu     sync.Mutex
	queue  []rpc.Completion // guarded by mu
	notify chan struct{}    // signalled (cap 1) when queue becomes non-empty
}

// Post implements rpc.Poster. Safe for concurrent use.
func (s *streamLoop) Post(c rpc.Completion) {
	s.mu.Lock()
	s.queue = append(s.queue, c)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *streamLoop) drain() {
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, c := range q {
		c.Apply()
	}
}

func (s *streamLoop) input(chunk []byte) {
	b := append(s.pending, chunk...)
	off := 0
	for {
		line, kind, n := s.lr.Next(b[off:])
		off += n
		switch kind {
		case codec.LineOK:
			s.sess.HandleMessage(line)
		case codec.LineTooLong:
			s.sess.HandleParseError()
		case codec.LineNone:
			if n == 0 {
				s.pending = append(s.pending[:0], b[off:]...)
				return
			}
		}
	}
}

// Send implements rpc.Sink.
func (s *streamLoop) Send(msg []byte) {
	if s.werr != nil {
		return
	}
	if _, err := s.bw.Write(msg); err != nil {
		s.werr = err
		return
	}
	s.werr = s.bw.WriteByte('\n')
}

// OutboundLimit implements rpc.Sink: a stream writes every event at once,
// blocking the loop when the peer is slow, so only the subscriptions'
// buffers count against it.
func (s *streamLoop) OutboundLimit() int { return DefaultOutboundHard }

// OutboundBytes implements rpc.Sink.
func (s *streamLoop) OutboundBytes() int { return s.bw.Buffered() }

// Writable implements rpc.Sink: writes block the loop instead, which is the
// backpressure of a stream.
func (s *streamLoop) Writable() bool { return true }

func (s *streamLoop) flush() error {
	if s.werr == nil {
		s.werr = s.bw.Flush()
	}
	return s.werr
}
