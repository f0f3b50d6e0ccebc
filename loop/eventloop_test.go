package loop

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/rpc"
)

// TestTrimSparesReleasesUnusedBuffers: a sweep releases exactly the spare
// output buffers that no turn took since the previous sweep, so a busy loop
// keeps what its turns use and a quiet one ends up holding nothing.
func TestTrimSparesReleasesUnusedBuffers(t *testing.T) {
	l := &eventLoop{spareMax: DefaultSpareOutput}
	check := func(step string, held, bytes int) {
		t.Helper()
		if len(l.bufs) != held || l.spareBytes != bytes {
			t.Fatalf("%s: %d spares of %d bytes, want %d of %d", step, len(l.bufs), l.spareBytes, held, bytes)
		}
	}
	// A turn writing to three connections: three buffers, back as spares.
	bufs := [][]byte{l.getBuf(), l.getBuf(), l.getBuf()}
	for _, b := range bufs {
		l.putBuf(b)
	}
	check("after the first turn", 3, 3*minOutBuf)
	l.trimSpares() // they were made during this period: kept
	check("first sweep", 3, 3*minOutBuf)

	// Turns that write to one connection at a time use one spare.
	for range 5 {
		l.putBuf(l.getBuf())
	}
	l.trimSpares()
	check("after turns that needed one buffer", 1, minOutBuf)

	// A quiet period: nothing taken, everything released.
	l.trimSpares()
	check("after a quiet period", 0, 0)
	if l.bufs != nil {
		t.Fatal("a quiet loop still holds its spare slice")
	}

	// Spares past the byte budget are not kept at all.
	big := make([]byte, 0, maxSpareBuf+1)
	l.putBuf(big)
	check("an oversized buffer", 0, 0)

	// Nor past SpareOutputBytes: with room for two, the third is dropped.
	l.spareMax = 2 * minOutBuf
	bufs = [][]byte{l.getBuf(), l.getBuf(), l.getBuf()}
	for _, b := range bufs {
		l.putBuf(b)
	}
	check("a budget of two buffers", 2, 2*minOutBuf)
}

// ranHandler answers every call with null after reporting its params on the
// channel.
type ranHandler chan string

func (h ranHandler) Call(_ context.Context, _ string, params, dst []byte) ([]byte, error) {
	h <- string(params)
	return append(dst, "null"...), nil
}

// TestFlushSubmitsHeldCalls: calls that sessions dispatch are held by the
// loop's rpc.Turn until the end of the turn and handed to the pool together;
// a flush hands them over too, since the paths that read input outside a turn
// (a paused connection resumed by a sweep) end with a flush and no turn may
// follow. A loop that held them until its next turn would leave those calls
// unanswered on a quiet connection.
func TestFlushSubmitsHeldCalls(t *testing.T) {
	pool := backend.NewPool(16, time.Minute)
	defer pool.Close()
	ran := make(ranHandler, 3)
	srv, err := rpc.NewServer(rpc.Config{Handler: ran, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	l := &eventLoop{srv: &Server{rpc: srv}, turn: srv.NewTurn()}
	l.inTurn = true // no gnet loop to wake: completions wait in the queue
	s := srv.NewSession(rpc.WebSocket, &countSink{}, l)
	for i := range 3 {
		s.HandleMessage(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"edge/echo","params":{"i":%d}}`, i, i))
	}
	if len(ran) != 0 {
		t.Fatal("a call ran before the loop handed it over")
	}
	l.flush()
	seen := make(map[string]bool)
	for len(seen) < 3 {
		select {
		case p := <-ran:
			seen[p] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("only calls %v ran after the flush", seen)
		}
	}
}
