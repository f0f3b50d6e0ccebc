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
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"

	"github.com/openengine/edge/codec"
)

// dialTimeout bounds a connect or an upgrade.
const dialTimeout = 5 * time.Second

// supervisor keeps one byte-stream link connected: it dials (or starts the
// exec child), attaches the connection to the link's event loop, posts the
// timeout sweep to that loop while it is up, and redials with back-off and
// jitter once the loop reports it closed (CONTRACT.md section 10), logging
// each change of state once. It is not on any call's path: calls reach the
// connection on its loop.
type supervisor struct {
	u *Upstream
	l *link
	r Replica
	// logged is the state last logged: "up", "down", or why a connection
	// did not answer the probe. Supervisor-owned.
	logged string
}

func (s *supervisor) run() {
	defer s.u.wg.Done()
	l := s.l
	attempt := 0
	for {
		c, ch, err := s.dial()
		if err == nil {
			select {
			case <-l.answered: // a previous connection's, not seen
			default:
			}
			opens := l.opens.Load()
			err = l.loops.Attach(l.home, c, l)
			if err == nil && l.opens.Load() == opens {
				// The loop did not take it, yet said nothing (gnet's
				// Enroll reports success when registering the
				// descriptor with its poller failed): no Open, and no
				// Closed will follow. A failed attempt.
				err = errNotAttached
			}
			if err != nil && ch != nil {
				ch.shutdown(0)
			}
		}
		if err == nil {
			upAt, stopping := s.serve(ch)
			if stopping {
				return
			}
			if !upAt.IsZero() {
				l.setWhy(whyLost)
				s.u.log.Warn("upstream connection lost", "upstream", s.u.name, "conn", l.desc)
				s.logged = "down"
				if time.Since(upAt) > s.u.cfg.BackoffMax {
					attempt = 0
				}
			} else if why := l.whyNow(); s.logged != why {
				// Connected, but the probe was not answered (probe.go).
				s.u.log.Warn("upstream does not answer as JSON-RPC", "upstream", s.u.name, "conn", l.desc, "why", why)
				s.logged = why
			}
		} else {
			l.setWhy(dialWhy(err))
			if s.logged != "down" {
				s.u.log.Warn("upstream unavailable", "upstream", s.u.name, "conn", l.desc, "err", err)
				s.logged = "down"
			}
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

// connected logs that the connection is up and returns the time.
func (s *supervisor) connected() time.Time {
	s.u.log.Info("upstream connected", "upstream", s.u.name, "conn", s.l.desc)
	s.logged = "up"
	return time.Now()
}

// errNotAttached fails a connection that its loop did not take although
// Attach reported no error.
var errNotAttached = errors.New("the event loop did not take the connection")

// dial connects (exec: starts the child, ch) and returns the connection.
func (s *supervisor) dial() (net.Conn, *child, error) {
	select {
	case <-s.u.quit:
		return nil, nil, errors.New("closed")
	default:
	}
	switch s.r.Kind {
	case Exec:
		return startExec(s.u, s.r.Argv)
	case TCP:
		c, err := net.DialTimeout("tcp", s.r.Addr, dialTimeout)
		return c, nil, err
	case WebSocket:
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		c, br, _, err := ws.Dialer{Timeout: dialTimeout}.Dial(ctx, s.r.URL)
		if err != nil {
			return nil, nil, err
		}
		if br != nil {
			// What the upstream sent with its 101 (a greeting, say) is not
			// an answer to anything: dropped, as an unknown notification
			// arriving later would be. Only a partial frame, which would
			// leave the loop reading mid-frame, fails the dial.
			early, _ := br.Peek(br.Buffered())
			whole := wholeFrames(early)
			ws.PutReader(br)
			if !whole {
				c.Close()
				return nil, nil, errors.New("the upstream sent part of a frame with its handshake")
			}
			if len(early) > 0 {
				s.u.log.Warn("upstream sent messages before any request; dropped", "upstream", s.u.name, "conn", s.l.desc, "bytes", len(early))
			}
		}
		return c, nil, nil
	}
	return nil, nil, fmt.Errorf("transport %s has no connections", s.r.Kind)
}

// serve sweeps the connection's calls for timeouts on its loop until the
// loop reports it closed, or until the upstream is closed, and reports when
// the connection went up (zero if it never did: the probe was not answered,
// probe.go) and whether the upstream was closed. A probe not answered
// within the upstream timeout closes the connection.
func (s *supervisor) serve(ch *child) (upAt time.Time, stopping bool) {
	l := s.l
	tick := time.NewTicker(sweepEvery(s.u.cfg.Timeout))
	defer tick.Stop()
	var exited <-chan struct{}
	if ch != nil {
		exited = ch.done
	}
	var probeTimeout <-chan time.Time
	if l.probes {
		t := time.NewTimer(s.u.cfg.Timeout)
		defer t.Stop()
		probeTimeout = t.C
	} else {
		upAt = s.connected()
	}
	for {
		select {
		case <-l.answered:
			upAt, probeTimeout = s.connected(), nil
		case <-probeTimeout:
			probeTimeout = nil
			why := fmt.Sprintf("no answer to edge's probe within %v (--upstream-timeout)", s.u.cfg.Timeout)
			l.loops.Run(l.home, func() {
				if l.rd.probing && l.wc != nil {
					l.setWhy(why)
					l.wc.Close()
				}
			})
		case <-l.gone:
			if ch != nil {
				// Its stdout ended: it exits, or is made to.
				ch.shutdown(s.u.cfg.KillTimeout)
			}
			if upAt.IsZero() {
				select {
				case <-l.answered: // answered, then lost at once
					upAt = s.connected()
				default:
				}
			}
			return upAt, false
		case <-exited:
			// The child exited while its socket is open: a descendant
			// holds it. The group is killed and the connection closed,
			// which the loop reports (gone).
			exited = nil
			ch.signal(syscall.SIGKILL)
			l.loops.Run(l.home, func() {
				if l.wc != nil {
					l.wc.Close()
				}
			})
		case now := <-tick.C:
			l.loops.Run(l.home, func() { l.sweep(now.UnixNano()) })
		case <-s.u.quit:
			s.stop(ch)
			return upAt, true
		}
	}
}

// stop ends the connection for Close: calls in flight are answered
// UPSTREAM_UNAVAILABLE, a WebSocket gets a close frame, an exec child EOF
// on its stdin, then SIGTERM, then SIGKILL (CONTRACT.md section 10).
func (s *supervisor) stop(ch *child) {
	l := s.l
	ran := l.loops.Run(l.home, func() {
		l.fail() // no new calls; those in flight are answered
		switch {
		case l.wc == nil:
		case ch != nil:
			l.wc.CloseWrite()
		case l.frame != nil:
			l.wc.Write(appendCloseFrame(nil, ws.StatusGoingAway))
			l.wc.Close()
		default:
			l.wc.Close()
		}
	})
	if ch != nil {
		ch.shutdown(s.u.cfg.KillTimeout)
		if ran {
			l.loops.Run(l.home, func() {
				if l.wc != nil {
					l.wc.Close()
				}
			})
		}
	}
	if ran {
		<-l.gone // the loop closes it, or has stopped and closed it
	}
}

// sweepEvery is the period of the timeout sweep: a tenth of the timeout,
// within [5ms, 1s].
func sweepEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 5*time.Millisecond), time.Second)
}

