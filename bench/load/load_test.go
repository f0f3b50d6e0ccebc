package load

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name   string
		in     []byte
		ok     bool
		n, len int
		op     ws.OpCode
		fin    bool
	}{
		{name: "short", in: []byte{0x81}, ok: false},
		{name: "small text", in: []byte{0x81, 5}, ok: true, n: 2, len: 5, op: ws.OpText, fin: true},
		{name: "16-bit length", in: []byte{0x01, 126, 1, 0}, ok: true, n: 4, len: 256, op: ws.OpText},
		{name: "16-bit partial", in: []byte{0x01, 126, 1}, ok: false},
		{name: "64-bit length", in: []byte{0x80, 127, 0, 0, 0, 0, 0, 1, 0, 0}, ok: true, n: 10, len: 65536, op: ws.OpContinuation, fin: true},
		{name: "masked", in: []byte{0x89, 0x82, 1, 2, 3, 4}, ok: true, n: 6, len: 2, op: ws.OpPing, fin: true},
		{name: "masked partial", in: []byte{0x89, 0x82, 1, 2}, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, n, ok, err := ParseHeader(tt.in)
			if err != nil || ok != tt.ok {
				t.Fatalf("ok=%v err=%v, want ok=%v", ok, err, tt.ok)
			}
			if !ok {
				return
			}
			if n != tt.n || h.Len != tt.len || h.Op != tt.op || h.Fin != tt.fin {
				t.Fatalf("got n=%d %+v", n, h)
			}
		})
	}
}

// readClientMessage decodes wire bytes of client frames back into the message.
func readClientMessage(t *testing.T, wire []byte) (msg []byte, frames int) {
	t.Helper()
	r := bytes.NewReader(wire)
	for {
		f, err := ws.ReadFrame(r)
		if err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		if !f.Header.Masked {
			t.Fatal("client frame not masked")
		}
		ws.Cipher(f.Payload, f.Header.Mask, 0)
		if (frames == 0) != (f.Header.OpCode == ws.OpText) {
			t.Fatalf("frame %d has opcode %v", frames, f.Header.OpCode)
		}
		msg = append(msg, f.Payload...)
		frames++
		if f.Header.Fin {
			if r.Len() != 0 {
				t.Fatalf("%d trailing bytes", r.Len())
			}
			return msg, frames
		}
	}
}

func TestTemplate(t *testing.T) {
	mask := [4]byte{0xa1, 0xb2, 0xc3, 0xd4}
	tests := []struct {
		name   string
		params int
		frag   int
		frames int
	}{
		{name: "16B", params: 16, frames: 1},
		{name: "1KiB", params: 1024, frames: 1},
		{name: "70KiB 64-bit length", params: 70 << 10, frames: 1},
		{name: "fragmented", params: 1000, frag: 100, frames: 11},
		{name: "fragment boundary inside id", params: 100, frag: 25, frames: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, off := JSONRPC{}.Echo(Params(tt.params))
			tm := NewTemplate(req, mask, tt.frag, off)
			for _, seq := range []uint64{0, 7, 123456789} {
				wire := tm.Append([]byte("junk"), IDOf(seq))
				msg, frames := readClientMessage(t, wire[4:])
				if frames != tt.frames {
					t.Fatalf("frames = %d, want %d", frames, tt.frames)
				}
				want := append([]byte(nil), req...)
				copy(want[off:], strconv.FormatUint(IDOf(seq), 10))
				if !bytes.Equal(msg, want) {
					t.Fatalf("message\n%s\nwant\n%s", short(string(msg)), short(string(want)))
				}
			}
		})
	}
}

func TestTemplateExtraField(t *testing.T) {
	data, tOff := EventData(128)
	if len(data) != 128 {
		t.Fatalf("event data is %d bytes", len(data))
	}
	req, off, _ := JSONRPC{}.Publish("bench", data)
	tPos := bytes.Index(req, data) + tOff
	tm := NewTemplate(req, [4]byte{9, 8, 7, 6}, 0, off, [2]int{tPos, TimeWidth})
	msg, _ := readClientMessage(t, tm.AppendWith(nil, IDOf(5), TimeBase+42))
	if got, ok := EventTime(msg); !ok || got != 42 {
		t.Fatalf("EventTime = %d, %v in %s", got, ok, msg)
	}
	if id, ok := FindUint(msg, `"id":`); !ok || id != IDOf(5) {
		t.Fatalf("id = %d", id)
	}
}

