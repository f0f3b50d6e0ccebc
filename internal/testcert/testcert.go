// Package testcert makes TLS certificates for tests.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// Cert is a self-signed certificate for 127.0.0.1 and localhost, made for
// one test: its PEM files' contents, the pair loaded, and a pool that
// trusts it.
type Cert struct {
	CertPEM, KeyPEM []byte
	Pair            tls.Certificate
	Pool            *x509.CertPool
}

// New makes a self-signed ECDSA P-256 certificate whose subject is cn,
// valid for an hour, for 127.0.0.1, ::1 and localhost.
func New(t testing.TB, cn string) *Cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		Pool:    x509.NewCertPool(),
	}
	if c.Pair, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	c.Pool.AddCert(leaf)
	return c
}

// ServerConfig is a server tls.Config serving c.
func (c *Cert) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.Pair}}
}

// ClientConfig is a client tls.Config that trusts c only.
func (c *Cert) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.Pool, ServerName: "127.0.0.1"}
}
