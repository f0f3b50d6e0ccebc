package test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/internal/poll"
)

// End-to-end tests of outbound backpressure (CONTRACT.md sections 5 and 6):
// a slow subscription consumer, and a client that pipelines requests without
// reading. Caps are small so that each episode takes seconds, not minutes.
const (
	bpSoftCap = 64 << 10 // OutboundSoftBytes
	bpHardCap = 1 << 20  // OutboundHardBytes
)

// TestSlowConsumerClosedOthersUnaffected: a client with a small socket
// receive buffer subscribes to edge/ticks (1 KiB every millisecond) and never
// reads. The socket buffers fill, then the soft cap (the server stops reading
// and holds events), then the 64-event subscription buffer: the subscription
// is closed SLOW_CONSUMER and its producer returns. The connection is not
// closed: with the events held back its backlog stays near the soft cap, far
// from the hard cap, and the test ends long before the write-stall timeout.
//
// Meanwhile another client's edge/echo calls keep their latency (p99 of the
// calls made during the episode and of 200 more while the slow connection
// sits paused below 50 ms: a generous bound for a shared 2-core machine),
// and the gateway's heap stays bounded (see heapBound).
//
// Once the slow client reads, it gets its response, events 1..k in order,
// then subscription/closed SLOW_CONSUMER whose lastDeliveredCursor is the
// cursor of event k, the last one handed to the socket; then the connection
// resumes and serves requests.
func TestSlowConsumerClosedOthersUnaffected(t *testing.T) {
	const bufferEvents, eventSize = 64, 1024
	cb := &countingBackend{}
	gw := startGateway(t, withCounting(cb), func(c *gwConfig) {
		c.loop.OutboundSoftBytes = bpSoftCap
		c.loop.OutboundHardBytes = bpHardCap
		c.rpc.SubscriptionBuffer = bufferEvents
	})
	fast := dial(t, gw)
	fast.echo()
	// Warm up what allocates once per process (the JSON codec's tables) so
	// that the heap measurement sees only the episode.
	fast.sendText(`{"jsonrpc":"2.0","id":"warm","method":"edge/ticks","params":{"count":1,"intervalMs":0,"size":8}}`)
	fast.expectText(`{"jsonrpc":"2.0","id":"warm","result":{"subscriptionId":"s1"}}`)
	fast.expectText(tickEvent("s1", 1, "xxxxxxxx"))
	fast.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"1"}}`)
	heapBefore := heapInuse()

	slow := dialRcvBuf(t, gw, 4096)
	slow.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":1000000,"intervalMs":1,"size":` + strconv.Itoa(eventSize) + `}}`)
	start := time.Now()

	// Sequential echo calls on the other connection, paced every 2 ms, for
	// the whole episode and 200 more once the producer has returned.
	var lat []time.Duration
	pace := time.NewTicker(2 * time.Millisecond)
	defer pace.Stop()
	after, episode := 0, time.Duration(0)
	for after < 200 {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the slow consumer's producer did not return within 20s")
		}
		<-pace.C
		t0 := time.Now()
		fast.echo()
		lat = append(lat, time.Since(t0))
		if cb.returned.Load() > 1 { // the warm-up's producer returned before its "done"

			if after == 0 {
				episode = time.Since(start)
			}
			after++
		}
	}
	heapAfter := heapInuse()
	slices.Sort(lat)
	p50, p99, worst := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	t.Logf("producer returned after %v; %d echo calls: p50 %v, p99 %v, max %v", episode, len(lat), p50, p99, worst)
	if p99 > 50*time.Millisecond {
		t.Errorf("echo p99 %v during the slow-consumer episode, want < 50ms", p99)
	}
	// heapBound: the gateway may hold for this connection at most the hard
	// cap of pending output (beyond it the connection is closed) plus a full
	// subscription buffer (64 events of about 1.1 KiB); 1 MiB more covers
	// the runtime's and the test's own noise. Without the soft cap and the
	// subscription buffer the backlog grows by about 1 MB per second of the
	// episode (and the hard cap would close the connection).
	heapBound := int64(bpHardCap + bufferEvents*(eventSize+128) + 1<<20)
	growth := int64(heapAfter) - int64(heapBefore)
	t.Logf("gateway heap in use: before %d KiB, after %d KiB, growth %d KiB (bound %d KiB)", heapBefore>>10, heapAfter>>10, growth>>10, heapBound>>10)
	if growth > heapBound {
		t.Errorf("heap grew by %d bytes, want at most %d", growth, heapBound)
	}

	// Now read everything the slow client was sent.
	slow.expectText(`{"jsonrpc":"2.0","id":1,"result":{"subscriptionId":"s1"}}`)
	data := strings.Repeat("x", eventSize)
	n := 0
	for {
		msg := slow.readText()
		if strings.HasPrefix(msg, `{"jsonrpc":"2.0","method":"subscription/closed"`) {
			want := `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"SLOW_CONSUMER","lastDeliveredCursor":"` + strconv.Itoa(n) + `"}}`
			if msg != want {
				t.Fatalf("after %d events: got %s, want %s", n, msg, want)
			}
			break
		}
		if want := tickEvent("s1", n+1, data); msg != want {
			t.Fatalf("after %d events: got %.200s, want %.200s", n, msg, want)
		}
		n++
	}
	t.Logf("slow consumer received %d events (%d KiB) before SLOW_CONSUMER", n, n*(eventSize+80)>>10)
	if n == 0 {
		t.Fatalf("no event delivered before SLOW_CONSUMER")
	}
	slow.echo()
	slow.expectSettled(0, 0)
	fast.expectSettled(0, 0)
}

