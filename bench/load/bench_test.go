package load

import (
	"bufio"
	"math"
	"net"
	"strconv"
	"testing"

	"github.com/gobwas/ws"
)

// replyStream is an endless io.Reader of server reply frames whose ids count
// up from IDBase, as a server answering the generator in order would send:
// each Read returns at most perRead whole frames (one window's worth).
type replyStream struct {
	frame   []byte // unmasked reply frame for id IDBase
	idPos   int    // offset of its id digits
	seq     uint64
	perRead int
}

func newReplyStream(result []byte, perRead int) *replyStream {
	const prefix = `{"jsonrpc":"2.0","id":`
	p := append([]byte(prefix+strconv.Itoa(IDBase)+`,"result":`), result...)
	p = append(p, '}')
	frame := serverFrame(ws.OpText, true, p)
	return &replyStream{frame: frame, idPos: len(frame) - len(p) + len(prefix), perRead: perRead}
}

func (r *replyStream) Read(p []byte) (int, error) {
	n := 0
	for k := 0; k < r.perRead && len(p)-n >= len(r.frame); k++ {
		v := IDOf(r.seq)
		for i := IDWidth - 1; i >= 0; i-- {
			r.frame[r.idPos+i] = byte('0' + v%10)
			v /= 10
		}
		n += copy(p[n:], r.frame)
		r.seq++
	}
	return n, nil
}

// BenchmarkGeneratorRequest is the generator's whole per-request work in
// closed loop, without the syscalls: parse one reply frame from the read
// buffer, classify it and extract its id, match it to its send time, record
// the latency, and build the next pre-masked request (id digits rewritten in
// place); plus the batch bookkeeping (stamping send times). It must not
// allocate. (The replyStream that fakes the server is included in the time.)
func BenchmarkGeneratorRequest(b *testing.B) {
	for _, size := range []int{16, 1024} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			params := Params(size)
			const window = 64
			rs := newReplyStream(params, window)
			fc := &fakeConn{}
			c := &Conn{nc: fc, br: bufio.NewReaderSize(rs, DefaultReadBuffer), d: JSONRPC{}, mask: [4]byte{1, 2, 3, 4}}
			req, off := JSONRPC{}.Echo(params)
			o := newClosedConn(c, 0, req, off, 0, window)
			l := &closedLoop{conns: []*closedConn{o}, loopCore: loopCore{d: JSONRPC{},
				win: Window{Start: 0, End: math.MaxInt64}, lat: LatBuf{R: NewRecorder()}}}
			for range window {
				o.push()
			}
			o.stamp()
			o.wbuf = o.wbuf[:0]
			b.SetBytes(int64(len(req)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				msg, err := c.Next()
				if err != nil {
					b.Fatal(err)
				}
				l.handle(o, msg, c.At())
				if !c.Ready() { // as read does: stamp and write once per read
					o.stamp()
					o.wbuf = o.wbuf[:0]
				}
			}
			b.StopTimer()
			if l.unmatched != 0 || l.replies == 0 {
				b.Fatalf("unmatched %d replies %d", l.unmatched, l.replies)
			}
		})
	}
}

func BenchmarkTemplateAppend(b *testing.B) {
	req, off := JSONRPC{}.Echo(Params(16))
	tm := NewTemplate(req, [4]byte{1, 2, 3, 4}, 0, off)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		buf = tm.Append(buf[:0], IDOf(seq))
		seq++
	}
}

func BenchmarkClassify(b *testing.B) {
	msgs := map[string]struct {
		d   Dialect
		msg []byte
	}{
		"jsonrpc":    {JSONRPC{}, []byte(`{"jsonrpc":"2.0","id":1000000007,"result":{"p":"xxxxxxxx"}}`)},
		"centrifuge": {Centrifuge{}, []byte(`{"id":1000000006,"rpc":{"data":{"p":"xxxxxxxx"}}}`)},
		"event":      {JSONRPC{}, []byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"1","cursor":"5","seq":5,"data":{"t":1000000000000123,"p":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}}`)},
	}
	for name, m := range msgs {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if m.d.Classify(m.msg).Kind == KindEvent {
					EventTime(m.msg)
				}
			}
		})
	}
}

// discardConn is a net.Conn that accepts every write.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkOpenLoopRequest is the open loop's per-request work without the
// syscalls: build and write one request on schedule (slot bookkeeping, lag
// sample), then classify its reply, match it and record its latency. It must
// not allocate.
func BenchmarkOpenLoopRequest(b *testing.B) {
	params := Params(16)
	req, off := JSONRPC{}.Echo(params)
	c := &Conn{nc: discardConn{}, d: JSONRPC{}, mask: [4]byte{1, 2, 3, 4}}
	t := NewTemplate(req, c.Mask(), 0, off)
	o := &loopConn{c: c, tmpl: t, ring: make([]slot, openRing), wbuf: make([]byte, 0, t.Len())}
	l := &openLoop{conns: []*loopConn{o}, loopCore: loopCore{d: JSONRPC{},
		win: Window{Start: 0, End: math.MaxInt64}, lat: LatBuf{R: NewRecorder()}}, lag: LatBuf{R: NewRecorder()}}
	rs := newReplyStream(params, 1)
	reply := make([]byte, len(rs.frame))
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		seq := o.next
		l.send(o, Now())
		rs.seq = seq
		rs.Read(reply)
		l.handle(o, reply[2:], Now()) // the payload, after a 2-byte frame header
	}
	if l.unmatched != 0 || l.replies == 0 || l.outstanding != 0 {
		b.Fatalf("unmatched %d replies %d outstanding %d", l.unmatched, l.replies, l.outstanding)
	}
}
