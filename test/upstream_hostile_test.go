package test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/internal/poll"
)

// flooder is a hostile NDJSON upstream on 127.0.0.1: on each connection it
// answers edge's probe and reads the first call edge forwards, then sends requests as
// fast as the socket takes them and never reads again, until it has sent
// max bytes or the connection fails. Its receive buffer is small, so that
// what edge writes to it backs up in edge at once.
type flooder struct {
	ln       net.Listener
	accepted atomic.Int64
	sent     atomic.Int64
}

func startFlooder(t *testing.T, max int64) *flooder {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return err
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &flooder{ln: ln}
	serveHostile(t, ln, &f.accepted, func(c net.Conn, _ int64) { f.flood(c, max) })
	return f
}

// serveHostile accepts the connections of ln until the test ends, each
// counted in accepted and served by serve (with its count) on its own
// goroutine; at the end ln and every connection are closed and the
// goroutines waited for.
func serveHostile(t *testing.T, ln net.Listener, accepted *atomic.Int64, serve func(c net.Conn, n int64)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			n := accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(c, n)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

func (f *flooder) flood(c net.Conn, max int64) {
	// edge's probe (answered, as a JSON-RPC server would), then the first
	// call.
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		if !bytes.Contains(line, []byte(`"edge.probe"`)) {
			break
		}
		if _, err := io.WriteString(c, probeAnswer); err != nil {
			return
		}
	}
	var b bytes.Buffer
	for id := 1; b.Len() < 64<<10; id++ {
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"please/answer","params":[]}`+"\n", id)
	}
	for n := int64(0); n < max; {
		k, err := c.Write(b.Bytes())
		n += int64(k)
		f.sent.Add(int64(k))
		if err != nil {
			return
		}
	}
}

// TestUpstreamFloodNeverRead is the regression test of issue 24 item 1: an
// upstream that sends requests and never reads grew edge's output to it
// without bound (each request is answered -32601 and the answers pile up
// in edge: RSS 92 MB -> 2.74 GB in 20 s, then out of memory). With
// --upstream-max-pending-bytes 1 MiB the connection's pending output stays
// within the cap plus one answer, the connection is closed (counted in
// Stats.SlowClosed), the call in flight on it ends UPSTREAM_UNAVAILABLE, it
// reconnects, and the other upstream keeps serving meanwhile.
func TestUpstreamFloodNeverRead(t *testing.T) {
	watchdog(t)
	const cap = 1 << 20
	good := startUpstreamEdge(t)
	bad := startFlooder(t, 64<<20) // 64 MiB of requests at most: ~85 MiB of answers
	cfg := failureConfig
	cfg.Conns = 1
	cfg.MaxPendingBytes = cap
	p := startProxy(t, cfg, []string{"good=" + good.ws, "bad=tcp://" + bad.ln.Addr().String()}, "edge/gate=bad")
	ups := p.set.Upstreams()
	badUp := ups[1]
	c := dial(t, p.gateway)
	c.sendText(gate("1", "never"))
	// The flooder reads the call and floods.
	poll.Until(t, 10*time.Second, "the flooded connection closed and redialled", func() (bool, string) {
		st := badUp.Stats()
		return st.SlowClosed >= 1 && bad.accepted.Load() >= 2,
			fmt.Sprintf("%d closed, %d accepted, %d bytes of requests sent, peak pending %d bytes, test process RSS %s",
				st.SlowClosed, bad.accepted.Load(), bad.sent.Load(), st.PendingPeak, vmRSS())
	})
	// The call ended when the connection was closed.
	c.expectText(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Upstream unavailable","data":{"code":"UPSTREAM_UNAVAILABLE"}}}`)
	waitUp(t, badUp, 1)
	c.echo() // the good upstream served throughout
	st := badUp.Stats()
	t.Logf("flooder sent %d bytes of requests; peak pending output %d bytes; %d closed; test process RSS %s",
		bad.sent.Load(), st.PendingPeak, st.SlowClosed, vmRSS())
	if st.PendingPeak > cap+4<<10 {
		t.Fatalf("peak pending output %d bytes, want at most the cap %d plus an answer", st.PendingPeak, cap)
	}
	if st.PendingPeak < cap {
		t.Fatalf("peak pending output %d bytes: the cap %d was never reached, so the test proves nothing", st.PendingPeak, cap)
	}
	if up, _ := ups[0].Connected(); up != 1 {
		t.Fatalf("the good upstream has %d connections up, want 1", up)
	}
}

// vmRSS is the test process's resident set size, for the log.
func vmRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return "?"
}

// TestUpstreamWSHugeFrameRedials is the regression test of issue 24 item
// 5's wedged WebSocket upstream, over real sockets: an upstream whose
// first frame's header claims 2^62 bytes had edge skip that many bytes of
// its input as the frame's payload, so the connection served nothing, the
// call on it waited for its timeout and it was never redialled. edge
// answers a close 1009, the call gets UPSTREAM_UNAVAILABLE, and edge
// redials.
func TestUpstreamWSHugeFrameRedials(t *testing.T) {
	watchdog(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	codes := make(chan ws.StatusCode, 4)
	serveHostile(t, ln, &accepted, func(c net.Conn, n int64) {
		if _, err := ws.Upgrade(c); err != nil || n > 1 {
			return // the second connection stays open, silent
		}
		// Once edge has forwarded a call: a text frame claiming
		// 2^62 bytes, and a few of them.
		if _, err := ws.ReadFrame(c); err != nil {
			codes <- 0
			return
		}
		c.Write([]byte{0x81, 127, 0x40, 0, 0, 0, 0, 0, 0, 0, '{', '"'})
		_ = c.SetReadDeadline(time.Now().Add(pollTimeout))
		h, err := ws.ReadHeader(c)
		if err != nil || h.OpCode != ws.OpClose || h.Length != 2 {
			codes <- 0
			return
		}
		p := make([]byte, 2)
		if _, err := io.ReadFull(c, p); err != nil {
			codes <- 0
			return
		}
		ws.Cipher(p, h.Mask, 0)
		codes <- ws.StatusCode(p[0])<<8 | ws.StatusCode(p[1])
	})
	cfg := failureConfig
	cfg.Conns = 1
	p := startProxy(t, cfg, []string{"e=ws://" + ln.Addr().String() + "/"})
	c := dial(t, p.gateway)
	c.sendText(gate("1", "never"))
	select {
	case code := <-codes:
		if code != ws.StatusMessageTooBig {
			t.Fatalf("the upstream got close code %d, want 1009", code)
		}
	case <-time.After(pollTimeout):
		t.Fatal("edge sent no close frame for the frame over the limit")
	}
	c.expectText(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Upstream unavailable","data":{"code":"UPSTREAM_UNAVAILABLE"}}}`)
	u := p.set.Upstreams()[0]
	poll.Until(t, pollTimeout, "the upstream redialled", func() (bool, string) {
		up, _ := u.Connected()
		return accepted.Load() >= 2 && up == 1, fmt.Sprintf("%d accepted, %d up", accepted.Load(), up)
	})
}
