package load

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"

	"github.com/gobwas/ws"
)

// ClientTLS is the generator's wss:// client configuration: TLS 1.2 and
// later with Go's default suites and key exchanges, no certificate
// verification (the suite's servers use a self-signed certificate made for
// the run), and no session resumption, so that every connection makes a full
// handshake: no session cache (TLS 1.3 PSKs) and no TLS 1.2 session tickets.
// Records are always up to 16 KiB (no dynamic record sizing: the first
// 128 KiB of a connection are not cut into ~1 KiB records, so that a run's
// first requests cost the server what the later ones do).
func ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:                  tls.VersionTLS12,
		InsecureSkipVerify:          true, // the run's self-signed certificate
		SessionTicketsDisabled:      true,
		ClientSessionCache:          nil,
		DynamicRecordSizingDisabled: true,
	}
}

// dialTLS connects to addr, makes the TLS handshake with cfg and upgrades
// to WebSocket at path, within dialTimeout. It returns the *tls.Conn, the
// rawSock below it, and the bytes read past the upgrade response (br, or
// nil), as ws.Dialer.Dial does for ws://.
func dialTLS(ctx context.Context, addr, path string, cfg *tls.Config) (net.Conn, *rawSock, *bufio.Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var d net.Dialer
	tcp, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, nil, err
	}
	sock := &rawSock{Conn: tcp, fd: -1, sw: sockWriter{fd: -1}}
	tc := tls.Client(sock, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		tcp.Close()
		return nil, nil, nil, fmt.Errorf("tls handshake: %w", err)
	}
	dl, _ := ctx.Deadline()
	tcp.SetDeadline(dl)
	br, _, err := ws.Dialer{}.Upgrade(tc, &url.URL{Scheme: "wss", Host: addr, Path: path})
	tcp.SetDeadline(time.Time{})
	if err != nil {
		tcp.Close()
		return nil, nil, nil, err
	}
	return tc, sock, br, nil
}

// TLSState is the connection's TLS state; ok is false for ws://.
func (c *Conn) TLSState() (st tls.ConnectionState, ok bool) {
	if tc, isTLS := c.nc.(*tls.Conn); isTLS {
		return tc.ConnectionState(), true
	}
	return st, false
}

// rawSock is what a wss:// Conn's *tls.Conn reads and writes: the TCP
// connection, through the Go netpoller, or, while the Conn is attached (see
// Conn.attach), directly and without ever blocking, as a ws:// Conn's own
// reads and writes do. Then Read reads the socket at most until one read
// comes back short and reports errWouldBlock afterwards, until the loop marks
// the socket readable again; crypto/tls treats that error as temporary (it is
// a net.Error), keeps the partial record it has read and resumes with the
// next Read. Write never blocks either: what the socket does not take is
// kept in sw (encrypted bytes), in order, and written by the loop's flushes;
// crypto/tls sees every write succeed, since a write error would end the
// connection for it. The Conn refuses a write (errBacklog) before crypto/tls
// encrypts it when sw already keeps too much.
//
// Every field is owned by the Conn: the read side by its reading goroutine,
// the write side is guarded by the Conn's wmu; while attached only the loop's
// goroutine uses the Conn, which covers the writes crypto/tls makes itself
// from Read (alerts).
type rawSock struct {
	net.Conn      // the TCP connection
	fd       int  // the socket, while direct
	direct   bool // attached: read and write fd directly, never wait
	drained  bool // direct: the last read came back short
	sw       sockWriter
}

// Read reads the socket (see rawSock).
func (s *rawSock) Read(p []byte) (int, error) {
	if !s.direct {
		return s.Conn.Read(p)
	}
	return readDirect(s.fd, p, &s.drained)
}

// Write writes to the socket (see rawSock).
func (s *rawSock) Write(b []byte) (int, error) {
	if !s.direct {
		return s.Conn.Write(b)
	}
	if err := s.sw.write(b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// SelfSigned returns a new self-signed ECDSA P-256 certificate for
// 127.0.0.1 and localhost, valid for a day, and its private key, both PEM
// encoded (what the suite's servers load with --tls-cert and --tls-key).
func SelfSigned() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "edgebench"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}