// The link as a Wire: its loop calls these.

var _ Wire = (*link)(nil)

// reading is the state of a byte-stream link's reader between turns.
type reading struct {
	lines codec.LineReader // NDJSON
	// WebSocket: the message being assembled from fragments, whether it
	// is text, its size so far, and the bytes of a dropped binary frame's
	// payload still to skip.
	msg    []byte
	inText bool
	size   int // bytes of the message so far (binary ones are not kept)
	skip   int64
	// probing: the probe is unanswered (probe.go).
	probing bool
}

// Open implements Wire: the link takes calls.
func (l *link) Open(c WireConn) {
	l.wc, l.dirty = c, false
	l.rd = reading{}
	if l.probes {
		l.startProbe() // open once it is answered
	} else {
		l.open()
	}
	l.opens.Add(1)
}

// Closed implements Wire: everything on the link is settled
// (fail) and the supervisor reconnects.
func (l *link) Closed(error) {
	if l.rd.probing && l.whyNow() == whyProbing {
		l.setWhy(whyClosed)
	}
	l.fail()
	l.wc, l.dirty = nil, false
	l.rd = reading{}
	select {
	case l.gone <- struct{}{}:
	default:
	}
}

// Output implements Wire. The loop writes the buffer before the
// link appends to it again.
func (l *link) Output() []byte {
	l.lock()
	l.dirty = false
	out := l.out
	if l.wc != nil {
		l.notePeak(len(out) + l.wc.Buffered())
	}
	l.out = out[:0]
	if cap(out) > 1<<20 {
		l.out = nil // a burst's buffer is not kept
	}
	if l.nats == nil {
		l.publish()
	}
	l.unlock()
	return out
}

