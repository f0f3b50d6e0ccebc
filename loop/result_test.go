package loop

import (
	"bytes"
	"strings"
	"testing"

	"github.com/openengine/edge/codec"
)

// TestSendResultAsSend: SendResult writes the same bytes as Send of the
// response AppendResult encodes, on both bindings and for every frame
// length encoding (7-bit, 16-bit and 64-bit), and refuses what would take
// the output over the hard cap the same way (closing, 1008).
func TestSendResultAsSend(t *testing.T) {
	const hard = 1 << 20
	results := []struct {
		name   string
		id     []byte
		result []byte
	}{
		{"short", []byte(`1`), []byte(`{"a":1}`)},
		{"null id and result", nil, nil},
		{"16-bit length", []byte(`"req-7"`), []byte(`"` + strings.Repeat("x", 300) + `"`)},
		{"64-bit length", []byte(`123456789`), []byte(`"` + strings.Repeat("y", 70000) + `"`)},
		{"over the hard cap", []byte(`2`), []byte(`"` + strings.Repeat("z", hard) + `"`)},
	}
	for _, p := range []proto{protoWebSocket, protoNDJSON} {
		for _, r := range results {
			t.Run(r.name, func(t *testing.T) {
				cfg := Config{OutboundSoftBytes: hard / 4, OutboundHardBytes: hard}.withDefaults()
				mk := func() *conn {
					l := &eventLoop{srv: &Server{cfg: cfg}, spareMax: cfg.SpareOutputBytes}
					w := &conn{c: &pendingConn{}, l: l, proto: p, state: stateOpen}
					w.sess = echo{w}
					w.Send([]byte(`{"before":1}`)) // a turn with output already
					return w
				}
				want, got := mk(), mk()
				want.Send(codec.AppendResult(nil, r.id, r.result))
				got.SendResult(r.id, r.result)
				if !bytes.Equal(got.out, want.out) {
					t.Fatalf("proto %d: SendResult wrote %d bytes %.80q..., Send %d bytes %.80q...", p, len(got.out), got.out, len(want.out), want.out)
				}
				if over := len(r.result) > hard; over != (got.state == stateClosing) {
					t.Fatalf("proto %d: state %v for a result of %d bytes, hard cap %d", p, got.state, len(r.result), hard)
				}
				if got.state != want.state || got.hangup != want.hangup || got.dirty != want.dirty {
					t.Fatalf("proto %d: state %v hangup %v dirty %v, Send's %v %v %v", p, got.state, got.hangup, got.dirty, want.state, want.hangup, want.dirty)
				}
			})
		}
	}
}
