package load

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"
)

// socketPair returns a Conn over one end of a Unix stream socket pair (the
// same short-read semantics as TCP) with a read buffer of readBuf bytes, and
// the other end's descriptor (blocking), which plays the server.
func socketPair(t *testing.T, readBuf int) (*Conn, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "client")
	nc, err := net.FileConn(f) // dups the descriptor
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); unix.Close(fds[1]) })
	src := &connReader{nc: nc, fd: -1}
	c := &Conn{nc: nc, tcp: nc, src: src, br: bufio.NewReaderSize(src, readBuf), d: JSONRPC{}, mask: [4]byte{1, 2, 3, 4}}
	return c, fds[1]
}

// fdReader reads a descriptor the test keeps owning (an os.File would close
// it when collected).
type fdReader int

func (f fdReader) Read(p []byte) (int, error) { return unix.Read(int(f), p) }

func writeAll(t *testing.T, fd int, b []byte) {
	t.Helper()
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
}

// TestConnAttached feeds an attached Conn frames in pieces, as a socket
// delivers them, and checks what Next makes of each step: a message when
// one is whole, errWouldBlock otherwise, and no read of the socket once it
// came back short until the loop calls readable.
func TestConnAttached(t *testing.T) {
	c, peer := socketPair(t, 64) // bufio's smallest: 200 B messages take the big-frame path
	if _, err := c.attach(); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("b"), 200)
	small := serverFrame(ws.OpText, true, []byte(`small`))
	bigFrame := serverFrame(ws.OpText, true, big)
	ping := serverFrame(ws.OpPing, true, []byte(`pp`))
	frag := append(serverFrame(ws.OpText, false, []byte(`fr`)), serverFrame(ws.OpContinuation, true, []byte(`ag`))...)
	runSteps(t, c, peer, []step{
		{readable: true},  // nothing yet: one empty read
		{send: small[:3]}, // arrives, but the socket is drained: not read
		{readable: true},  // read: half a frame
		{send: small[3:]}, // not read until readable
		{readable: true, want: "small"},
		{readable: true},
		{send: bigFrame[:40], readable: true},
		{send: bigFrame[40:150], readable: true},
		{send: bigFrame[150:], readable: true, want: string(big)},
		{send: append(append(append([]byte(nil), ping...), frag...), small...), readable: true, want: "frag"},
		{want: "small"}, // already buffered: no readable needed
		{},
	})
	// The ping was answered with a masked pong carrying its payload.
	if err := c.detach(time.Second); err != nil {
		t.Fatal(err)
	}
	pong, err := ws.ReadFrame(fdReader(peer))
	if err != nil || pong.Header.OpCode != ws.OpPong || !pong.Header.Masked {
		t.Fatalf("pong %+v, %v", pong.Header, err)
	}
	ws.Cipher(pong.Payload, pong.Header.Mask, 0)
	if string(pong.Payload) != "pp" {
		t.Fatalf("pong payload %q", pong.Payload)
	}
	// Detached, a close frame ends Next as before.
	writeAll(t, peer, serverFrame(ws.OpClose, true, nil))
	if _, err := c.Next(); err != ErrClosed {
		t.Fatalf("after detach: %v, want ErrClosed", err)
	}
}

// step is one step of runSteps.
type step struct {
	send     []byte // written by the peer first
	readable bool   // the loop saw the socket readable
	want     string // the message Next returns; "" for errWouldBlock
}

// runSteps runs steps on an attached Conn whose peer's descriptor is peer.
func runSteps(t *testing.T, c *Conn, peer int, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.send != nil {
			writeAll(t, peer, s.send)
		}
		if s.readable {
			c.readable()
		}
		msg, err := c.Next()
		switch {
		case s.want == "" && err != errWouldBlock:
			t.Fatalf("step %d: got %q, %v; want errWouldBlock", i, short(string(msg)), err)
		case s.want != "" && (err != nil || string(msg) != s.want):
			t.Fatalf("step %d: got %q, %v; want %q", i, short(string(msg)), err, short(s.want))
		}
	}
}

// TestConnAttachedEOF: a socket closed by the peer ends Next with an error
// that is not errWouldBlock.
func TestConnAttachedEOF(t *testing.T) {
	c, peer := socketPair(t, 4096)
	if _, err := c.attach(); err != nil {
		t.Fatal(err)
	}
	unix.Shutdown(peer, unix.SHUT_WR)
	c.readable()
	if _, err := c.Next(); err == nil || err == errWouldBlock {
		t.Fatalf("err = %v, want EOF", err)
	}
}

// TestConnBacklog writes to an attached Conn whose peer does not read: the
// writes never block, the bytes the socket does not take are kept up to
// backlogLimit (a write beyond it is refused whole), and once the peer
// reads, flushBacklog and detach deliver everything in order.
func TestConnBacklog(t *testing.T) {
	watchdog(t, 30*time.Second)
	c, peer := socketPair(t, 4096)
	checkBacklog(t, c, fdReader(peer))
}

// checkBacklog attaches c, fills its backlog (fillBacklog), then has the
// peer read (through peer) while c flushes what its socket takes and
// detaches: the peer must read exactly what c accepted, in order.
func checkBacklog(t *testing.T, c *Conn, peer io.Reader) {
	t.Helper()
	fd, err := c.attach()
	if err != nil {
		t.Fatal(err)
	}
	want := fillBacklog(t, c)
	got := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 64<<10)
		for b.Len() < len(want) {
			n, err := peer.Read(buf)
			if n > 0 {
				b.Write(buf[:n])
			}
			if err != nil || n <= 0 {
				break
			}
		}
		got <- b.Bytes()
	}()
	flushDetach(t, c, fd)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, want %d in order", len(b), len(want))
	}
}

// fillBacklog writes 1000-byte messages to an attached Conn whose peer does
// not read until the Conn refuses one (errBacklog), and returns what it
// accepted.
func fillBacklog(t *testing.T, c *Conn) []byte {
	t.Helper()
	var want bytes.Buffer
	msg := make([]byte, 1000)
	for i := 0; ; i++ {
		for j := range msg {
			msg[j] = byte(i + j)
		}
		err := c.Write(msg)
		if errors.Is(err, errBacklog) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		want.Write(msg)
		if i > 10*backlogLimit/len(msg) {
			t.Fatal("no backlog limit")
		}
	}
	if !c.backlogged() {
		t.Fatal("refused a write without a backlog")
	}
	return want.Bytes()
}

// flushDetach flushes what the socket fd of an attached Conn takes as it
// becomes writable (while the peer reads), then hands the rest to detach.
func flushDetach(t *testing.T, c *Conn, fd int) {
	t.Helper()
	for range 3 {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, 5000); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		if _, err := c.flushBacklog(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.detach(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