// Traffic implements Wire. The answers it applies are timed with the
// loop's clock of the read, now, and counted in the link's tally, which is
// added to the upstream's counters once at the end.
func (l *link) Traffic(in []byte, now int64) (n int, err error) {
	l.now = now
	if l.frame != nil {
		n, err = l.readFrames(in, l.up.cfg.MaxMessageBytes)
	} else {
		n, err = l.readLines(in, l.up.cfg.MaxMessageBytes)
	}
	l.now = 0
	l.tally.flush(&l.up.counters)
	l.publish()
	return n, err
}

// clock is the time for the call durations: the reading of the current
// Traffic on the loop, else the time now.
func (l *link) clock() int64 {
	if l.now != 0 {
		return l.now
	}
	return nowNanos()
}

// readLines applies the complete NDJSON lines of in (codec.LineReader: a
// trailing \r is stripped) and returns how many bytes it consumed. A line
// over max bytes is dropped, also before its end has arrived, and reading
// resumes after it; blank lines are skipped. Before the probe is answered
// a line that is not JSON-RPC ends the connection (probed).
func (l *link) readLines(in []byte, max int) (int, error) {
	l.rd.lines.Max = max
	n := 0
	for {
		line, kind, k := l.rd.lines.Next(in[n:])
		n += k
		switch kind {
		case codec.LineOK:
			switch {
			case blank(line):
			case l.rd.probing:
				if err := l.probed(line); err != nil {
					return n, err
				}
			default:
				l.handle(line)
			}
		case codec.LineTooLong:
			l.drop(dropTooLong)
		default: // LineNone: wait for more, or a skipped tail was consumed
			if k == 0 {
				return n, nil
			}
		}
	}
}

// blank reports whether line is only whitespace: at a glance for the lines
// that start with a message.
func blank(line []byte) bool {
	if len(line) > 0 && line[0] > ' ' {
		return false
	}
	return len(bytes.TrimSpace(line)) == 0
}

// errUpstreamClosedWS ends a WebSocket link whose upstream sent a close.
var errUpstreamClosedWS = errors.New("upstream closed the WebSocket")

// errUpstreamTooBig ends a WebSocket link whose upstream sent a message
// over Config.MaxMessageBytes.
var errUpstreamTooBig = errors.New("upstream sent a WebSocket message over the size limit")

