package loop

import (
	"testing"
	"unsafe"

	"github.com/panjf2000/gnet/v2"
)

// pendingConn is a gnet.Conn whose only behaviour is its outbound backlog;
// any other method panics (nil embedded interface).
type pendingConn struct {
	gnet.Conn
	pending int
}

func (c *pendingConn) OutboundBuffered() int { return c.pending }

// TestSendChecksHardCapBeforeBuffering is the regression test of the hard
// cap checked only after buffering (hardening issue, item 9): conn.Send
// appended every answer of a turn and the cap was checked after the write,
// so 256 answers of 48 KiB grew a 12 MiB buffer against a 1 MiB cap. Now no
// answer that would take the connection's output over the hard cap is
// buffered: the connection is closed with 1008 instead (CONTRACT.md section
// 6), counting what gnet still holds for the socket.
func TestSendChecksHardCapBeforeBuffering(t *testing.T) {
	const hard = 1 << 20
	msg := make([]byte, 48<<10)
	for _, pending := range []int{0, hard / 2} {
		cfg := Config{OutboundSoftBytes: hard / 4, OutboundHardBytes: hard}.withDefaults()
		l := &eventLoop{srv: &Server{cfg: cfg}, spareMax: cfg.SpareOutputBytes}
		w := &conn{c: &pendingConn{pending: pending}, l: l, proto: protoWebSocket, state: stateOpen}
		w.sess = echo{w}
		most := 0
		for range 256 {
			w.Send(msg)
			most = max(most, len(w.out)+pending)
		}
		if most > hard {
			t.Errorf("gnet holding %d: output grew to %d bytes, hard cap %d", pending, most, hard)
		}
		if w.state != stateClosing || !w.hangup {
			t.Errorf("gnet holding %d: state %d hangup %v after 12 MiB of answers, want closing with 1008", pending, w.state, w.hangup)
		}
	}
}

// TestConnSize keeps conn at 224 bytes (issue 21): every idle connection
// holds one, and 224 is a size class of Go's allocator (the next is 240).
// It was 320: the identity, TLS layer, NDJSON line reader, rate bucket,
// half-close writer and write-stall fields moved to connExtra, the
// address counted per IP is remote's, and the pong's due time is
// deadline. A new field that not every idle connection needs belongs in
// connExtra, not here.
func TestConnSize(t *testing.T) {
	if got := unsafe.Sizeof(conn{}); got > 224 {
		t.Errorf("conn is %d bytes, want at most 224: put fields that only some connections use in connExtra", got)
	}
}
