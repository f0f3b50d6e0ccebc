package loop

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobwas/ws"
	"github.com/panjf2000/gnet/v2"
)

// Unit tests of the connection timers (CONTRACT.md sections 1.1 and 6: ping
// after PingInterval of silence, close after PongTimeout more, the handshake
// deadline, the write-stall timeout, the wait for the peer's close) on
// synctest's fake clock, with the default timeouts. The test goroutine plays
// gnet's ticker (OnTick, then sleep what it asks) and the connection's event
// loop (fakeLoop runs the sweeps OnTick schedules at once), and a fakeConn
// stands for the socket: nothing runs on a real timer or touches the
// network, so every instant below is exact. test/liveness_test.go checks the
// same behaviour end to end over real sockets.

// sent is one write of the server to a connection, at fake time at.
type sent struct {
	at   time.Time
	data []byte
}

// fakeConn is the gnet.Conn of one connection: input the test queues, the
// writes the server makes, output gnet would still hold for the socket
// (pending), and whether and when the server closed it. Any other method
// panics (nil embedded interface).
type fakeConn struct {
	gnet.Conn
	el       gnet.EventLoop
	ctx      any
	in       []byte
	writes   []sent
	pending  int
	closedAt time.Time // zero while open
}

func (c *fakeConn) EventLoop() gnet.EventLoop { return c.el }
func (c *fakeConn) Context() any              { return c.ctx }
func (c *fakeConn) SetContext(ctx any)        { c.ctx = ctx }
func (c *fakeConn) InboundBuffered() int      { return len(c.in) }
func (c *fakeConn) OutboundBuffered() int     { return c.pending }
func (c *fakeConn) Fd() int                   { return -1 } // shutdown(2) of it fails harmlessly
func (c *fakeConn) RemoteAddr() net.Addr      { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func (c *fakeConn) Peek(n int) ([]byte, error) {
	if n < 0 || n > len(c.in) {
		n = len(c.in)
	}
	return c.in[:n], nil
}

func (c *fakeConn) Discard(n int) (int, error) {
	n = min(n, len(c.in))
	c.in = c.in[n:]
	return n, nil
}

func (c *fakeConn) Write(b []byte) (int, error) {
	c.writes = append(c.writes, sent{at: time.Now(), data: bytes.Clone(b)})
	return len(b), nil
}

func (c *fakeConn) Close() error {
	if c.closedAt.IsZero() {
		c.closedAt = time.Now()
	}
	return nil
}

// fakeLoop is a gnet.EventLoop that runs what it is given at once, on the
// caller's goroutine: here the test's, which plays the event loop.
type fakeLoop struct{ gnet.EventLoop }

func (fakeLoop) Execute(ctx context.Context, r gnet.Runnable) error { return r.Run(ctx) }

// clock drives one connection of an echo server (Config.Echo) through time.
// Use it only inside synctest.Test.
type clock struct {
	t        *testing.T
	srv      *Server
	c        *fakeConn
	nextTick time.Time // when the ticker calls OnTick again
	gone     bool      // OnClose has run
}

// newClock starts the ticker, and accepts one connection (OnOpen) 300 ms
// later: its deadlines then fall between two sweeps, so that a sweep period
// longer than late is seen.
func newClock(t *testing.T) *clock {
	cfg := Config{Echo: true}.withDefaults()
	s := &Server{cfg: cfg, loops: map[gnet.EventLoop]*eventLoop{}}
	el := fakeLoop{}
	s.loops[el] = &eventLoop{srv: s, el: el, epfd: -1, spareMax: cfg.SpareOutputBytes}
	h := &clock{t: t, srv: s, c: &fakeConn{el: el}}
	h.advance(300 * time.Millisecond)
	if _, action := s.onOpen(h.c); action != gnet.None {
		t.Fatalf("OnOpen: action %v", action)
	}
	return h
}

// late is how long after its deadline a timer may fire: the sweeps run every
// quarter of the shortest timeout (CloseTimeout, 2 s with the defaults).
const late = DefaultCloseTimeout / 4

// advance lets d pass on the fake clock as gnet's ticker would see it: each
// time a tick is due it calls OnTick, then sleeps until the next one or the
// end of d.
func (h *clock) advance(d time.Duration) {
	end := time.Now().Add(d)
	for {
		if !time.Now().Before(h.nextTick) {
			delay, _ := h.srv.onTick()
			h.nextTick = time.Now().Add(delay)
			h.reap()
		}
		// On synctest's clock a sleep returns at once, at the fake instant.
		if !h.nextTick.Before(end) {
			time.Sleep(time.Until(end))
			return
		}
		time.Sleep(time.Until(h.nextTick))
	}
}

// send delivers bytes from the peer now, as one OnTraffic.
func (h *clock) send(b []byte) {
	h.t.Helper()
	if !h.c.closedAt.IsZero() {
		h.t.Fatalf("send at %s: the server closed the connection at %s", h.since(time.Now()), h.since(h.c.closedAt))
	}
	h.c.in = append(h.c.in, b...)
	h.srv.onTraffic(h.c)
	h.reap()
}

// reap runs OnClose once the server has closed the connection, as gnet does.
func (h *clock) reap() {
	if !h.c.closedAt.IsZero() && !h.gone {
		h.gone = true
		h.srv.onClose(h.c, nil)
	}
}

// upgrade completes the WebSocket upgrade now and takes the 101 response.
func (h *clock) upgrade() {
	h.t.Helper()
	h.send([]byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"))
	if len(h.c.writes) != 1 || !bytes.HasPrefix(h.c.writes[0].data, []byte("HTTP/1.1 101 ")) {
		h.t.Fatalf("upgrade: wrote %s, want the 101 response", h.written())
	}
	h.c.writes = nil
}

// written lists the writes not looked at yet, for messages.
func (h *clock) written() string {
	var b strings.Builder
	for _, w := range h.c.writes {
		fmt.Fprintf(&b, "[%q at %s]", w.data, h.since(w.at))
	}
	return b.String()
}

// bubbleStart is where synctest's fake clock starts (midnight UTC
// 2000-01-01), for messages.
var bubbleStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// since formats an instant as the fake time elapsed since the bubble began.
func (h *clock) since(at time.Time) string { return at.Sub(bubbleStart).String() }

// frame is one server frame, decoded: "ping", "text <payload>", "close <code> <reason>".
type frame struct {
	at   time.Time
	desc string
}

// frames decodes every frame the server wrote since the last call.
func (h *clock) frames() []frame {
	h.t.Helper()
	var out []frame
	for _, w := range h.c.writes {
		r := bytes.NewReader(w.data)
		for r.Len() > 0 {
			hd, err := ws.ReadHeader(r)
			if err != nil {
				h.t.Fatalf("write at %s: %v in %q", h.since(w.at), err, w.data)
			}
			p := make([]byte, hd.Length)
			if _, err := io.ReadFull(r, p); err != nil {
				h.t.Fatalf("write at %s: %v in %q", h.since(w.at), err, w.data)
			}
			var desc string
			switch {
			case hd.OpCode == ws.OpPing && len(p) == 0:
				desc = "ping"
			case hd.OpCode == ws.OpText:
				desc = "text " + string(p)
			case hd.OpCode == ws.OpClose && len(p) >= 2:
				desc = fmt.Sprintf("close %d %s", binary.BigEndian.Uint16(p), p[2:])
			default:
				desc = fmt.Sprintf("opcode %d %q", hd.OpCode, p)
			}
			out = append(out, frame{at: w.at, desc: desc})
		}
	}
	h.c.writes = nil
	return out
}

// expectFrames requires the frames written since the last look to be want,
// each written at or after its from and at most late after it.
func (h *clock) expectFrames(want ...want) {
	h.t.Helper()
	got := h.frames()
	var gotLines, wantLines []string
	for _, f := range got {
		gotLines = append(gotLines, f.desc+" at "+h.since(f.at))
	}
	for _, w := range want {
		wantLines = append(wantLines, fmt.Sprintf("%s at %s..%s", w.desc, h.since(w.from), h.since(w.from.Add(late))))
	}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].desc == want[i].desc && !got[i].at.Before(want[i].from) && !got[i].at.After(want[i].from.Add(late))
	}
	if !ok {
		h.t.Fatalf("server wrote\n  %s\nwant\n  %s", strings.Join(gotLines, "\n  "), strings.Join(wantLines, "\n  "))
	}
}

