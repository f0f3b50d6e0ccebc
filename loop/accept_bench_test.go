package loop

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/rpc"
)

// startLoopServer starts a Server on 127.0.0.1:0 with one event loop and the
// memory backend, stopped when tb ends.
func startLoopServer(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	pool := backend.NewPool(4096, time.Minute)
	tb.Cleanup(pool.Close)
	mem := backend.NewMemory()
	srv, err := rpc.NewServer(rpc.Config{Handler: mem, NonBlocking: mem.NonBlocking, Pool: pool,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Listen, cfg.Loops = "127.0.0.1:0", 1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, srv)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// rawDialer connects plain TCP sockets with system calls that allocate
// nothing, so that a benchmark's allocations are the server's.
type rawDialer struct{ sa unix.SockaddrInet4 }

func newRawDialer(tb testing.TB, s *Server) *rawDialer {
	ap := netip.MustParseAddrPort(s.Addr().String())
	return &rawDialer{sa: unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}}
}

func (d *rawDialer) dial(tb testing.TB) int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if err := unix.Connect(fd, &d.sa); err != nil {
		tb.Fatal(err)
	}
	return fd
}

// waitOpen spins until the server has opened n connections in all and holds
// open of them.
func waitConns(tb testing.TB, s *Server, accepted uint64, open int64) {
	deadline := time.Now().Add(5 * time.Second)
	for s.accepted[protoWebSocket-1].Load() < accepted || s.limits.open.Load() != open {
		if time.Now().After(deadline) {
			tb.Fatalf("server accepted %d (want %d), holds %d open (want %d)",
				s.accepted[protoWebSocket-1].Load(), accepted, s.limits.open.Load(), open)
		}
		runtime.Gosched()
	}
}

// upgradeRequest is a WebSocket upgrade request for the path /.
func upgradeRequest() []byte {
	return []byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
}

// echoFrame is a client's masked text frame holding an edge/echo request.
func echoFrame() []byte {
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"edge/echo","params":{"p":"0123456789ab"}}`)
	f := []byte{0x81, 0x80 | byte(len(msg)), 1, 2, 3, 4}
	for i, c := range msg {
		f = append(f, c^[4]byte{1, 2, 3, 4}[i%4])
	}
	return f
}

// BenchmarkAcceptClose is one plain connection's life on the server per op:
// the client connects, the server accepts it and opens it on its event loop,
// the client closes and the server closes its side. The client's system
// calls allocate nothing: allocs/op and B/op are the server's set-up and
// tear-down of a connection (before the upgrade).
func BenchmarkAcceptClose(b *testing.B) {
	s := startLoopServer(b, Config{})
	d := newRawDialer(b, s)
	var n uint64
	b.ReportAllocs()
	for b.Loop() {
		fd := d.dial(b)
		n++
		waitConns(b, s, n, 1)
		_ = unix.Close(fd)
		waitConns(b, s, n, 0)
	}
}

// BenchmarkChurnCycle is W6's cycle on the server per op: connect, upgrade,
// one edge/echo answered, close. The client writes the upgrade request and
// the masked request frame in one write and reads until the answer's frame
// has arrived; allocs/op and B/op are the server's (the client allocates
// nothing).
func BenchmarkChurnCycle(b *testing.B) {
	s := startLoopServer(b, Config{})
	d := newRawDialer(b, s)
	req := append(upgradeRequest(), echoFrame()...)
	want := []byte(`"result"`)
	buf := make([]byte, 4096)
	var n uint64
	b.ReportAllocs()
	for b.Loop() {
		fd := d.dial(b)
		n++
		if _, err := unix.Write(fd, req); err != nil {
			b.Fatal(err)
		}
		got := 0
		for !bytes.Contains(buf[:got], want) {
			m, err := unix.Read(fd, buf[got:])
			if err != nil || m == 0 {
				b.Fatalf("read after %q: %v", buf[:got], err)
			}
			got += m
		}
		_ = unix.Close(fd)
		waitConns(b, s, n, 0)
	}
}
