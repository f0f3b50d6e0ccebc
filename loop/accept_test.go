package loop

import (
	"bytes"
	"context"
	"net"
	"os"
	"regexp"
	"runtime"
	"testing"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/openengine/edge/rpc"
)

// TestGnetFDVersion is the tripwire of enrollFD (gnetfd.go): its
// go:linkname declarations match gnet v2.9.7's newStreamConn and
// eventloop.register0, which no compiler checks. When go.mod moves gnet,
// this fails until someone has compared them with the new version and
// updated gnetFDVersion.
func TestGnetFDVersion(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/panjf2000/gnet/v2 (\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod does not require gnet v2")
	}
	if string(m[1]) != gnetFDVersion {
		t.Fatalf("go.mod requires gnet %s; enrollFD was checked against %s: compare newStreamConn and register0 with the new version", m[1], gnetFDVersion)
	}
}

// onLoop runs f on l's event loop and waits for it.
func onLoop(t *testing.T, l *eventLoop, f func()) {
	t.Helper()
	done := make(chan struct{})
	if err := l.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		defer close(done)
		f()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	<-done
}

// TestAcceptedSocket checks what the raw accept (accept.go) gives an
// accepted connection: TCP_NODELAY, inherited from the listener (Go's
// AcceptTCP set it on each socket), non-blocking, close-on-exec, and the
// peer's address from the sockaddr accept4 returned.
func TestAcceptedSocket(t *testing.T) {
	s := startLoopServer(t, Config{})
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitConns(t, s, 1, 1)
	l := s.numbered[0]
	var (
		nodelay, flags, fdflags int
		peer                    string
	)
	onLoop(t, l, func() {
		w := l.conns[0]
		nodelay, _ = unix.GetsockoptInt(w.c.Fd(), unix.IPPROTO_TCP, unix.TCP_NODELAY)
		flags, _ = unix.FcntlInt(uintptr(w.c.Fd()), unix.F_GETFL, 0)
		fdflags, _ = unix.FcntlInt(uintptr(w.c.Fd()), unix.F_GETFD, 0)
		peer = w.remote.String()
	})
	if nodelay == 0 {
		t.Error("accepted socket without TCP_NODELAY")
	}
	if flags&unix.O_NONBLOCK == 0 || fdflags&unix.FD_CLOEXEC == 0 {
		t.Errorf("accepted socket: file status flags %#x, descriptor flags %#x, want O_NONBLOCK and FD_CLOEXEC", flags, fdflags)
	}
	if peer != c.LocalAddr().String() {
		t.Errorf("remote address %s, want the client's %s", peer, c.LocalAddr())
	}
}

// maxAcceptAllocs bounds the server's allocations for one plain
// connection's accept, open and close. Through net.TCPListener.AcceptTCP
// and Client.EnrollContext they were 29 (BenchmarkAcceptClose: 1.5 KiB);
// the raw accept made 10, and 6 once a burst went to its loop as a pooled
// task (acceptBatch) and RawConn.Read's callback was made once: gnet's
// connection and its callback, gnet's closure and queue node for the task,
// edge's conn, and the error gnet closes the connection with.
const maxAcceptAllocs = 8

// TestAcceptAllocations is the regression test of issue 21 item 1: every
// accepted connection went through the net package (net.TCPConn, its
// netFD, two net.TCPAddr, sockaddr conversions, a dup'ed descriptor) before
// gnet took it, 29 allocations per connection, some of them (the
// addresses) kept for the connection's life. It counts the process's
// allocations over 200 connections that connect and close, from client
// sockets made with system calls that allocate nothing.
func TestAcceptAllocations(t *testing.T) {
	s := startLoopServer(t, Config{})
	d := newRawDialer(t, s)
	cycle := func(n uint64) {
		fd := d.dial(t)
		waitConns(t, s, n, 1)
		_ = unix.Close(fd)
		waitConns(t, s, n, 0)
	}
	cycle(1) // first use: the loop's buffers and maps
	const conns = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range conns {
		cycle(uint64(2 + i))
	}
	runtime.ReadMemStats(&after)
	per := float64(after.Mallocs-before.Mallocs) / conns
	t.Logf("%.1f allocations per connection", per)
	if per > maxAcceptAllocs {
		t.Errorf("%.1f allocations per accepted connection, want at most %d", per, maxAcceptAllocs)
	}
}

// TestIdleConnHasNoSession is the regression test of issue 21 item 1's
// session: an upgraded connection made its rpc.Session (328 bytes, with
// the id table) at the upgrade, so every idle connection held one. Now it
// is made with the first message: after the upgrade the connection has
// none, after one request it has one. The idle connection has no
// connExtra either (a change that made one for every connection, in
// conn.open, fails here).
func TestIdleConnHasNoSession(t *testing.T) {
	s := startLoopServer(t, Config{})
	d := newRawDialer(t, s)
	fd := d.dial(t)
	defer unix.Close(fd)
	req := upgradeRequest()
	readUntil := func(what string, want []byte) {
		t.Helper()
		var got []byte
		buf := make([]byte, 4096)
		for !bytes.Contains(got, want) {
			n, err := unix.Read(fd, buf)
			if err != nil || n == 0 {
				t.Fatalf("%s: read after %q: %v", what, got, err)
			}
			got = append(got, buf[:n]...)
		}
	}
	if _, err := unix.Write(fd, req); err != nil {
		t.Fatal(err)
	}
	readUntil("upgrade", []byte("\r\n\r\n"))
	l := s.numbered[0]
	sessionOf := func() (sess session) {
		onLoop(t, l, func() { sess = l.conns[0].sess })
		return sess
	}
	if sess, ok := sessionOf().(*rpc.Session); ok {
		t.Fatalf("idle connection after its upgrade: session %T, want none yet", sess)
	}
	// Nor a connExtra: a plain WebSocket connection without a token, a
	// rate limit or pending output has no use for one.
	var x *connExtra
	onLoop(t, l, func() { x = l.conns[0].x })
	if x != nil {
		t.Fatalf("idle connection after its upgrade: connExtra %+v, want none", *x)
	}
	if _, err := unix.Write(fd, echoFrame()); err != nil {
		t.Fatal(err)
	}
	readUntil("echo", []byte(`"result"`))
	if sess, ok := sessionOf().(*rpc.Session); !ok || sess == nil {
		t.Fatalf("after a request: session %T, want an *rpc.Session", sessionOf())
	}
}