// readFrames applies the complete WebSocket frames of in and returns how
// many bytes it consumed: text messages go to handle; pings are answered;
// binary messages are dropped (their payload skipped as it arrives, never
// buffered); a message over max bytes is answered a close 1009 and ends
// the connection (errUpstreamTooBig), as do a close and a malformed
// control frame. A data frame is consumed once all of it has arrived: at
// most max bytes of payload wait in the loop's input buffer.
func (l *link) readFrames(in []byte, max int) (int, error) {
	rd := &l.rd
	n := 0
	for {
		if rd.skip > 0 {
			k := int(min(int64(len(in)-n), rd.skip))
			n += k
			rd.skip -= int64(k)
			if rd.skip > 0 {
				return n, nil
			}
		}
		h, hs, err := codec.ParseHeader(in[n:])
		if err == codec.ErrNeedMore {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if h.OpCode.IsControl() {
			// RFC 6455 section 5.5: final, at most 125 bytes. Checked
			// before anything waits for the length the header claims.
			if h.Length > ws.MaxControlFramePayloadSize {
				return n, ws.ErrProtocolControlPayloadOverflow
			}
			if !h.Fin {
				return n, ws.ErrProtocolControlNotFinal
			}
			p, ok := payload(in[n:], hs, h)
			if !ok {
				return n, nil
			}
			n += hs + len(p)
			switch h.OpCode {
			case ws.OpClose:
				return n, errUpstreamClosedWS
			case ws.OpPing:
				l.lock()
				if l.up_ {
					l.out = appendFrame(l.out, ws.OpPong, p)
					l.owedLocked() // an upstream that pings and never reads is closed
				}
				l.unlock()
				l.signal()
			}
			continue
		}
		if h.OpCode != ws.OpContinuation {
			rd.msg, rd.size, rd.inText = rd.msg[:0], 0, h.OpCode == ws.OpText
		}
		if h.Length > int64(max-rd.size) { // no overflow: size <= max
			// Over the limit: closed 1009 (RFC 6455 section 7.4.1), as
			// a client's is. Skipping the rest would wedge the link for
			// as long as the header claims, up to 2^63 bytes.
			l.drop(dropTooLong)
			l.lock()
			if l.up_ {
				l.out = appendCloseFrame(l.out, ws.StatusMessageTooBig)
			}
			l.unlock()
			l.signal()
			return n, errUpstreamTooBig
		}
		rd.size += int(h.Length)
		if !rd.inText {
			if h.OpCode == ws.OpBinary {
				l.drop(dropBadJSON)
			}
			n += hs
			rd.skip = h.Length
			continue
		}
		p, ok := payload(in[n:], hs, h)
		if !ok {
			return n, nil
		}
		n += hs + len(p)
		switch {
		case h.Fin && len(rd.msg) == 0:
			l.handle(p) // the whole message in one frame: no copy
		case h.Fin:
			rd.msg = append(rd.msg, p...)
			l.handle(rd.msg)
			rd.msg = rd.msg[:0]
			if cap(rd.msg) > 1<<20 {
				rd.msg = nil
			}
		default:
			rd.msg = append(rd.msg, p...)
		}
	}
}

// payload returns the unmasked payload of the frame at the start of in,
// whose header h is hs bytes, or false when not all of it has arrived.
func payload(in []byte, hs int, h ws.Header) ([]byte, bool) {
	if int64(len(in)-hs) < h.Length {
		return nil, false
	}
	p := in[hs : hs+int(h.Length)]
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	return p, true
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

// child is an exec upstream's process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the child has been waited for
}

// startExec starts argv as a child speaking NDJSON on its stdin and stdout,
// which are both one end of a Unix stream socket pair; the other end is the
// returned connection, which an event loop serves like a TCP one. Its
// stderr lines are logged under the upstream's name. No shell is involved.
func startExec(u *Upstream, argv []string) (net.Conn, *child, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "upstream"), os.NewFile(uintptr(fds[1]), "upstream stdio")
	defer mine.Close()
	defer theirs.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout = theirs, theirs
	// Its own process group, so that its descendants are signalled with
	// it (child.signal): one that keeps the socket or stderr open would
	// otherwise outlive it and keep edge from noticing its exit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// stderr is a pipe of edge's own, not cmd.StderrPipe: Wait would wait
	// for it to be read out, which a descendant holding it open prevents.
	stderr, errw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = errw
	c, err := net.FileConn(mine)
	if err != nil {
		stderr.Close()
		errw.Close()
		return nil, nil, err
	}
	err = cmd.Start()
	errw.Close() // the child's copy is the only writer left
	if err != nil {
		stderr.Close()
		c.Close()
		return nil, nil, err
	}
	ch := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer stderr.Close()
		u.relayStderr(stderr, cmd.Process.Pid)
	}()
	go func() {
		err := cmd.Wait()
		u.log.Info("upstream process exited", "upstream", u.name, "pid", cmd.Process.Pid, "status", exitStatus(err))
		close(ch.done)
	}()
	return c, ch, nil
}

