package loop

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testcert"
)

// TestTLSAcceptorDoesNotWaitForLoop: while the only event loop is busy (a
// hook holds it in the OnOpen of a first wss:// socket), the acceptor goes
// on accepting: the sockets that follow are taken from the listen backlog,
// where no deadline runs, and their --handshake-silent-timeout and
// --handshake-timeout count from then. An acceptor that waited for each
// registration on the loop left them in the backlog for as long as the loop
// was busy: under CPU load, 1,000 wss clients at once waited there past
// 15 s (TestWSSThousandHandshakes) although the server promises an answer
// or a close within --handshake-timeout.
func TestTLSAcceptorDoesNotWaitForLoop(t *testing.T) {
	const clients = 4
	cert := testcert.New(t, "edge-test")
	var accepted atomic.Int32
	opening := make(chan struct{}, clients)
	hold := make(chan struct{})
	testHookTLSAccepted = func() { accepted.Add(1) }
	testHookTLSOpen = func() {
		opening <- struct{}{}
		<-hold
	}
	s, err := New(Config{
		Echo:   true,
		Listen: "127.0.0.1:0",
		Loops:  1,
		TLS:    cert.ServerConfig(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	var release sync.Once
	defer func() {
		release.Do(func() { close(hold) })
		_ = s.Close(context.Background())
		testHookTLSAccepted, testHookTLSOpen = nil, nil
	}()
	for range clients {
		c, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	select {
	case <-opening: // the loop is held in the first socket's OnOpen
	case <-time.After(10 * time.Second):
		t.Fatal("the loop never opened the first socket")
	}
	poll.Until(t, 5*time.Second, "the acceptor to accept every socket while the loop is busy", func() (bool, string) {
		n := accepted.Load()
		return n == clients, strconv.Itoa(int(n)) + " of " + strconv.Itoa(clients) + " accepted"
	})
	release.Do(func() { close(hold) })
	for i := 1; i < clients; i++ { // and the loop opens the others
		select {
		case <-opening:
		case <-time.After(10 * time.Second):
			t.Fatalf("the loop opened %d of %d sockets", i, clients)
		}
	}
}
