package test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testcert"
	"github.com/openengine/edge/loop"
)

// withTLS serves wss:// with a certificate made for the test; the harness's
// clients dial over TLS trusting it.
func withTLS(t *testing.T) func(*gwConfig) {
	cert := testcert.New(t, "edge-test")
	return func(c *gwConfig) {
		c.loop.TLS = cert.ServerConfig()
		c.clientTLS = cert.ClientConfig()
	}
}

// TestWSSGoldens: a TLS client handshakes (TLS 1.2 or later), upgrades, and
// the OECP goldens come back byte for byte over wss://.
func TestWSSGoldens(t *testing.T) {
	gw := startGateway(t, withTLS(t))
	c := dial(t, gw)
	tc, ok := c.conn.(*tls.Conn)
	if !ok {
		t.Fatalf("the harness dialled %T, want *tls.Conn", c.conn)
	}
	if v := tc.ConnectionState().Version; v < tls.VersionTLS12 {
		t.Fatalf("TLS version %#x, want 1.2 or later", v)
	}
	c.echo()
	runGoldens(t, gw)
}

// TestWSSRefusesTLS11: a client that offers at most TLS 1.1 gets no
// session, and the refusal is counted.
func TestWSSRefusesTLS11(t *testing.T) {
	cert := testcert.New(t, "edge-test")
	gw := startGateway(t, func(c *gwConfig) { c.loop.TLS = cert.ServerConfig() })
	conn := dialTCP(t, gw)
	cfg := cert.ClientConfig()
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	tc := tls.Client(conn, cfg)
	tc.SetDeadline(time.Now().Add(readTimeout))
	if err := tc.Handshake(); err == nil {
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
	poll.Until(t, pollTimeout, "the failed handshake counted", func() (bool, string) {
		n := rejected(gw, "tls_handshake")
		return n == 1, strconv.FormatUint(n, 10)
	})
}

// rejected is gw's count of refusals labelled label.
func rejected(gw *gateway, label string) uint64 {
	st := gw.srv.Stats(time.Second)
	for i := range st.Rejected {
		if loop.RejectReasonLabel(i) == label {
			return st.Rejected[i]
		}
	}
	return 0
}

// holdConn passes its first Write (the ClientHello) through and holds the
// next ones until flush: the client's Finished flight and what follows
// reach the server in one segment.
type holdConn struct {
	net.Conn
	writes int
	held   []byte
}

func (h *holdConn) Write(p []byte) (int, error) {
	h.writes++
	if h.writes == 1 {
		return h.Conn.Write(p)
	}
	h.held = append(h.held, p...)
	return len(p), nil
}

func (h *holdConn) flush() error {
	_, err := h.Conn.Write(h.held)
	h.held = nil
	return err
}

// TestWSSUpgradeWithFinished: a TLS 1.3 client's upgrade request that
// arrives together with its Finished is read by the handshake and held by
// the tls.Conn; the loop serves it when the connection opens, since nothing
// else will arrive until it is answered.
func TestWSSUpgradeWithFinished(t *testing.T) {
	cert := testcert.New(t, "edge-test")
	gw := startGateway(t, func(c *gwConfig) { c.loop.TLS = cert.ServerConfig() })
	raw, err := net.DialTimeout("tcp", gw.addr, readTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	hc := &holdConn{Conn: raw}
	cfg := cert.ClientConfig()
	cfg.MinVersion = tls.VersionTLS13
	tc := tls.Client(hc, cfg)
	tc.SetDeadline(time.Now().Add(readTimeout))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(tc, upgradeRequest(gw.addr, "/", "ZWRnZS1lMmUta2V5LTE2Yg==")); err != nil {
		t.Fatal(err)
	}
	if err := hc.flush(); err != nil {
		t.Fatal(err)
	}
	hc.writes = 0 // pass everything through from now on
	resp, err := http.ReadResponse(bufio.NewReader(tc), &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("no answer to the upgrade sent with Finished: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
}

// TestWSSLargeMessagesAndStream: messages of about 1 MB each way, tens of
// TLS records each, come back intact, and a subscription stream of 2,000
// events arrives whole and in order.
func TestWSSLargeMessagesAndStream(t *testing.T) {
	gw := startGateway(t, withTLS(t))
	c := dial(t, gw)
	for i, size := range []int{1000000, 70000, 1000000} {
		s := strings.Repeat(string(rune('a'+i)), size)
		req := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"edge/echo","params":{"s":"` + s + `"}}`
		c.sendText(req)
		c.expectText(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"result":{"s":"` + s + `"}}`)
	}
	const count, size = 2000, 1024
	c.sendText(`{"jsonrpc":"2.0","id":"t","method":"edge/ticks","params":{"count":` + strconv.Itoa(count) + `,"intervalMs":0,"size":` + strconv.Itoa(size) + `}}`)
	c.expectText(`{"jsonrpc":"2.0","id":"t","result":{"subscriptionId":"s1"}}`)
	data := strings.Repeat("x", size)
	for n := 1; n <= count; n++ {
		if got, want := c.readText(), tickEvent("s1", n, data); got != want {
			t.Fatalf("event %d: got %.200s, want %.200s", n, got, want)
		}
	}
	c.expectText(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"` + strconv.Itoa(count) + `"}}`)
	c.echo()
}

// stall opens a connection and sends a partial ClientHello: a handshake
// record header announcing 512 bytes, and 4 of them.
func stall(t *testing.T, gw *gateway) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", gw.addr, readTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte{22, 3, 1, 2, 0, 1, 0, 1, 252}); err != nil {
		t.Fatal(err)
	}
	return conn
}

// waitEOF reads conn until the server closes it and returns when it did.
func waitEOF(t *testing.T, conn net.Conn, within time.Duration) time.Time {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(within))
	var b [64]byte
	for {
		_, err := conn.Read(b[:])
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), isReset(err):
			return time.Now()
		default:
			t.Fatalf("waiting for the server to close: %v", err)
		}
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

// stillOpen reports whether the server has not closed conn: a short read
// times out.
func stillOpen(conn net.Conn) bool {
	conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var b [1]byte
	_, err := conn.Read(b[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestWSSSlowlorisFreesWorker: with a pool of 2 handshake workers, a
// client that stalls in its ClientHello holds one worker while another
// client handshakes and is served on the other; the stalled one is closed
// at --handshake-timeout, and its worker is free again: with a new stalled
// client holding one worker, a further client still gets the other.
func TestWSSSlowlorisFreesWorker(t *testing.T) {
	const timeout = time.Second
	tlsOpt := withTLS(t)
	gw := startGateway(t, tlsOpt, func(c *gwConfig) {
		c.loop.HandshakePool = 2
		c.loop.HandshakeTimeout = timeout
	})
	slow := stall(t, gw)
	start := time.Now()
	c := dial(t, gw) // served meanwhile
	c.echo()
	if !stillOpen(slow) {
		t.Fatal("the stalled client was closed before its handshake timeout")
	}
	closed := waitEOF(t, slow, 5*timeout)
	if took := closed.Sub(start); took < timeout-50*time.Millisecond || took > timeout+time.Second {
		t.Fatalf("the stalled client was closed after %s, want about %s", took, timeout)
	}
	slow2 := stall(t, gw)
	// The worker that served c returns to the pool just after enrolling it:
	// a bounded retry, each try well inside slow2's timeout.
	var served bool
	poll.Until(t, timeout/2, "a handshake beside a new stalled client", func() (bool, string) {
		conn, err := net.DialTimeout("tcp", gw.addr, timeout/4)
		if err != nil { // reset: the previous try's worker had not yet seen it leave
			return false, "dial: " + err.Error()
		}
		defer conn.Close()
		tc := tls.Client(conn, gw.clientTLS)
		tc.SetDeadline(time.Now().Add(timeout / 4))
		err = tc.Handshake()
		served = err == nil
		return served, "handshake: " + errString(err)
	})
	if !stillOpen(slow2) {
		t.Fatal("the second stalled client was closed early: the check above proved nothing")
	}
	poll.Until(t, pollTimeout, "the timeout counted", func() (bool, string) {
		n := rejected(gw, "handshake_timeout")
		return n >= 1, strconv.FormatUint(n, 10)
	})
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestWSSThousandHandshakes: 1,000 clients handshake at once against a pool
// of 4 workers. None hangs: each completes its handshake and upgrade or is
// closed, within the bound; the gateway accounts for every one (accepted,
// or refused: a full pool, a failed or late handshake); and the heap after they have gone is within
// a generous bound of the heap before.
func TestWSSThousandHandshakes(t *testing.T) {
	const clients = 1000
	gw := startGateway(t, withTLS(t), func(c *gwConfig) {
		c.loop.HandshakePool = 4
		c.loop.HandshakeTimeout = 5 * time.Second
	})
	heapBefore := heapInUse()
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		served, refused  int
		hung             []string
		bound            = 15 * time.Second
		start            = make(chan struct{})
		upgradeReqString = upgradeRequest(gw.addr, "/", "ZWRnZS1lMmUta2V5LTE2Yg==")
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ok, err := handshakeOnce(gw, upgradeReqString, bound)
			mu.Lock()
			defer mu.Unlock()
			var ne net.Error
			switch {
			case ok:
				served++
			case errors.As(err, &ne) && ne.Timeout():
				hung = append(hung, err.Error())
			default:
				refused++
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(hung) > 0 {
		t.Fatalf("%d of %d clients hung (no answer within %s): %s", len(hung), clients, bound, hung[0])
	}
	if served == 0 {
		t.Fatalf("no client was served (%d refused)", refused)
	}
	t.Logf("%d served, %d refused", served, refused)
	poll.Until(t, pollTimeout, "every connection accounted for", func() (bool, string) {
		st := gw.srv.Stats(time.Second)
		full, failed, late := rejected(gw, "handshake_pool_full"), rejected(gw, "tls_handshake"), rejected(gw, "handshake_timeout")
		acc := st.Accepted[0]
		return acc+full+failed+late == clients && acc >= uint64(served),
			fmt.Sprintf("accepted %d, pool full %d, failed %d, timed out %d", acc, full, failed, late)
	})
	poll.Until(t, pollTimeout, "the gateway to release the connections", func() (bool, string) {
		n := gw.srv.Stats(time.Second).Conns[0]
		return n == 0, strconv.Itoa(n) + " open"
	})
	const slack = 32 << 20
	heapAfter := heapInUse()
	if heapAfter > heapBefore+slack {
		t.Fatalf("heap in use %d MiB after, %d MiB before: more than %d MiB kept", heapAfter>>20, heapBefore>>20, slack>>20)
	}
}

// handshakeOnce dials gw, handshakes and upgrades within bound, and closes.
// It reports whether the upgrade was answered 101.
func handshakeOnce(gw *gateway, req string, bound time.Duration) (bool, error) {
	conn, err := net.DialTimeout("tcp", gw.addr, bound)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(bound))
	tc := tls.Client(conn, gw.clientTLS)
	if err := tc.Handshake(); err != nil {
		return false, err
	}
	if _, err := io.WriteString(tc, req); err != nil {
		return false, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), &http.Request{Method: http.MethodGet})
	if err != nil {
		return false, err
	}
	return resp.StatusCode == http.StatusSwitchingProtocols, nil
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestWSSProxyProtocol: behind a balancer that passes TLS through, the
// PROXY header comes before the ClientHello: the handshake worker reads it
// (split over many writes), the handshake and the upgrade follow, and
// edge/whoami reports the header's client; the per-address limit counts
// that client. A TLS connection without the header is closed unanswered
// and counted as proxy_header.
func TestWSSProxyProtocol(t *testing.T) {
	cert := testcert.New(t, "edge-test")
	gw := startGateway(t, func(c *gwConfig) {
		c.loop.TLS = cert.ServerConfig()
		c.loop.ProxyProtocol, c.loop.MaxConnsPerIP = true, 1
		c.loop.ProxyProtocolFrom = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	dial := func(src string) (*tls.Conn, error) {
		raw, err := net.DialTimeout("tcp", gw.addr, readTimeout)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { raw.Close() })
		raw.SetDeadline(time.Now().Add(readTimeout))
		hdr := proxyV1(netip.MustParseAddrPort(src))
		for i := range hdr {
			if _, err := raw.Write(hdr[i : i+1]); err != nil {
				return nil, err
			}
		}
		tc := tls.Client(raw, cert.ClientConfig())
		return tc, tc.Handshake()
	}
	upgrade := func(tc *tls.Conn) (*bufio.Reader, int) {
		if _, err := io.WriteString(tc, upgradeRequest(gw.addr, "/", "ZWRnZS1lMmUta2V5LTE2Yg==")); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		return br, resp.StatusCode
	}
	tc, err := dial("192.0.2.7:51000")
	if err != nil {
		t.Fatalf("handshake after a PROXY header: %v", err)
	}
	br, status := upgrade(tc)
	if status != 101 {
		t.Fatalf("status %d, want 101", status)
	}
	c := &client{t: t, conn: tc, br: br}
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/whoami","params":{}}`)
	got := parseResponse(t, c.readText())
	var who struct {
		Remote string `json:"remote"`
	}
	if err := json.Unmarshal(got.Result, &who); err != nil || who.Remote != "192.0.2.7:51000" {
		t.Fatalf("whoami %s (%v), want remote 192.0.2.7:51000", got.Result, err)
	}
	// The same client through the balancer again: over --max-conns-per-ip.
	tc2, err := dial("192.0.2.7:51001")
	if err != nil {
		t.Fatal(err)
	}
	if _, status := upgrade(tc2); status != 503 {
		t.Fatalf("second connection of 192.0.2.7: status %d, want 503", status)
	}

	// No PROXY header: a ClientHello first is not one.
	raw, err := net.DialTimeout("tcp", gw.addr, readTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	bare := tls.Client(raw, cert.ClientConfig())
	bare.SetDeadline(time.Now().Add(readTimeout))
	if err := bare.Handshake(); err == nil {
		t.Fatal("a TLS handshake without a PROXY header succeeded")
	}
	poll.Until(t, pollTimeout, "rejected{reason=proxy_header} counted", func() (bool, string) {
		st := gw.srv.Stats(readTimeout)
		for i := range loop.NumRejectReasons {
			if loop.RejectReasonLabel(i) == "proxy_header" {
				return st.Rejected[i] == 1, fmt.Sprintf("proxy_header %d", st.Rejected[i])
			}
		}
		return false, "no proxy_header reason"
	})
}
