package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os/exec"
	"syscall"
	"time"

	"github.com/gobwas/ws"
)

// transport is one live connection to an upstream.
type transport interface {
	io.Writer // the writer goroutine's
	// read reads messages and hands each to l.handle until the connection
	// fails. The reader goroutine's.
	read(l *link) error
	// Close drops the connection at once; read and Write then return.
	Close() error
	// shutdown ends the connection gracefully (exec: EOF on stdin, then
	// SIGTERM, then SIGKILL) and returns once it has ended.
	shutdown(timeout time.Duration)
}

// dialTimeout bounds a connect or an upgrade.
const dialTimeout = 5 * time.Second

// supervisor keeps one link connected: it dials (or starts the exec child),
// serves the connection until it fails, and redials with back-off and jitter
// (CONTRACT.md section 10), logging each change of state once.
type supervisor struct {
	u *Upstream
	l *link
	r Replica
}

func (s *supervisor) run() {
	defer s.u.wg.Done()
	attempt := 0
	logged := "" // the state last logged
	for {
		t, err := s.dial()
		if err == nil {
			s.l.open()
			s.u.log.Info("upstream connected", "upstream", s.u.name, "conn", s.l.desc)
			logged = "up"
			start := time.Now()
			stopping := s.serve(t)
			s.l.fail()
			if stopping {
				return
			}
			s.u.log.Warn("upstream connection lost", "upstream", s.u.name, "conn", s.l.desc)
			logged = "down"
			if time.Since(start) > s.u.cfg.BackoffMax {
				attempt = 0
			}
		} else if logged != "down" {
			s.u.log.Warn("upstream unavailable", "upstream", s.u.name, "conn", s.l.desc, "err", err)
			logged = "down"
		}
		wait := time.NewTimer(s.u.backoff(attempt))
		attempt++
		select {
		case <-s.u.quit:
			wait.Stop()
			return
		case <-wait.C:
		}
	}
}

func (s *supervisor) dial() (transport, error) {
	select {
	case <-s.u.quit:
		return nil, errors.New("closed")
	default:
	}
	switch s.r.Kind {
	case Exec:
		return startExec(s.u, s.r.Argv)
	case TCP:
		c, err := net.DialTimeout("tcp", s.r.Addr, dialTimeout)
		if err != nil {
			return nil, err
		}
		return &lineConn{Conn: c, r: c, max: s.u.cfg.MaxMessageBytes}, nil
	case WebSocket:
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		c, br, _, err := ws.Dialer{Timeout: dialTimeout}.Dial(ctx, s.r.URL)
		if err != nil {
			return nil, err
		}
		var r io.Reader = c
		if br != nil {
			r = br
		}
		return &wsConn{Conn: c, r: r, max: s.u.cfg.MaxMessageBytes}, nil
	}
	return nil, fmt.Errorf("transport %s has no connections", s.r.Kind)
}

// serve runs the connection until it fails or the upstream is closed, and
// reports whether it was closed.
func (s *supervisor) serve(t transport) (stopping bool) {
	rdone := make(chan error, 1)
	go func() { rdone <- t.read(s.l) }()
	wstop := make(chan struct{})
	wdone := make(chan struct{})
	go s.write(t, wstop, wdone)
	select {
	case <-rdone:
		t.Close()
	case <-wdone:
		t.Close()
		<-rdone
	case <-s.u.quit:
		stopping = true
		s.l.fail() // no new calls; those in flight are answered
		t.shutdown(s.u.cfg.KillTimeout)
		<-rdone
	}
	close(wstop)
	<-wdone
	return stopping
}

// write is the writer goroutine: it writes what Forward and the reader
// queue, and sweeps calls past their deadline.
func (s *supervisor) write(t transport, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(sweepEvery(s.u.cfg.Timeout))
	defer tick.Stop()
	var spare []byte
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			s.l.sweep(now.UnixNano())
			continue
		case <-s.l.wake:
		}
		out := s.l.take(spare)
		if len(out) > 0 {
			if _, err := t.Write(out); err != nil {
				return
			}
		}
		if cap(out) > 1<<20 {
			out = nil // a burst's buffer is not kept
		}
		spare = out
	}
}

// sweepEvery is the period of the timeout sweep: a tenth of the timeout,
// within [5ms, 1s].
func sweepEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 5*time.Millisecond), time.Second)
}

// lineConn is an NDJSON connection: TCP, or an exec child's stdio.
type lineConn struct {
	net.Conn           // TCP; nil for exec
	r        io.Reader // where lines come from
	max      int
}

func (c *lineConn) shutdown(time.Duration) { c.Close() }

func (c *lineConn) read(l *link) error { return readLines(c.r, c.max, l) }

// readLines reads newline-delimited messages (a trailing \r is stripped).
// A line over max bytes is dropped and reading resumes after it.
func readLines(r io.Reader, max int, l *link) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	skipping := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !skipping && len(long)+len(line) > max {
				skipping, long = true, nil
				l.drop(dropTooLong)
			}
			if !skipping {
				long = append(long, line...)
			}
			continue
		}
		if err != nil {
			if len(line) > 0 && !skipping {
				l.handleLine(append(long, line...), max)
			}
			return err
		}
		if skipping {
			skipping = false
			continue
		}
		if len(long) > 0 {
			line = append(long, line...)
			long = long[:0]
			if cap(long) > 1<<20 {
				long = nil
			}
		}
		l.handleLine(line, max)
	}
}

// handleLine applies one NDJSON line.
func (l *link) handleLine(line []byte, max int) {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	switch {
	case len(line) > max:
		l.drop(dropTooLong)
	case len(bytes.TrimSpace(line)) == 0:
	default:
		l.handle(line)
	}
}

