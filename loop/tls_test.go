package loop

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"testing"

	"github.com/openengine/edge/internal/testcert"
)

// tlsPair handshakes a client and a server tls.Conn over a loopback TCP
// connection, each over a tlsSock, then puts both tlsSocks in loop mode:
// from then on the records travel only through their src and out.
func tlsPair(tb testing.TB) (cli, srv *tls.Conn, cs, ss *tlsSock) {
	tb.Helper()
	cert := testcert.New(tb, "bench")
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		accepted <- c
	}()
	cc, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	sc := <-accepted
	tb.Cleanup(func() { cc.Close(); sc.Close() })
	cs, ss = &tlsSock{nc: cc}, &tlsSock{nc: sc}
	cli, srv = tls.Client(cs, cert.ClientConfig()), tls.Server(ss, cert.ServerConfig())
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		tb.Fatal(err)
	}
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	cs.nc, ss.nc = nil, nil
	return cli, srv, cs, ss
}

// move hands the ciphertext from's tls.Conn wrote to to's tls.Conn, in
// buf's storage.
func move(from, to *tlsSock, buf []byte) {
	to.src = append(buf[:0], from.out...)
	from.out = from.out[:0]
}

// TestTLSSockResumesPartialRecords: a tls.Conn over a tlsSock in loop mode
// decrypts records fed to it a few bytes at a time: a read that runs out of
// ciphertext mid-record returns errWouldBlock and leaves the connection
// usable, and the record completes on a later read.
func TestTLSSockResumesPartialRecords(t *testing.T) {
	cli, srv, cs, ss := tlsPair(t)
	msg := bytes.Repeat([]byte("0123456789"), 5000) // several records
	if _, err := cli.Write(msg); err != nil {
		t.Fatal(err)
	}
	wire := append([]byte(nil), cs.out...)
	cs.out = cs.out[:0]
	var got []byte
	buf := make([]byte, 4096)
	for off := 0; off < len(wire); off += 7 {
		ss.src = wire[off:min(off+7, len(wire))]
		for {
			n, err := srv.Read(buf)
			got = append(got, buf[:n]...)
			if errors.Is(err, errWouldBlock) {
				break
			}
			if err != nil {
				t.Fatalf("read at %d of %d ciphertext bytes: %v", off, len(wire), err)
			}
		}
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("got %d bytes, want the %d sent", len(got), len(msg))
	}
	// And back: the server's writes become ciphertext in its out.
	if _, err := srv.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	move(ss, cs, nil)
	n, err := cli.Read(buf)
	if err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("client read %q %v, want pong", buf[:n], err)
	}
}

// BenchmarkTLSRecordPath measures the loop's record path per message of
// 16 bytes (a small WebSocket frame): the client encrypts it, the server's
// tls.Conn decrypts it from a tlsSock, encrypts an answer of the same size
// into the tlsSock, and the client decrypts that. The allocations are
// crypto/tls's own: readFromUntil allocates an atLeastReader per call.
func BenchmarkTLSRecordPath(b *testing.B) {
	cli, srv, cs, ss := tlsPair(b)
	msg := []byte("0123456789abcdef")
	buf := make([]byte, 64<<10)
	wire := make([]byte, 0, 64<<10)
	b.ReportAllocs()
	b.SetBytes(int64(2 * len(msg)))
	for b.Loop() {
		_, _ = cli.Write(msg)
		move(cs, ss, wire)
		n, err := srv.Read(buf)
		if err != nil || n != len(msg) {
			b.Fatalf("server read %d %v", n, err)
		}
		_, _ = srv.Write(buf[:n])
		move(ss, cs, wire)
		if n, err = cli.Read(buf); err != nil || n != len(msg) {
			b.Fatalf("client read %d %v", n, err)
		}
	}
}
