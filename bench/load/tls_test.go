package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"
)

// captureConn is the server's side of tlsSocketPair: while capturing, what
// crypto/tls writes is kept instead of sent, so that the test can deliver
// the records in pieces.
type captureConn struct {
	net.Conn
	mu      sync.Mutex
	capture bool         // guarded by mu
	buf     bytes.Buffer // guarded by mu
}

func (c *captureConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capture {
		return c.buf.Write(b)
	}
	return c.Conn.Write(b)
}

// take turns capturing on and returns what was captured so far.
func (c *captureConn) take() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.capture = true
	b := bytes.Clone(c.buf.Bytes())
	c.buf.Reset()
	return b
}

// tlsSocketPair returns a wss:// Conn over one end of a Unix stream socket
// pair, its TLS handshake done (no upgrade: the frames follow directly), the
// server's *tls.Conn on the other end, that end's capturing conn, and its
// descriptor.
func tlsSocketPair(t *testing.T, readBuf int) (*Conn, *tls.Conn, *captureConn, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fileConn := func(fd int, name string) net.Conn {
		f := os.NewFile(uintptr(fd), name)
		nc, err := net.FileConn(f) // dups the descriptor
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	peerNC := fileConn(fds[1], "server")
	nc := fileConn(fds[0], "client")
	peerFD := -1
	rc, _ := peerNC.(*net.UnixConn).SyscallConn()
	rc.Control(func(f uintptr) { peerFD = int(f) })
	cc := &captureConn{Conn: peerNC}
	srv := tls.Server(cc, serverTLS(t))
	hs := make(chan error, 1)
	go func() { hs <- srv.Handshake() }()
	sock := &rawSock{Conn: nc, fd: -1, sw: sockWriter{fd: -1}}
	tc := tls.Client(sock, ClientTLS())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-hs; err != nil {
		t.Fatal(err)
	}
	src := &connReader{nc: tc, sock: sock, fd: -1}
	c := &Conn{nc: tc, tcp: nc, sock: sock, src: src, br: bufio.NewReaderSize(src, readBuf), d: JSONRPC{},
		mask: [4]byte{1, 2, 3, 4}, sw: sockWriter{fd: -1}}
	return c, srv, cc, peerFD
}

// TestConnAttachedTLS feeds an attached wss:// Conn TLS records in pieces,
// as a socket delivers them: crypto/tls must keep a partial record across
// errWouldBlock and resume; the socket must not be read once a read came
// back short until the loop calls readable; a write while attached must
// reach the server decrypted.
func TestConnAttachedTLS(t *testing.T) {
	watchdog(t, 30*time.Second)
	c, srv, cc, peer := tlsSocketPair(t, 4096)
	if _, err := c.attach(); err != nil {
		t.Fatal(err)
	}
	// The server's post-handshake messages (TLS 1.3 session tickets), if
	// any, were sent before capturing: read them.
	c.readable()
	if msg, err := c.Next(); err != errWouldBlock {
		t.Fatalf("before any record: %q, %v", msg, err)
	}
	cc.take()
	record := func(p []byte) []byte {
		if _, err := srv.Write(serverFrame(ws.OpText, true, p)); err != nil {
			t.Fatal(err)
		}
		return cc.take()
	}
	r1 := record([]byte(`small`))
	big := bytes.Repeat([]byte("b"), 3000)
	r2 := record(big)
	r3 := record([]byte(`third`))
	r4 := record([]byte(`fourth`))
	runSteps(t, c, peer, []step{
		{send: r1[:3]},                    // not read: the socket was drained
		{readable: true},                  // half a record header
		{send: r1[3 : len(r1)-1]},         // not read
		{readable: true},                  // all but one byte of the record
		{send: r1[len(r1)-1:], want: ""},  // still not read
		{readable: true, want: "small"},   // the record completes
		{send: r2[:1000], readable: true}, // part of a larger record
		{send: r2[1000:], readable: true, want: string(big)},
		{send: append(r3, r4...), readable: true, want: "third"},
	})
	// Both records came in one read: the second is buffered already, so
	// the loop writes what the first released only after it.
	if !c.Ready() {
		t.Fatal("the record read with the previous one is not buffered")
	}
	runSteps(t, c, peer, []step{{want: "fourth"}, {readable: true}})
	if err := c.WriteText([]byte(`from the client`)); err != nil {
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := ws.ReadFrame(srv)
	if err != nil || f.Header.OpCode != ws.OpText || !f.Header.Masked {
		t.Fatalf("frame %+v, %v", f.Header, err)
	}
	ws.Cipher(f.Payload, f.Header.Mask, 0)
	if string(f.Payload) != "from the client" {
		t.Fatalf("payload %q", f.Payload)
	}
}

// TestConnBacklogTLS writes to an attached wss:// Conn whose peer does not
// read: the writes never block and never fail inside crypto/tls, the
// encrypted bytes the socket does not take are kept up to backlogLimit (a
// write beyond it is refused whole, before it is encrypted), and once the
// peer reads, flushBacklog and detach deliver every record in order: the
// server decrypts exactly what was accepted.
func TestConnBacklogTLS(t *testing.T) {
	watchdog(t, 30*time.Second)
	c, srv, _, _ := tlsSocketPair(t, 4096)
	srv.SetReadDeadline(time.Now().Add(20 * time.Second))
	checkBacklog(t, c, srv)
}

// TestDialTLSFullHandshakes: every wss:// connection makes a full
// handshake (TLS 1.3 against Go's defaults), even against a server that
// issues session tickets.
func TestDialTLSFullHandshakes(t *testing.T) {
	srv := start(t, &testServer{tls: serverTLS(t)})
	for i := range 3 {
		c, err := Dial(testCtx(t), srv.target(JSONRPC{}), 0)
		if err != nil {
			t.Fatal(err)
		}
		st, ok := c.TLSState()
		c.Close()
		if !ok || st.Version != tls.VersionTLS13 || st.DidResume || !st.HandshakeComplete {
			t.Fatalf("conn %d: ok %v, version %x, resumed %v", i, ok, st.Version, st.DidResume)
		}
	}
}