// want is a frame expected no earlier than from.
type want struct {
	desc string
	from time.Time
}

// expectClosedWithin requires the server to have closed the connection at or
// after from and at most late after it.
func (h *clock) expectClosedWithin(from time.Time) {
	h.t.Helper()
	at := h.c.closedAt
	if at.IsZero() || at.Before(from) || at.After(from.Add(late)) {
		closed := "still open"
		if !at.IsZero() {
			closed = "closed at " + h.since(at)
		}
		h.t.Fatalf("%s, want closed at %s..%s", closed, h.since(from), h.since(from.Add(late)))
	}
}

// expectOpen requires the connection to be open.
func (h *clock) expectOpen() {
	h.t.Helper()
	if !h.c.closedAt.IsZero() {
		h.t.Fatalf("closed at %s, want open at %s", h.since(h.c.closedAt), h.since(time.Now()))
	}
}

// clientFrame is a masked client frame with FIN set.
func clientFrame(op ws.OpCode, payload string) []byte {
	hd := ws.Header{Fin: true, OpCode: op, Length: int64(len(payload)), Masked: true, Mask: ws.NewMask()}
	var b bytes.Buffer
	if err := ws.WriteHeader(&b, hd); err != nil {
		panic(err)
	}
	n := b.Len()
	b.WriteString(payload)
	ws.Cipher(b.Bytes()[n:], hd.Mask, 0)
	return b.Bytes()
}

