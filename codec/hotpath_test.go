package codec

import (
	"testing"

	"github.com/gobwas/ws"
)

// BenchmarkHotPath measures what the loop does per unary request on its own
// goroutine: decode one masked text frame, classify the envelope, encode the
// response and frame it. It must not allocate.
func BenchmarkHotPath(b *testing.B) {
	req := []byte(`{"jsonrpc":"2.0","id":17,"method":"edge/echo","params":{"x":"0123456789abcdef"}}`)
	src := frame{fin: true, op: ws.OpText, payload: req, mask: [4]byte{1, 2, 3, 4}}.bytes()
	in := make([]byte, len(src))
	out := make([]byte, 0, 512)
	msg := make([]byte, 0, 256)
	var r Reader
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	for b.Loop() {
		copy(in, src)
		ev, n, err := r.Next(in)
		if err != nil || ev.Kind != EventText || n != len(in) {
			b.Fatal(ev.Kind, n, err)
		}
		env := Classify(ev.Payload, true)
		if env.Kind != KindTracked {
			b.Fatal(env.Kind)
		}
		msg = AppendResult(msg[:0], env.ID, env.Params)
		out = AppendFrame(out[:0], ws.OpText, msg)
	}
}
