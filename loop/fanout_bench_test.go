package loop

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// wsClient is a raw, upgraded WebSocket client socket that counts the text
// frames it reads.
type wsClient struct {
	fd     int
	buf    []byte // read, not yet parsed
	frames int    // text frames read
}

// maskedText is a client's masked text frame of msg (any length); the
// frame tests share it.
func maskedText(msg []byte) []byte {
	f := []byte{0x81}
	switch n := len(msg); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n <= 0xffff:
		f = append(f, 0x80|126, byte(n>>8), byte(n))
	default:
		f = append(f, 0x80|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	key := [4]byte{1, 2, 3, 4}
	f = append(f, key[:]...)
	for i, c := range msg {
		f = append(f, c^key[i%4])
	}
	return f
}

// dialWS connects and upgrades a client.
func dialWS(tb testing.TB, d *rawDialer) *wsClient {
	c := &wsClient{fd: d.dial(tb), buf: make([]byte, 0, 64<<10)}
	tb.Cleanup(func() { unix.Close(c.fd) })
	if _, err := unix.Write(c.fd, upgradeRequest()); err != nil {
		tb.Fatal(err)
	}
	for !bytes.Contains(c.buf, []byte("\r\n\r\n")) {
		c.fill(tb)
	}
	i := bytes.Index(c.buf, []byte("\r\n\r\n"))
	if !bytes.HasPrefix(c.buf, []byte("HTTP/1.1 101")) {
		tb.Fatalf("upgrade answered %q", c.buf[:i])
	}
	c.buf = append(c.buf[:0], c.buf[i+4:]...)
	return c
}

// fill reads once more (blocking).
func (c *wsClient) fill(tb testing.TB) {
	n, err := unix.Read(c.fd, c.buf[len(c.buf):cap(c.buf)])
	if err != nil || n == 0 {
		tb.Fatalf("read: %d, %v", n, err)
	}
	c.buf = c.buf[:len(c.buf)+n]
}

// await reads until the client has counted n frames in all.
func (c *wsClient) await(tb testing.TB, n int) {
	for {
		for len(c.buf) >= 2 {
			size, head := int(c.buf[1]&0x7f), 2
			if size == 126 {
				if len(c.buf) < 4 {
					break
				}
				size, head = int(c.buf[2])<<8|int(c.buf[3]), 4
			}
			if len(c.buf) < head+size {
				break
			}
			if c.buf[0] != 0x81 {
				tb.Fatalf("frame %#x, want a text frame", c.buf[0])
			}
			c.frames++
			c.buf = c.buf[:copy(c.buf, c.buf[head+size:])]
		}
		if c.frames >= n {
			return
		}
		c.fill(tb)
	}
}

// writeCalls is this process's write system calls so far (syscw of
// /proc/self/io: write, writev, pwrite..., sockets and eventfds included).
func writeCalls(tb testing.TB) int {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		tb.Skipf("no /proc/self/io: %v", err)
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("syscw: ")); ok {
			n, err := strconv.Atoi(string(v))
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no syscw in /proc/self/io")
	return 0
}

// BenchmarkFanoutWrites counts the server's write system calls per delivered
// event (not a timing): 1,000 subscribers of one topic on one event loop and
// a publisher that sends a burst of `burst` edge/publish requests in one
// write per op; every subscriber reads every event. Events that reach a
// connection in the same loop turn go out in one write: writes/delivery is
// about 1/burst. Counted over the process (/proc/self/io), less the
// publisher's own writes: the gnet loop's wake-ups are in it. Run with -cpu 1,
// the gateway's GOMAXPROCS in the bench suite.
func BenchmarkFanoutWrites(b *testing.B) {
	const subs = 1000
	for _, burst := range []int{1, 16} {
		b.Run(fmt.Sprintf("burst%d", burst), func(b *testing.B) {
			s := startLoopServer(b, Config{})
			d := newRawDialer(b, s)
			clients := make([]*wsClient, subs)
			for i := range clients {
				c := dialWS(b, d)
				if _, err := unix.Write(c.fd, maskedText([]byte(`{"jsonrpc":"2.0","id":1,"method":"edge/topic","params":{"name":"b"}}`))); err != nil {
					b.Fatal(err)
				}
				c.await(b, 1) // the subscription's response
				clients[i] = c
			}
			pub := dialWS(b, d)
			var burstMsg []byte
			for i := range burst {
				burstMsg = append(burstMsg, maskedText(fmt.Appendf(nil,
					`{"jsonrpc":"2.0","id":%d,"method":"edge/publish","params":{"name":"b","data":{"p":"0123456789abcdef0123456789abcdef"}}}`, i+1))...)
			}
			b.ReportAllocs()
			writes0, ops := writeCalls(b), 0
			for b.Loop() {
				ops++
				if _, err := unix.Write(pub.fd, burstMsg); err != nil {
					b.Fatal(err)
				}
				pub.await(b, ops*burst)
				for _, c := range clients {
					c.await(b, 1+ops*burst)
				}
			}
			b.StopTimer()
			deliveries := ops * burst * subs
			writes := writeCalls(b) - writes0 - ops // less the publisher's
			b.ReportMetric(float64(writes)/float64(deliveries), "writes/delivery")
			b.ReportMetric(float64(deliveries)/float64(writes), "events/write")
		})
	}
}