// wsConn is a WebSocket connection to an upstream: edge is the client, so
// its frames are masked (appendClientFrame).
type wsConn struct {
	net.Conn
	r   io.Reader
	max int
}

func (c *wsConn) shutdown(time.Duration) {
	_, _ = c.Write(appendCloseFrame(nil, ws.StatusGoingAway))
	c.Close()
}

// read reads WebSocket messages: text messages go to l.handle; pings are
// answered; binary and oversized messages are dropped; a close ends the
// connection.
func (c *wsConn) read(l *link) error {
	var msg []byte
	var tooLong, inText bool
	for {
		h, err := ws.ReadHeader(c.r)
		if err != nil {
			return err
		}
		if h.OpCode.IsControl() {
			// RFC 6455 section 5.5: final, at most 125 bytes. Checked
			// before anything is allocated at the length the header claims.
			if h.Length > ws.MaxControlFramePayloadSize {
				return ws.ErrProtocolControlPayloadOverflow
			}
			if !h.Fin {
				return ws.ErrProtocolControlNotFinal
			}
			p := make([]byte, h.Length)
			if _, err := io.ReadFull(c.r, p); err != nil {
				return err
			}
			if h.Masked {
				ws.Cipher(p, h.Mask, 0)
			}
			switch h.OpCode {
			case ws.OpClose:
				return errors.New("upstream closed the WebSocket")
			case ws.OpPing:
				l.mu.Lock()
				if l.up_ {
					l.out = appendFrame(l.out, ws.OpPong, p)
				}
				l.mu.Unlock()
				l.signal()
			}
			continue
		}
		if h.OpCode != ws.OpContinuation {
			msg, tooLong, inText = msg[:0], false, h.OpCode == ws.OpText
		}
		if tooLong || h.Length > int64(c.max-len(msg)) || !inText { // no overflow: len(msg) <= max
			if !tooLong && inText {
				l.drop(dropTooLong)
			} else if !inText && h.OpCode == ws.OpBinary {
				l.drop(dropBadJSON)
			}
			tooLong = inText
			if _, err := io.CopyN(io.Discard, c.r, h.Length); err != nil {
				return err
			}
			continue
		}
		n := len(msg)
		msg = append(msg, make([]byte, h.Length)...)
		if _, err := io.ReadFull(c.r, msg[n:]); err != nil {
			return err
		}
		if h.Masked {
			ws.Cipher(msg[n:], h.Mask, 0)
		}
		if h.Fin {
			l.handle(msg)
			if cap(msg) > 1<<20 {
				msg = nil
			}
		}
	}
}

// appendClientFrame appends msg as one masked text frame (RFC 6455 section
// 5.3: a client masks every frame).
func appendClientFrame(dst, msg []byte) []byte { return appendFrame(dst, ws.OpText, msg) }

func appendFrame(dst []byte, op ws.OpCode, payload []byte) []byte {
	dst = append(dst, 0x80|byte(op))
	n := len(payload)
	switch {
	case n < 126:
		dst = append(dst, 0x80|byte(n))
	case n <= 0xffff:
		dst = append(dst, 0x80|126, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0x80|127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	k := rand.Uint32()
	mask := [4]byte{byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)}
	dst = append(dst, mask[:]...)
	start := len(dst)
	dst = append(dst, payload...)
	ws.Cipher(dst[start:], mask, 0)
	return dst
}

func appendCloseFrame(dst []byte, code ws.StatusCode) []byte {
	return appendFrame(dst, ws.OpClose, []byte{byte(code >> 8), byte(code)})
}

// execConn is an exec child speaking NDJSON on its stdin and stdout.
type execConn struct {
	lineConn
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	readDone chan struct{} // closed once stdout has been read to its end
	done     chan struct{} // closed once the child has been waited for
}

// read reads the child's stdout to its end: Wait, which closes the pipe,
// waits for that, so no answer written before an exit is lost.
func (c *execConn) read(l *link) error {
	defer close(c.readDone)
	return readLines(c.r, c.max, l)
}

// startExec starts argv as a child with its stderr lines logged under the
// upstream's name. No shell is involved.
func startExec(u *Upstream, argv []string) (*execConn, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &execConn{lineConn: lineConn{r: stdout, max: u.cfg.MaxMessageBytes}, cmd: cmd, stdin: stdin,
		readDone: make(chan struct{}), done: make(chan struct{})}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 4096), 64<<10)
		for sc.Scan() {
			u.log.Info("upstream stderr", slog.String("upstream", u.name), slog.Int("pid", cmd.Process.Pid), slog.String("line", sc.Text()))
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-logged // Wait closes the pipes: read them out first
		<-c.readDone
		err := cmd.Wait()
		u.log.Info("upstream process exited", "upstream", u.name, "pid", cmd.Process.Pid, "status", exitStatus(err))
		close(c.done)
	}()
	return c, nil
}

func exitStatus(err error) string {
	if err == nil {
		return "0"
	}
	return err.Error()
}

func (c *execConn) Write(p []byte) (int, error) { return c.stdin.Write(p) }

// Close kills the child at once.
func (c *execConn) Close() error {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	return nil
}

// shutdown gives the child EOF on stdin, then SIGTERM after timeout, then
// SIGKILL after timeout again (CONTRACT.md section 10).
func (c *execConn) shutdown(timeout time.Duration) {
	_ = c.stdin.Close()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return
	case <-t.C:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t.Reset(timeout)
	select {
	case <-c.done:
		return
	case <-t.C:
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}