// TestPipelinedRequestsPausedThenRecover: a client with a small receive
// buffer pipelines 32 KiB edge/echo requests, about three times what the
// socket buffers on both ends can absorb (read from the kernel's tcp_wmem),
// and does not read. The server must stop reading it once the backlog
// passes the soft cap: the number of requests that reached the backend
// stops growing below the number sent, while another client is served. The
// hard cap (64 MiB) is above the volume of every answer together, so closing
// is impossible by construction. When the client reads, every answer
// arrives (in any order), and the connection keeps serving.
//
// Catches a server that keeps reading (and buffering answers) whatever the
// backlog, and one that loses or duplicates answers across the pause.
func TestPipelinedRequestsPausedThenRecover(t *testing.T) {
	const size = 32 << 10
	total := 3*kernelSendBufMax() + 2<<20
	n := total / size
	cb := &countingBackend{}
	gw := startGateway(t, withCounting(cb), func(c *gwConfig) {
		c.loop.OutboundSoftBytes = bpSoftCap
		c.loop.OutboundHardBytes = 64 << 20
		c.rpc.MaxConnTasks = 1024
	})
	if total >= 64<<20 {
		t.Skipf("socket buffers of %d bytes need more than the 64 MiB hard cap", total/3)
	}
	other := dial(t, gw)
	c := dialRcvBuf(t, gw, 4096)
	reqs, want := pipelinedEchoes(n, size)
	written := make(chan error, 1)
	go func() {
		// Blocks while the server does not read: that is the backpressure.
		c.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, err := c.conn.Write(reqs)
		written <- err
	}()

	// Bounded poll until the count of requests that reached the backend has
	// not moved for quiet (200 ms) while the other client is served.
	last, since := int64(-1), time.Now()
	poll.Until(t, 10*time.Second, "the requests reaching the backend to stop growing", func() (bool, string) {
		other.echo()
		got := cb.echoes.Load() - int64(other.seq)
		if got >= int64(n) {
			t.Fatalf("the server read all %d requests (%d MiB of answers) without pausing", n, total>>20)
		}
		if got != last {
			last, since = got, time.Now()
		}
		return time.Since(since) >= quiet, fmt.Sprintf("%d of %d, still growing", got, n)
	})
	t.Logf("paused after %d of %d requests of %d KiB", last, n, size>>10)

	c.expectTexts(want...)
	if err := <-written; err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := cb.echoes.Load() - int64(other.seq); got != int64(n) {
		t.Fatalf("%d requests reached the backend, want %d", got, n)
	}
	c.echo()
	c.expectSettled(0, 0)
}