// TestSilentConnectionPingedThenClosed: a connection silent since its upgrade
// is pinged once PingInterval (30 s) has passed, and closed with 1001 "idle
// timeout" once PongTimeout (30 s) more has, each at the first sweep after
// its deadline (sweeps run every tick, 500 ms with the defaults); nothing
// else is written and the ping is not repeated.
func TestSilentConnectionPingedThenClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newClock(t)
		h.upgrade()
		t0 := time.Now()
		h.advance(DefaultPingInterval - time.Millisecond)
		h.expectFrames()
		h.advance(DefaultPongTimeout + time.Minute)
		h.expectFrames(
			want{"ping", t0.Add(DefaultPingInterval)},
			want{"close 1001 idle timeout", t0.Add(DefaultPingInterval + DefaultPongTimeout)},
		)
		h.expectClosedWithin(t0.Add(DefaultPingInterval + DefaultPongTimeout))
	})
}

// TestPongKeepsConnectionAlive: a pong is liveness like any other input. A
// client that answers each ping half a second before it would be closed is
// pinged again PingInterval after its pong and never closed; then it is
// still served.
func TestPongKeepsConnectionAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newClock(t)
		h.upgrade()
		last := time.Now() // the last input the server read
		for range 5 {
			h.advance(DefaultPingInterval + DefaultPongTimeout - 500*time.Millisecond)
			h.expectFrames(want{"ping", last.Add(DefaultPingInterval)})
			h.send(clientFrame(ws.OpPong, ""))
			last = time.Now()
		}
		h.expectOpen()
		h.send(clientFrame(ws.OpText, `{"still":"here"}`))
		h.expectFrames(want{`text {"still":"here"}`, time.Now()})
	})
}

// TestActiveConnectionNotPinged: a client that sends a message a little more
// often than PingInterval is never pinged, for ten minutes.
func TestActiveConnectionNotPinged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newClock(t)
		h.upgrade()
		for i := range 20 {
			h.advance(DefaultPingInterval - 500*time.Millisecond)
			msg := fmt.Sprintf(`{"n":%d}`, i)
			h.send(clientFrame(ws.OpText, msg))
			h.expectFrames(want{"text " + msg, time.Now()})
		}
		h.expectOpen()
	})
}

