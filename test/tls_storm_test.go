package test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/openengine/edge/internal/poll"
)

// wssEcho dials gw over wss:// with Go's crypto/tls (gobwas/ws's dialer),
// upgrades, and makes one edge/echo call, all within bound.
func wssEcho(gw *gateway, n int, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	d := ws.Dialer{TLSConfig: gw.clientTLS}
	conn, _, _, err := d.Dial(ctx, "wss://"+gw.addr+"/")
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(bound))
	req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"edge/echo","params":{"n":%d}}`, n, n)
	if err := wsutil.WriteClientText(conn, []byte(req)); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got, err := wsutil.ReadServerText(conn)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"n":%d}}`, n, n); string(got) != want {
		return fmt.Errorf("answer %s, want %s", got, want)
	}
	return nil
}

// wssClients runs n wssEcho clients at once and returns the errors of the
// ones that failed.
func wssClients(gw *gateway, n int, bound time.Duration) []string {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []string
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := wssEcho(gw, i+1, bound); err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// TestWSSIdleSocketsHoldNoWorker is the regression test of the handshake
// starvation of issue 24 item 2: 16 TCP sockets that connect and send
// nothing, as many as the handshake pool has workers, then 20 real wss
// clients. A socket that sent no ClientHello waits on an event loop and
// holds no worker, so every client completes its handshake, upgrade and an
// edge/echo while the idle sockets are still connected. Before the fix the
// idle sockets held all 16 workers for the whole --handshake-timeout and
// each client was reset at once (pool full): 0 of 20 served.
func TestWSSIdleSocketsHoldNoWorker(t *testing.T) {
	const idle, clients, pool = 16, 20, 16
	gw := startGateway(t, withTLS(t), func(c *gwConfig) {
		c.loop.HandshakePool = pool
		c.loop.HandshakeTimeout = 10 * time.Second
	})
	socks := make([]net.Conn, idle)
	for i := range socks {
		conn, err := net.DialTimeout("tcp", gw.addr, readTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		socks[i] = conn
	}
	errs := wssClients(gw, clients, readTimeout)
	t.Logf("%d of %d wss clients served beside %d idle sockets", clients-len(errs), clients, idle)
	if len(errs) > 0 {
		t.Fatalf("%d of %d wss clients failed beside %d idle sockets; first: %s", len(errs), clients, idle, errs[0])
	}
	// The idle sockets were still connected all along: the check proved
	// something only if the server had not dropped them yet.
	for i, conn := range socks {
		if !stillOpen(conn) {
			t.Fatalf("idle socket %d was closed before the clients were served", i)
		}
	}
}

// TestWSSIdleSocketClosedAtSilentTimeout: a socket that sends nothing is
// closed at --handshake-silent-timeout, well before --handshake-timeout,
// and counted as a handshake timeout.
func TestWSSIdleSocketClosedAtSilentTimeout(t *testing.T) {
	const silent = 300 * time.Millisecond
	gw := startGateway(t, withTLS(t), func(c *gwConfig) {
		c.loop.HandshakeTimeout = 10 * time.Second
		c.loop.HandshakeSilentTimeout = silent
	})
	conn := dialTCPMaybe(t, gw)
	if conn == nil {
		t.Fatal("dial failed")
	}
	start := time.Now()
	closed := waitEOF(t, conn, readTimeout)
	if took := closed.Sub(start); took < silent-50*time.Millisecond || took > 3*time.Second {
		t.Fatalf("the silent socket was closed after %s, want about %s", took, silent)
	}
	if n := rejected(gw, "handshake_timeout"); n != 1 {
		t.Fatalf("handshake_timeout %d, want 1", n)
	}
}

// TestWSSStartedHandshakeGetsFullTimeout: a client that sent part of its
// ClientHello is not held to --handshake-silent-timeout: it is closed at
// --handshake-timeout, counted handshake_timeout.
func TestWSSStartedHandshakeGetsFullTimeout(t *testing.T) {
	const silent, timeout = 200 * time.Millisecond, 1500 * time.Millisecond
	gw := startGateway(t, withTLS(t), func(c *gwConfig) {
		c.loop.HandshakeTimeout = timeout
		c.loop.HandshakeSilentTimeout = silent
	})
	start := time.Now()
	slow := stall(t, gw)
	closed := waitEOF(t, slow, readTimeout)
	if took := closed.Sub(start); took < timeout-50*time.Millisecond || took > timeout+2*time.Second {
		t.Fatalf("the stalled client was closed after %s, want about %s (not the silent %s)", took, timeout, silent)
	}
	poll.Until(t, pollTimeout, "the timeout counted", func() (bool, string) {
		n := rejected(gw, "handshake_timeout")
		return n == 1, strconv.FormatUint(n, 10)
	})
}

// TestWSSHandshakeStormQueues is the regression test of the reconnect storm
// of issue 24 item 2: 32 real clients dial at once against a pool of 2
// handshake workers. The ones that find every worker busy wait in the
// bounded queue (--handshake-queue) instead of being reset: all 32 are
// served. Before the fix most of them were reset at once (pool full).
func TestWSSHandshakeStormQueues(t *testing.T) {
	const clients = 32
	gw := startGateway(t, withTLS(t), func(c *gwConfig) { c.loop.HandshakePool = 2 })
	errs := wssClients(gw, clients, 3*readTimeout)
	t.Logf("%d of %d wss clients served by 2 handshake workers", clients-len(errs), clients)
	if len(errs) > 0 {
		resets := 0
		for _, e := range errs {
			if strings.Contains(e, "reset") || strings.Contains(e, "EOF") {
				resets++
			}
		}
		t.Fatalf("%d of %d clients failed (%d reset or EOF); first: %s", len(errs), clients, resets, errs[0])
	}
	if n := rejected(gw, "handshake_pool_full"); n != 0 {
		t.Fatalf("handshake_pool_full %d, want 0", n)
	}
}

// TestWSSHandshakeQueueBounded: with 1 worker and a queue of 1, a third
// client whose ClientHello arrives while a stalled handshake holds the
// worker and a second client waits in the queue is closed at once and
// counted handshake_pool_full; once the stalled one leaves, the queued one
// is served.
func TestWSSHandshakeQueueBounded(t *testing.T) {
	const timeout = 2 * time.Second
	gw := startGateway(t, withTLS(t), func(c *gwConfig) {
		c.loop.HandshakePool = 1
		c.loop.HandshakeQueue = 1
		c.loop.HandshakeTimeout = timeout
	})
	slow := stall(t, gw) // holds the one worker until it leaves
	// The stalled hello reaches the worker asynchronously: were the next
	// client's first, it would take the worker and finish, the stalled one
	// would hold it from the queue, and the third would wait there for the
	// stalled one's handshake timeout and then succeed.
	poll.Until(t, pollTimeout, "the stalled handshake on the worker", func() (bool, string) {
		r, q := gw.srv.TLSHandshakes()
		return r == 1 && q == 0, fmt.Sprintf("%d running, %d queued", r, q)
	})
	queued := make(chan error, 1)
	go func() { queued <- wssEcho(gw, 1, 2*timeout) }()
	// The queued client's ClientHello reaches the loop asynchronously: a
	// bounded poll on the queue's length before the third dials.
	waitQueued(t, gw, 1)
	third := dialTCPMaybe(t, gw)
	if third == nil {
		t.Fatal("dial failed")
	}
	tc := tls.Client(third, gw.clientTLS)
	tc.SetDeadline(time.Now().Add(readTimeout))
	if err := tc.Handshake(); err == nil {
		t.Fatal("a handshake over the queue's bound succeeded")
	}
	if n := rejected(gw, "handshake_pool_full"); n != 1 {
		t.Fatalf("handshake_pool_full %d, want 1", n)
	}
	slow.Close() // its worker takes the queued handshake
	if err := <-queued; err != nil {
		t.Fatalf("the queued client: %v", err)
	}
}

// waitQueued polls until n TLS handshakes wait for a worker.
func waitQueued(t *testing.T, gw *gateway, n int) {
	t.Helper()
	poll.Until(t, pollTimeout, fmt.Sprintf("%d handshakes queued", n), func() (bool, string) {
		_, q := gw.srv.TLSHandshakes()
		return q == n, strconv.Itoa(q)
	})
}
