package loop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/internal/testcert"
)

// wssPeer is a wss:// client of a test server: its TLS connection and a
// reader over it.
type wssPeer struct {
	c  *tls.Conn
	br *bufio.Reader
}

// dialWSS connects to s over TLS and upgrades.
func dialWSS(t *testing.T, s *Server, cfg *tls.Config) *wssPeer {
	t.Helper()
	c, err := tls.Dial("tcp", s.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(upgradeRequest()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return &wssPeer{c: c, br: br}
}

// echo sends a text message of n bytes and reads the server's echo of it
// (discarded as it arrives).
func (p *wssPeer) echo(t *testing.T, frame []byte, n int) {
	t.Helper()
	if _, err := p.c.Write(frame); err != nil {
		t.Fatal(err)
	}
	h, err := ws.ReadHeader(p.br)
	if err != nil || h.OpCode != ws.OpText || h.Length != int64(n) {
		t.Fatalf("echo: %+v %v, want a text frame of %d bytes", h, err, n)
	}
	if _, err := io.CopyN(io.Discard, p.br, h.Length); err != nil {
		t.Fatal(err)
	}
}

// startEcho starts an echo server (Config.Echo) with one loop on a free
// port, closed at the end of the test.
func startEcho(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Echo, cfg.Listen, cfg.Loops = true, "127.0.0.1:0", 1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestWSSMemoryAfterLargeMessage is the regression test of issue 24 item
// 4's wss memory: a wss:// connection kept about 1.1 MiB after one message
// of 1 MB (the ciphertext buffer of its answer, which the tlsSock kept for
// the next), so that N connections that each once sent a large message
// held N MiB for their life. It counts the live heap of the process (server
// and clients) after N connections exchanged a small message each, and
// again after each echoed 1 MB: the growth per connection stays under
// 128 KiB. What remains (about 85 KiB) is crypto/tls's own record buffers
// (rawInput, outBuf: a full record each way, as the package doc of tls.go
// says), on both ends, since the clients live in the same process.
func TestWSSMemoryAfterLargeMessage(t *testing.T) {
	const (
		conns = 16
		large = 1 << 20
	)
	cert := testcert.New(t, "edge-test")
	s := startEcho(t, Config{
		TLS:              cert.ServerConfig(),
		MaxMessageBytes:  2 << 20,
		SpareOutputBytes: 64 << 10, // the loop's shared spares out of the count
	})
	small, big := maskedText(bytes.Repeat([]byte("x"), 100)), maskedText(bytes.Repeat([]byte("x"), large))
	peers := make([]*wssPeer, conns)
	for i := range peers {
		peers[i] = dialWSS(t, s, cert.ClientConfig())
		peers[i].echo(t, small, 100)
	}
	before := liveHeap()
	for _, p := range peers {
		p.echo(t, big, large)
		p.echo(t, small, 100)
	}
	after := liveHeap()
	per := (int64(after) - int64(before)) / conns
	t.Logf("live heap %d -> %d bytes: %d bytes more per connection after a 1 MiB message each", before, after, per)
	if per > 128<<10 {
		t.Fatalf("each connection holds %d bytes more after one 1 MiB message, want under 128 KiB", per)
	}
	runtime.KeepAlive(big)
}
