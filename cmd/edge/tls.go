package main

import (
	"crypto/tls"
	"fmt"
	"sync/atomic"
)

// certFiles is the certificate of --tls-cert and --tls-key: tls.Config's
// GetCertificate serves the one loaded last, and SIGHUP reloads the files
// (CONTRACT.md section 11.3): new handshakes get the new certificate, open
// connections keep their session. A pair that fails to load keeps the
// previous one.
type certFiles struct {
	cert, key string // immutable
	cur       atomic.Pointer[tls.Certificate]
}

// loadCert loads the pair once; it is an error if that fails.
func loadCert(cert, key string) (*certFiles, error) {
	c := &certFiles{cert: cert, key: key}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload loads the files again and serves the new pair if it loads. Safe
// for concurrent use with get.
func (c *certFiles) Reload() error {
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return fmt.Errorf("tls-cert %s / tls-key %s: %w", c.cert, c.key, err)
	}
	c.cur.Store(&pair)
	return nil
}

// get is tls.Config.GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// loadTLS turns wss:// on when --tls-cert and --tls-key are set: Go's
// crypto/tls with its default suites, TLS 1.2 and later (CONTRACT.md
// section 11.6).
func loadTLS(o *options) error {
	if o.tlsCert == "" && o.tlsKey == "" {
		return nil
	}
	c, err := loadCert(o.tlsCert, o.tlsKey)
	if err != nil {
		return err
	}
	o.loop.TLS = &tls.Config{GetCertificate: c.get, MinVersion: tls.VersionTLS12}
	o.reloaders = append(o.reloaders, c)
	return nil
}
