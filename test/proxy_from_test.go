package test

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testcert"
	"github.com/openengine/edge/loop"
)

// TestProxyProtocolUntrustedPeer: with --proxy-protocol, a PROXY header is
// trusted only from --proxy-protocol-from (CONTRACT.md section 11.5): a
// connection from another peer, here 127.0.0.3 with a well-formed header
// naming a client it chose, is closed unanswered (ws:// and wss://: no TLS
// handshake either) and counted rejected{reason="proxy_untrusted"}, while the
// balancer's (127.0.0.1) connections are served with the header's address.
// On the old code the header was trusted from any peer: the upgrade from
// 127.0.0.3 got 101 and edge/whoami would report the forged address.
func TestProxyProtocolUntrustedPeer(t *testing.T) {
	cert := testcert.New(t, "edge-test")
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) {
			gw := startGateway(t, func(c *gwConfig) {
				c.loop.ProxyProtocol = true
				c.loop.ProxyProtocolFrom = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
				if tlsOn {
					c.loop.TLS = cert.ServerConfig()
				}
			})
			forged := proxyV1(netip.MustParseAddrPort("192.0.2.66:4000"))
			conn := dialFrom(t, gw, "127.0.0.3", nil)
			conn.SetDeadline(time.Now().Add(readTimeout))
			// The writes may fail once the gateway has closed: what
			// matters is that nothing comes back.
			_, _ = conn.Write(forged)
			_, _ = io.WriteString(conn, upgradeRequest(gw.addr, "/", "ZWRnZS1lMmUta2V5LTE2Yg=="))
			n, err := conn.Read(make([]byte, 1))
			if n != 0 || !(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
				t.Fatalf("a PROXY header from an untrusted peer: read %d bytes, %v; want the connection closed unanswered", n, err)
			}
			poll.Until(t, pollTimeout, "rejected{reason=proxy_untrusted} counted", func() (bool, string) {
				st := gw.srv.Stats(readTimeout)
				for i := range loop.NumRejectReasons {
					if loop.RejectReasonLabel(i) == "proxy_untrusted" {
						return st.Rejected[i] == 1, fmt.Sprint(st.Rejected[i])
					}
				}
				return false, "no proxy_untrusted reason"
			})
			if tlsOn {
				return // the balancer's own connections over TLS: TestWSSProxyProtocol
			}
			status, err := tryUpgrade(gw, proxyV1(netip.MustParseAddrPort("192.0.2.7:51000")), nil)
			if status != 101 {
				t.Fatalf("the balancer's connection: %d %v, want 101", status, err)
			}
		})
	}
}