func TestSizes(t *testing.T) {
	for _, n := range []int{16, 1024} {
		if got := len(Params(n)); got != n {
			t.Errorf("Params(%d) is %d bytes", n, got)
		}
	}
	for _, d := range []Dialect{JSONRPC{}, Raw{}, Geth{}, Centrifuge{}} {
		for _, n := range []int{16 << 10, 1 << 20} {
			if p, _ := EchoOfSize(d, n); len(p) != n {
				t.Errorf("%s: EchoOfSize(%d) is %d bytes", d.Name(), n, len(p))
			}
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		d    Dialect
		msg  string
		want Msg
	}{
		{"edge reply", JSONRPC{}, `{"jsonrpc":"2.0","id":1000000007,"result":{"p":"x"}}`, Msg{KindReply, true, 1000000007}},
		{"reply id after result", JSONRPC{}, `{"result":{"id":5,"s":"}\""},"jsonrpc":"2.0","id":1000000001}`, Msg{KindReply, true, 1000000001}},
		{"error", JSONRPC{}, `{"jsonrpc":"2.0","id":1000000002,"error":{"code":-32000,"message":"Server busy"}}`, Msg{KindError, true, 1000000002}},
		{"error id null", JSONRPC{}, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`, Msg{Kind: KindError}},
		{"string id", JSONRPC{}, `{"jsonrpc":"2.0","id":"1000000003","result":1}`, Msg{KindReply, true, 1000000003}},
		{"event", JSONRPC{}, `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"1","seq":1,"data":{"t":1}}}`, Msg{Kind: KindEvent}},
		{"closed", JSONRPC{}, `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"1","reason":"SLOW_CONSUMER"}}`, Msg{Kind: KindClosed}},
		{"spaces", JSONRPC{}, ` { "id" : 1000000004 , "result" : null }`, Msg{KindReply, true, 1000000004}},
		{"raw echo", Raw{}, `{"jsonrpc":"2.0","id":1000000005,"method":"edge/echo","params":{}}`, Msg{KindReply, true, 1000000005}},
		{"geth event", Geth{}, `{"jsonrpc":"2.0","method":"edge_subscription","params":{"subscription":"0x1","result":{"t":1}}}`, Msg{Kind: KindEvent}},
		{"centrifuge connect", Centrifuge{}, `{"id":1,"connect":{"client":"x","ping":25}}`, Msg{KindReply, true, 1}},
		{"centrifuge rpc", Centrifuge{}, `{"id":1000000006,"rpc":{"data":{"p":"x"}}}`, Msg{KindReply, true, 1000000006}},
		{"centrifuge empty reply", Centrifuge{}, `{"id":1000000008}`, Msg{KindReply, true, 1000000008}},
		{"centrifuge error", Centrifuge{}, `{"id":1000000009,"error":{"code":103,"message":"permission denied"}}`, Msg{KindError, true, 1000000009}},
		{"centrifuge push", Centrifuge{}, `{"push":{"channel":"t","pub":{"data":{"t":1}}}}`, Msg{Kind: KindEvent}},
		{"centrifuge ping", Centrifuge{}, `{}`, Msg{Kind: KindPing}},
		{"not json", JSONRPC{}, `hello`, Msg{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.d.Classify([]byte(tt.msg)); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// serverFrame returns an unmasked server frame.
func serverFrame(op ws.OpCode, fin bool, p []byte) []byte {
	var b bytes.Buffer
	ws.WriteFrame(&b, ws.Frame{Header: ws.Header{Fin: fin, OpCode: op, Length: int64(len(p))}, Payload: p})
	return b.Bytes()
}

// fakeConn is a net.Conn that reads in from chunks of at most chunk bytes
// and collects writes.
type fakeConn struct {
	net.Conn
	in    []byte
	chunk int
	out   bytes.Buffer
}

func (f *fakeConn) Read(p []byte) (int, error) {
	if len(f.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), f.chunk)], f.in)
	f.in = f.in[n:]
	return n, nil
}

func (f *fakeConn) Write(p []byte) (int, error)     { return f.out.Write(p) }
func (f *fakeConn) SetReadDeadline(time.Time) error { return nil }
func (f *fakeConn) SetDeadline(time.Time) error     { return nil }
func (f *fakeConn) Close() error                    { return nil }

func TestConnNext(t *testing.T) {
	big := bytes.Repeat([]byte("y"), 100<<10)
	var in bytes.Buffer
	in.Write(serverFrame(ws.OpText, true, []byte(`one`)))
	in.Write(serverFrame(ws.OpPing, true, []byte(`pp`)))
	in.Write(serverFrame(ws.OpText, false, []byte(`fr`)))
	in.Write(serverFrame(ws.OpPong, true, nil))
	in.Write(serverFrame(ws.OpContinuation, false, []byte(`ag`)))
	in.Write(serverFrame(ws.OpContinuation, true, []byte(`ment`)))
	in.Write(serverFrame(ws.OpText, true, big))
	in.Write(serverFrame(ws.OpText, false, big[:70<<10]))
	in.Write(serverFrame(ws.OpContinuation, true, big[70<<10:]))
	in.Write(serverFrame(ws.OpText, true, []byte("{\"id\":1}\n{}\n{\"push\":{}}")))
	in.Write(serverFrame(ws.OpClose, true, nil))
	for _, chunk := range []int{1, 7, 1 << 20} {
		t.Run("chunk "+strconv.Itoa(chunk), func(t *testing.T) {
			fc := &fakeConn{in: in.Bytes(), chunk: chunk}
			c := &Conn{nc: fc, br: bufio.NewReaderSize(fc, 4096), d: Centrifuge{}, mask: [4]byte{1, 2, 3, 4}}
			want := []string{"one", "fragment", string(big), string(big), `{"id":1}`, `{}`, `{"push":{}}`}
			for i, w := range want {
				got, err := c.Next()
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if string(got) != w {
					t.Fatalf("message %d = %q, want %q", i, short(string(got)), short(w))
				}
			}
			if _, err := c.Next(); err != ErrClosed {
				t.Fatalf("err = %v, want ErrClosed", err)
			}
			f, err := ws.ReadFrame(&fc.out)
			if err != nil || f.Header.OpCode != ws.OpPong || !f.Header.Masked {
				t.Fatalf("pong: %+v %v", f.Header, err)
			}
			ws.Cipher(f.Payload, f.Header.Mask, 0)
			if string(f.Payload) != "pp" {
				t.Fatalf("pong payload %q", f.Payload)
			}
		})
	}
}

func TestEventTime(t *testing.T) {
	if _, ok := EventTime([]byte(`{"t":12}`)); ok {
		t.Fatal("a small t is not a generator timestamp")
	}
	if v, ok := EventTime([]byte(`{"params":{"data":{"t":1000000000000123,"p":"x"}}}`)); !ok || v != 123 {
		t.Fatalf("got %d %v", v, ok)
	}
	if v, ok := FindUint([]byte(`{"result":{"delivered":17}}`), `"delivered":`); !ok || v != 17 {
		t.Fatalf("got %d %v", v, ok)
	}
}

func TestWindow(t *testing.T) {
	w := Window{Start: 10, End: 20}
	if w.In(9) || !w.In(10) || w.In(20) {
		t.Fatal("window bounds")
	}
	if ringSize(1) != 64 || ringSize(64) != 256 {
		t.Fatal("ringSize")
	}
	_ = math.MaxInt64
	_ = time.Second
}

func TestSetField(t *testing.T) {
	for _, width := range []int{1, 2, 3, 10, 16} {
		msg := make([]byte, width)
		f := field{mask: make([]byte, width)}
		for i := range width {
			f.pos = append(f.pos, i)
			f.mask[i] = byte(i * 7)
		}
		for _, v := range []uint64{0, 7, 42, 987, 1000000007, 1234567890123456} {
			want := strconv.FormatUint(v, 10)
			if len(want) > width {
				continue
			}
			for len(want) < width {
				want = "0" + want
			}
			setField(msg, &f, v)
			got := make([]byte, width)
			for i := range msg {
				got[i] = msg[i] ^ f.mask[i]
			}
			if string(got) != want {
				t.Fatalf("width %d value %d: got %q, want %q", width, v, got, want)
			}
		}
	}
}

// TestSendHorizon: after the pacer wakes the storm for the event at next,
// that event is always sent, also when the pacer returned up to half a
// Quantum early (the storm then used to send nothing and spin on the clock);
// events due within a Quantum of the clock go with it.
func TestSendHorizon(t *testing.T) {
	const next = int64(1_000_000)
	for _, c := range []struct {
		name      string
		now, lead int64
		want      int64
	}{
		{"woken half a quantum early", next - Quantum - Quantum/2, 0, next},
		{"woken early with a lead", next - 2*Quantum, Quantum / 2, next},
		{"woken on time", next - Quantum, 0, next},
		{"woken late", next, 10_000, next + 10_000 + Quantum},
	} {
		if got := sendHorizon(c.now, c.lead, next); got != c.want {
			t.Errorf("%s: horizon %d, want %d", c.name, got, c.want)
		}
		if got := sendHorizon(c.now, c.lead, next); got < next {
			t.Errorf("%s: the event at next is not sent", c.name)
		}
	}
}
