package test

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSlowReaderGetsEverything checks that outbound backpressure (CONTRACT.md
// section 6) loses nothing and costs no more memory than the hard cap: a
// client that reads slowly but steadily gets every event of a paced
// subscription (edge/ticks with intervalMs 0, sections 5 and 8) in order,
// then subscription/closed "done", although the events come to at least 48 times the
// connection's 256 KiB hard cap and to more than twice what the socket
// buffers can hold: the producer runs only as fast as the client reads. The
// connection keeps serving afterwards.
//
// The producer's lead over the reader (events the gateway took from it less
// events read) shows both: it never exceeds what the socket buffers and the
// hard cap hold, so the gateway held no more than its cap; and it once
// exceeded the soft cap, so the reader was slower than the producer and the
// test did not pass by a reader that kept up.
//
// Catches a producer that does not wait for room (Emit instead of EmitWait:
// SLOW_CONSUMER once the connection's budget is full), a gateway that writes
// events past the soft cap (its backlog reaches the hard cap and the
// connection does not survive it), and events lost or reordered across the
// many pauses of a slow reader. With the default 16 MiB hard cap and 5 MiB of
// events, the Emit producer passed two runs of three.
func TestSlowReaderGetsEverything(t *testing.T) {
	const (
		softCap = 64 << 10
		hardCap = 256 << 10
		size    = 4 << 10 // bytes of data per event
		perTick = 8       // events the client reads per tick of its pace
	)
	// Well beyond the hard cap, and beyond all the kernel can buffer (the
	// server's send buffer, at most tcp_wmem's maximum, and the client's
	// receive buffer, set small) twice over: a gateway that did not pace
	// the producer would have to hold most of it.
	count := max(48*hardCap, 2*kernelSendBufMax()+hardCap) / size
	cb := &countingBackend{}
	gw := startGateway(t, withCounting(cb), func(c *gwConfig) {
		c.loop.OutboundSoftBytes = softCap
		c.loop.OutboundHardBytes = hardCap
	})
	c := dialRcvBuf(t, gw, 4096)
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":` + strconv.Itoa(count) + `,"intervalMs":0,"size":` + strconv.Itoa(size) + `}}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)

	data := strings.Repeat("x", size)
	pace := time.NewTicker(2 * time.Millisecond) // the reader's pace, not a wait for an effect
	defer pace.Stop()
	lead := int64(0) // most events the producer was ahead of the reader
	for n := 1; n <= count; n++ {
		if n%perTick == 1 {
			<-pace.C
		}
		lead = max(lead, cb.events.Load()-int64(n-1))
		h, p, err := c.readFrame(readTimeout)
		if err != nil {
			t.Fatalf("after %d of %d events: %v", n-1, count, err)
		}
		if got, want := string(p), tickEvent("s1", n, data); got != want {
			t.Fatalf("event %d of %d: got %.200s", n, count, describe(h.OpCode, p))
		}
	}
	c.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"` + strconv.Itoa(count) + `"}}`)
	t.Logf("%d events (%d KiB); the producer was at most %d events (%d KiB) ahead of the reader", count, count*size>>10, lead, lead*size>>10)
	// The slack covers what the client holds (its receive buffer, 8 KiB as
	// the kernel doubles it, and bufio's 4 KiB) and frame overhead many
	// times over; a gateway without pacing would hold megabytes.
	const slack = hardCap
	if bound := kernelSendBufMax() + hardCap + slack; int(lead)*size > bound {
		t.Errorf("the producer ran %d KiB ahead of the reader, more than the socket buffers and the hard cap hold (%d KiB): the gateway buffered beyond its cap", int(lead)*size>>10, bound>>10)
	}
	if int(lead)*size <= softCap {
		t.Fatalf("the producer was never more than %d events ahead of the reader: the reader kept up, so nothing was paced", lead)
	}
	c.echo()
	c.expectSettled(0, 0)
}