// TestPipelinedRequestsOverHardCapClosed: the client pipelines 256 edge/echo
// requests of 48 KiB without reading; the backend holds them until all have
// arrived, then answers them together: 12 MiB of answers, far more than the
// socket buffers (a few MiB) and the 1 MiB hard cap together, so however the
// writes interleave the backlog passes the hard cap and the server closes the
// connection (1008 "slow consumer", a close frame the client may not see
// since it is queued behind a backlog the server stops flushing). The client
// reads answers and then the end of the connection; another client is
// served throughout, and every slot is freed.
//
// Catches a server without a hard cap (everything is buffered, delivered,
// and the connection stays open: the read times out) and one that closes the
// wrong connection or blocks its loop.
func TestPipelinedRequestsOverHardCapClosed(t *testing.T) {
	const n, size = 256, 48 << 10 // 12 MiB of answers
	if n*size < kernelSendBufMax()+4*bpHardCap {
		t.Skipf("socket buffers of %d bytes absorb too much for this test", kernelSendBufMax())
	}
	cb := &countingBackend{hold: make(chan struct{})}
	gw := startGateway(t, withCounting(cb), func(c *gwConfig) {
		c.loop.OutboundSoftBytes = bpSoftCap
		c.loop.OutboundHardBytes = bpHardCap
	})
	released := false
	release := func() {
		if !released {
			released = true
			close(cb.hold)
		}
	}
	t.Cleanup(release) // before the gateway stops
	other := dial(t, gw)
	c := dialRcvBuf(t, gw, 4096)
	reqs, _ := pipelinedEchoes(n, size)
	c.conn.SetWriteDeadline(time.Now().Add(readTimeout))
	if _, err := c.conn.Write(reqs); err != nil {
		t.Fatalf("write: %v", err)
	}
	poll.Until(t, pollTimeout, fmt.Sprintf("all %d requests held in the backend", n), func() (bool, string) {
		got := cb.held.Load()
		return got == n, fmt.Sprintf("%d held", got)
	})
	release()

	// The other client is served while the answers pile up.
	other.echo()
	got := 0
	for {
		h, p, err := c.readFrame(readTimeout)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("after %d answers: %v, want the connection closed", got, err)
			}
			break
		}
		if h.OpCode == ws.OpClose {
			if code := binary.BigEndian.Uint16(p); code != uint16(ws.StatusPolicyViolation) || string(p[2:]) != "slow consumer" {
				t.Fatalf("closed with %s, want 1008 slow consumer", describe(h.OpCode, p))
			}
			t.Logf("close frame 1008 received")
			continue
		}
		if h.OpCode != ws.OpText {
			t.Fatalf("got %s", describe(h.OpCode, p))
		}
		got++
	}
	// How many answers arrive depends on how much of the backlog the server
	// still flushes while closing and the client reads meanwhile; that the
	// connection ends at all is what the hard cap guarantees.
	t.Logf("%d of %d answers arrived before the connection ended", got, n)
	other.echo()
	other.expectSettled(0, 0)
	gw.waitTasks(0)
}

// pipelinedEchoes returns n edge/echo request frames with params of about
// size bytes, ids 0..n-1, and the answers they get.
func pipelinedEchoes(n, size int) ([]byte, []string) {
	pad := strings.Repeat("y", size)
	var reqs []byte
	var want []string
	for i := range n {
		id := strconv.Itoa(i)
		params := `{"i":` + id + `,"pad":"` + pad + `"}`
		reqs = append(reqs, textFrame(`{"jsonrpc":"2.0","id":`+id+`,"method":"edge/echo","params":`+params+`}`)...)
		want = append(want, `{"jsonrpc":"2.0","id":`+id+`,"result":`+params+`}`)
	}
	return reqs, want
}

// kernelSendBufMax is the most a TCP socket's send buffer may grow to
// (net.ipv4.tcp_wmem max), 4 MiB if unknown.
func kernelSendBufMax() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if v, err := strconv.Atoi(f[2]); err == nil {
				return v
			}
		}
	}
	return 4 << 20
}

// heapInuse returns the heap in use after two full collections (the second
// empties the sync.Pool victim caches).
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