// stderrLineMax is the longest stderr line of an exec child that is
// logged whole; a longer one is logged truncated to it.
const stderrLineMax = 64 << 10

// relayStderr logs the stderr lines of an exec child until EOF, under the
// upstream's name: at most Config.StderrRate lines per second (a token
// bucket with a burst of as many), the excess counted and reported with the
// next line logged (skippedLines); a line over stderrLineMax is logged
// truncated (truncated: its length) and the relay goes on. It reads as fast
// as the child writes, so a chatty child never blocks on its stderr.
func (u *Upstream) relayStderr(r io.Reader, pid int) {
	rate := float64(u.cfg.StderrRate)
	tokens, last := rate, time.Now()
	skipped := 0
	br := bufio.NewReaderSize(r, 4096)
	var line []byte
	n := 0 // the line's length, beyond what line keeps
	for {
		frag, err := br.ReadSlice('\n')
		if err == nil {
			frag = frag[:len(frag)-1] // the newline
		}
		n += len(frag)
		if room := stderrLineMax - len(line); room > 0 {
			line = append(line, frag[:min(len(frag), room)]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil || n > 0 { // a line, or the last one without a newline
			now := time.Now()
			tokens = min(rate, tokens+now.Sub(last).Seconds()*rate)
			last = now
			if tokens >= 1 {
				tokens--
				attrs := []any{slog.String("upstream", u.name), slog.Int("pid", pid), slog.String("line", string(bytes.TrimSuffix(line, []byte{'\r'})))}
				if n > len(line) {
					attrs = append(attrs, slog.Int("truncated", n))
				}
				if skipped > 0 {
					attrs = append(attrs, slog.Int("skippedLines", skipped))
					skipped = 0
				}
				u.log.Info("upstream stderr", attrs...)
			} else {
				skipped++
			}
		}
		line, n = line[:0], 0
		if err != nil {
			break
		}
	}
	if skipped > 0 {
		u.log.Info("upstream stderr lines skipped", "upstream", u.name, "pid", pid, "skippedLines", skipped)
	}
}

func exitStatus(err error) string {
	if err == nil {
		return "0"
	}
	return err.Error()
}

// shutdown waits up to timeout for the child to exit (it has EOF on its
// stdin), then sends SIGTERM and waits up to timeout again, then SIGKILL,
// each to its process group, and returns once it has been waited for
// (CONTRACT.md section 10) and what was left of its group killed.
func (c *child) shutdown(timeout time.Duration) {
	// Whatever of its process group outlives it (a descendant holding
	// its stdout, say) is killed with it.
	defer c.signal(syscall.SIGKILL)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return
	case <-t.C:
	}
	c.signal(syscall.SIGTERM)
	t.Reset(timeout)
	select {
	case <-c.done:
		return
	case <-t.C:
	}
	c.signal(syscall.SIGKILL)
	<-c.done
}

// signal sends sig to the child's process group: the child and every
// descendant that stayed in it.
func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
}

// wholeFrames reports whether b is a sequence of complete WebSocket frames.
func wholeFrames(b []byte) bool {
	for len(b) > 0 {
		r := bytes.NewReader(b)
		h, err := ws.ReadHeader(r)
		if err != nil {
			return false
		}
		i := len(b) - r.Len()
		if h.Length > int64(len(b)-i) {
			return false
		}
		b = b[i+int(h.Length):]
	}
	return true
}