// TestHandshakeDeadline: a connection that has not completed its upgrade
// HandshakeTimeout (10 s) after it was accepted is closed without a word at
// the first sweep after the deadline, also while it keeps sending header
// lines (slowloris, CONTRACT.md section 1.1); one that completes it just
// before the deadline stays open.
func TestHandshakeDeadline(t *testing.T) {
	tests := []struct {
		name    string
		first   string // sent at accept
		trickle string // sent every second after that
	}{
		{name: "silent"},
		{name: "partial request", first: "GET / HTTP/1.1\r\nHost: x\r\n"},
		{name: "trickle", first: "GET / HTTP/1.1\r\n", trickle: "X: y\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newClock(t)
				t0 := time.Now()
				if tt.first != "" {
					h.send([]byte(tt.first))
				}
				for time.Since(t0) < DefaultHandshakeTimeout-time.Second {
					h.advance(time.Second)
					if tt.trickle != "" {
						h.send([]byte(tt.trickle))
					}
				}
				h.advance(time.Minute)
				if len(h.c.writes) > 0 {
					t.Fatalf("wrote %s, want a plain close", h.written())
				}
				h.expectClosedWithin(t0.Add(DefaultHandshakeTimeout))
			})
		})
	}
	t.Run("upgraded just in time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newClock(t)
			h.advance(DefaultHandshakeTimeout - 500*time.Millisecond)
			h.upgrade()
			h.advance(DefaultPingInterval - time.Second)
			h.expectOpen()
			h.expectFrames()
		})
	})
}

// TestWriteStallDeadline: output that gnet holds for the socket and that
// makes no progress for WriteStallTimeout (10 s) closes the connection with
// 1008 "slow consumer" (CONTRACT.md section 6), however active the client
// is otherwise; output that keeps draining, however slowly, does not.
func TestWriteStallDeadline(t *testing.T) {
	t.Run("stalled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newClock(t)
			h.upgrade()
			h.advance(time.Second)
			t0 := time.Now()
			h.c.pending = 64 << 10 // the peer stops reading
			for time.Since(t0) < DefaultWriteStall-time.Second {
				h.advance(time.Second)
				h.send(clientFrame(ws.OpPong, ""))
			}
			h.expectFrames()
			h.advance(time.Minute)
			// The first sweep from t0 on starts the stall clock, so the close
			// comes at most a sweep period late.
			h.expectFrames(want{"close 1008 slow consumer", t0.Add(DefaultWriteStall)})
			h.expectClosedWithin(t0.Add(DefaultWriteStall))
		})
	})
	t.Run("draining slowly", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newClock(t)
			h.upgrade()
			h.c.pending = 64 << 10
			for range 120 {
				h.advance(time.Second)
				h.c.pending -= 100 // the kernel takes a little every second
				h.send(clientFrame(ws.OpPong, ""))
			}
			h.expectOpen()
			h.expectFrames()
		})
	})
}

// TestCloseTimeout: after the server's own close frame (here 1003 for a
// binary message) it waits CloseTimeout (2 s) for the peer's close, then
// drops the TCP connection.
func TestCloseTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newClock(t)
		h.upgrade()
		h.advance(time.Second)
		t0 := time.Now()
		h.send(clientFrame(ws.OpBinary, "x"))
		h.expectFrames(want{"close 1003 binary frames are not supported", t0})
		h.advance(DefaultCloseTimeout - time.Millisecond)
		h.expectOpen()
		h.advance(time.Minute)
		h.expectFrames()
		h.expectClosedWithin(t0.Add(DefaultCloseTimeout))
	})
}

// TestLateSweepPingsBeforeClosing: a loop busy for longer than PingInterval +
// PongTimeout sweeps a silent connection late, once. It used to close it
// there and then (1001) although it was never pinged (CONTRACT.md section 1.1:
// a ping first, then PongTimeout more of silence). Now that sweep pings, and
// the close comes PongTimeout after the ping.
func TestLateSweepPingsBeforeClosing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newClock(t)
		h.upgrade()
		// No sweep for 61 s: the loop was busy.
		time.Sleep(DefaultPingInterval + DefaultPongTimeout + time.Second)
		late := time.Now()
		h.advance(time.Millisecond)
		h.expectFrames(want{"ping", late})
		h.expectOpen()
		h.advance(DefaultPongTimeout + time.Minute)
		h.expectFrames(want{"close 1001 idle timeout", late.Add(DefaultPongTimeout)})
	})
}
