package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
)

// TestWSReaderHugeFrameLengths is the regression test of two crashes a
// WebSocket upstream could cause with a frame header alone (CONTRACT.md
// section 10: nothing an upstream sends can crash edge). The reader
// allocated a control frame's payload at the length its header claimed, so
// a ping claiming 2^63-1 bytes panicked in makeslice (and one claiming a few
// GiB allocated them); and it checked a continuation against the message
// limit as len(msg)+length, which overflowed for a length near 2^63 and
// panicked in growslice. A control frame is final and carries at most 125
// bytes (RFC 6455 section 5.5): anything else fails the connection.
func TestWSReaderHugeFrameLengths(t *testing.T) {
	huge := []byte{127, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	gib := []byte{127, 0, 0, 0, 1, 0, 0, 0, 0} // 4 GiB
	tests := []struct {
		name    string
		in      []byte
		wantErr error // nil: the input consumed or waiting for more
	}{
		{"ping claiming 2^63-1 bytes", append([]byte{0x89}, huge...), ws.ErrProtocolControlPayloadOverflow},
		{"ping claiming 4 GiB", append([]byte{0x89}, gib...), ws.ErrProtocolControlPayloadOverflow},
		{"ping claiming 126 bytes", append([]byte{0x89, 126, 0, 126}, make([]byte, 126)...), ws.ErrProtocolControlPayloadOverflow},
		{"close claiming 2^63-1 bytes", append([]byte{0x88}, huge...), ws.ErrProtocolControlPayloadOverflow},
		{"fragmented ping", []byte{0x09, 1, 'p'}, ws.ErrProtocolControlNotFinal},
		{"continuation claiming 2^63-1 bytes after one byte",
			append([]byte{0x01, 1, '{', 0x80}, huge...), errUpstreamTooBig},
		{"text claiming 2^63-1 bytes", append([]byte{0x81}, huge...), errUpstreamTooBig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := testUpstream(nil, Config{MaxMessageBytes: 1 << 10})
			l := newLink(u, "t", appendClientFrame, true)
			l.open()
			_, err := feed(l, tt.in, 7)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Traffic: %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// TestWSUpstreamHugeFrameCloses is the regression test of issue 24 item 5's
// wedged WebSocket link: a data frame whose header claims more than
// MaxMessageBytes (2^62 bytes, say) was skipped as its payload arrived, so
// the link read the upstream's bytes as that payload for as long as the
// header claimed, forever, answering nothing. It is closed instead, with a
// close frame 1009 (RFC 6455 section 7.4.1, as a client's message over the
// limit), and the drop is counted; the supervisor redials (Closed). A
// message within the limit, in one frame or two, is still served, and a
// binary one within it is still dropped and skipped.
func TestWSUpstreamHugeFrameCloses(t *testing.T) {
	const max = 1 << 10
	claim := func(op byte, n uint64) []byte {
		return []byte{op, 127, byte(n >> 56), byte(n >> 48), byte(n >> 40), byte(n >> 32), byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	frag := append([]byte{0x01, 126, 0x03, 0x00}, make([]byte, 768)...) // 768 bytes, not final
	tests := []struct {
		name    string
		in      []byte
		wantErr error
	}{
		{"text claiming 2^62 bytes", claim(0x81, 1<<62), errUpstreamTooBig},
		{"binary claiming 2^62 bytes", claim(0x82, 1<<62), errUpstreamTooBig},
		{"text of max+1 bytes", claim(0x81, max+1), errUpstreamTooBig},
		{"continuation taking the message over max", append(frag, claim(0x80, max-768+1)...), errUpstreamTooBig},
		{"binary of max bytes, then a text", append(append(claim(0x82, max), make([]byte, max)...), appendFrame(nil, ws.OpText, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))...), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := testUpstream(nil, Config{MaxMessageBytes: max})
			l := newLink(u, "t", appendClientFrame, true)
			l.open()
			c := &recCall{method: "edge/echo"}
			l.forward(c, 0)
			l.Output()
			_, err := feed(l, tt.in, 7)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Traffic: %v, want %v", err, tt.wantErr)
			}
			out := l.Output()
			if tt.wantErr == nil {
				if len(out) != 0 || len(c.result) != 1 {
					t.Fatalf("wrote %q, the call finished %q: want nothing written and the call answered", out, c.result)
				}
				return
			}
			h, err := ws.ReadHeader(bytes.NewReader(out))
			if err != nil || h.OpCode != ws.OpClose || h.Length != 2 {
				t.Fatalf("wrote %q (%+v, %v), want one close frame", out, h, err)
			}
			p := out[len(out)-2:]
			ws.Cipher(p, h.Mask, 0)
			if code := ws.StatusCode(p[0])<<8 | ws.StatusCode(p[1]); code != ws.StatusMessageTooBig {
				t.Fatalf("close code %d, want 1009", code)
			}
			if u.Dropped() != 1 {
				t.Fatalf("Dropped() %d, want 1", u.Dropped())
			}
		})
	}
}

// TestReadLinesLimits: NDJSON lines from an upstream are split on \n with a
// trailing \r stripped; a line over the limit is dropped and counted, also
// one longer than the read buffer, also when it arrives in pieces, and
// reading resumes after it; a last line without its newline waits for it.
func TestReadLinesLimits(t *testing.T) {
	const max = 100
	u := testUpstream(nil, Config{MaxMessageBytes: max})
	l := newLink(u, "t", nil, false)
	l.open()
	c, c2 := &recCall{method: "edge/echo"}, &recCall{method: "edge/echo"}
	in := strings.Repeat("x", max+1) + "\n" + // over the limit
		strings.Repeat("y", 200<<10) + "\n" + // over the limit and the 64 KiB read buffer
		"\r\n\n" + // empty lines: nothing
		`{"jsonrpc":"2.0","id":1,"result":{"ok":1}}` + "\r\n" +
		`{"jsonrpc":"2.0","id":2,"result":{"ok":2}}` // no newline at the end
	for _, chunk := range []int{1, 13, 64 << 10} {
		c.result, c2.result, c.errs, c2.errs = nil, nil, nil, nil // forwarded again
		l.rd = reading{}
		l.forward(c, 0)
		l.forward(c2, 0)
		id := l.lastID
		in := strings.ReplaceAll(in, `"id":1`, fmt.Sprintf(`"id":%d`, id-1))
		in = strings.ReplaceAll(in, `"id":2`, fmt.Sprintf(`"id":%d`, id))
		rest, err := feed(l, []byte(in), chunk)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.result) != 1 || c.result[0] != `{"ok":1}` || len(c2.result) != 0 {
			t.Fatalf("chunks of %d: calls finished with %q and %q, want the first only", chunk, c.result, c2.result)
		}
		if _, err := feed(l, append(rest, '\n'), chunk); err != nil {
			t.Fatal(err)
		}
		if len(c2.result) != 1 || c2.result[0] != `{"ok":2}` {
			t.Fatalf("chunks of %d: second call finished with %q once its newline arrived", chunk, c2.result)
		}
	}
	if n := u.Dropped(); n != 6 {
		t.Fatalf("Dropped() = %d, want 6 (the two long lines, three times)", n)
	}
}

// feed hands in to the link's Traffic as an event loop would, chunk bytes
// at a time, keeping what it does not consume; it returns what is left
// unconsumed at the end, or Traffic's error.
func feed(l *link, in []byte, chunk int) ([]byte, error) {
	var buf []byte
	for len(in) > 0 {
		k := min(chunk, len(in))
		buf = append(buf, in[:k]...)
		in = in[k:]
		n, err := l.Traffic(buf, nowNanos())
		if err != nil {
			return nil, err
		}
		buf = buf[:copy(buf, buf[n:])]
	}
	return buf, nil
}

// TestWholeFrames: what an upstream sent with its 101 is dropped only when it
// is whole frames; part of one fails the dial.
func TestWholeFrames(t *testing.T) {
	one := ws.MustCompileFrame(ws.NewTextFrame([]byte(`{"jsonrpc":"2.0","method":"hello"}`)))
	two := append(append([]byte{}, one...), one...)
	for _, c := range []struct {
		b    []byte
		want bool
	}{
		{nil, true}, {one, true}, {two, true},
		{one[:1], false}, {one[:len(one)-1], false}, {two[:len(one)+3], false},
	} {
		if got := wholeFrames(c.b); got != c.want {
			t.Fatalf("wholeFrames(%d of %d bytes) = %v, want %v", len(c.b), len(two), got, c.want)
		}
	}
}

// recConn is a WireConn that records what the link asks of it.
type recConn struct {
	dirty  int
	writes [][]byte
}

func (r *recConn) Dirty()         { r.dirty++ }
func (r *recConn) Buffered() int  { return 0 }
func (r *recConn) Write(p []byte) { r.writes = append(r.writes, append([]byte(nil), p...)) }
func (r *recConn) CloseWrite()    {}
func (r *recConn) Close()         {}

// TestLinkWritesAtWriteAt: a byte-stream link leaves its output to the
// loop's flush (Dirty) until it reaches writeAt, then writes it at once,
// so that a burst's buffer stays bounded; every request goes out once, in
// order, between those writes and the loop's final Output.
func TestLinkWritesAtWriteAt(t *testing.T) {
	l := newBenchLink(nil)
	rc := &recConn{}
	l.wc = rc
	big := &paramsCall{params: []byte(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)}
	const calls = 200 // about 200 KB: three writes past writeAt
	for range calls {
		l.forward(big, 0)
		if len(l.out) >= writeAt {
			t.Fatalf("output of %d bytes left for the flush, past writeAt %d", len(l.out), writeAt)
		}
	}
	if len(rc.writes) != 3 {
		t.Fatalf("%d writes at once, want 3", len(rc.writes))
	}
	if rc.dirty == 0 {
		t.Fatal("the link never left its output to the loop's flush")
	}
	var all []byte
	for _, w := range rc.writes {
		if len(w) < writeAt || len(w) > writeAt+1100 {
			t.Fatalf("a write of %d bytes, want writeAt (%d) to writeAt plus one request", len(w), writeAt)
		}
		all = append(all, w...)
	}
	all = append(all, l.Output()...)
	lines := strings.Split(strings.TrimSuffix(string(all), "\n"), "\n")
	if len(lines) != calls {
		t.Fatalf("%d requests written, want %d", len(lines), calls)
	}
	for i, line := range lines {
		if want := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+1) + `,`; !strings.HasPrefix(line, want) {
			t.Fatalf("request %d: %.40s..., want it to start %s", i, line, want)
		}
	}
}

// TestAnswerNeedsNoFlush: an answer that only finishes its call queues no
// output, so it asks the loop for no flush (it used to mark the link dirty
// for every answer: one more lock and flush per read); the answer that
// orphans a subscription asks for one, for its subscription/cancel.
func TestAnswerNeedsNoFlush(t *testing.T) {
	l := newBenchLink(nil)
	rc := &recConn{}
	l.wc = rc
	c := &recCall{method: "edge/echo"}
	l.forward(c, 0)
	l.Output()
	rc.dirty = 0
	l.handle([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	if len(c.errs) != 1 || rc.dirty != 0 {
		t.Fatalf("answer: finished %d times, %d flushes asked; want 1, 0", len(c.errs), rc.dirty)
	}
	s := &recCall{method: "edge/ticks", st: &recStream{id: "s1"}}
	l.forward(s, 0)
	l.Cancel(2)
	l.Output()
	rc.dirty = 0
	l.handle([]byte(`{"jsonrpc":"2.0","id":2,"result":{"subscriptionId":"u"}}`))
	if rc.dirty != 1 || !strings.Contains(string(l.Output()), `"subscription/cancel"`) {
		t.Fatalf("orphaning answer: %d flushes asked, want 1 with the subscription/cancel", rc.dirty)
	}
}

// paramsCall is a unary backend.Call of edge/echo with params.
type paramsCall struct{ params []byte }

func (c *paramsCall) Method() string         { return "edge/echo" }
func (c *paramsCall) Params() []byte         { return c.params }
func (c *paramsCall) Stream() backend.Stream { return nil }
func (c *paramsCall) Finish([]byte, error)   {}

// silentLoops is a goLoop whose first Attach does what gnet's Enroll does
// when registering the descriptor with its poller fails: the connection is
// closed, Open never runs, and no error is reported.
type silentLoops struct {
	*goLoop
	attaches atomic.Int32
}

func (s *silentLoops) Attach(i int, c net.Conn, w Wire) error {
	if s.attaches.Add(1) == 1 {
		c.Close()
		return nil
	}
	return s.goLoop.Attach(i, c, w)
}

// TestAttachWithoutOpenRetries (issue 19 item 6): a connection the loop did
// not take, although Attach reported no error, is not reported connected: it
// counts as a failed attempt, and the supervisor reconnects after its
// back-off (the old code logged "upstream connected" and waited for ever for
// a close that could not come).
func TestAttachWithoutOpenRetries(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			go answerProbe(c)
		}
	}()
	var logs logBuffer
	u := New("t", []Replica{{Kind: TCP, URL: "tcp://" + ln.Addr().String(), Addr: ln.Addr().String()}},
		Config{Conns: 1, BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	loops := &silentLoops{goLoop: newGoLoop()}
	defer loops.stop()
	u.StartOn(loops)
	defer func() {
		if !t.Failed() { // else Close would wait for ever for the close that cannot come
			u.Close()
		}
	}()
	poll.Until(t, 5*time.Second, "the upstream connected on the second attempt", func() (bool, string) {
		up, _ := u.Connected()
		return up == 1, fmt.Sprintf("%d attaches, %d up", loops.attaches.Load(), up)
	})
	if n := loops.attaches.Load(); n != 2 {
		t.Fatalf("%d attaches, want 2", n)
	}
	out := logs.String()
	if !strings.Contains(out, "did not take the connection") || strings.Count(out, "upstream connected") != 1 {
		t.Fatalf("logs do not report the failed attempt and one connection:\n%s", out)
	}
}

// TestLinkDirtyOncePerTurn: a link tells its connection of output once
// until the loop takes it (Output), and again for the output after that,
// so that nothing waits unflushed: the calls of a turn after the first
// skip the call.
func TestLinkDirtyOncePerTurn(t *testing.T) {
	l := newBenchLink(nil)
	rc := &recConn{}
	l.wc = rc
	c := &paramsCall{params: []byte(`{}`)}
	for range 3 {
		l.forward(c, 0)
	}
	if rc.dirty != 1 {
		t.Fatalf("%d Dirty calls for a turn's three requests, want 1", rc.dirty)
	}
	if len(l.Output()) == 0 {
		t.Fatal("no output")
	}
	l.forward(c, 0)
	if rc.dirty != 2 {
		t.Fatalf("%d Dirty calls after the loop took the output and a request came, want 2", rc.dirty)
	}
}
