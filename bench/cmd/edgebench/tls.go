package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/openengine/edge/bench/load"
)

// certFiles are the run's certificate and key (PEM) for the wss://
// workloads, which every wss:// server loads with --tls-cert and --tls-key.
type certFiles struct{ cert, key string }

// writeCert makes the run's self-signed certificate (ECDSA P-256, for
// 127.0.0.1; load.SelfSigned) and writes it and its key into dir.
func writeCert(dir string) (*certFiles, error) {
	cert, key, err := load.SelfSigned()
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	f := &certFiles{cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem")}
	if err := os.WriteFile(f.cert, cert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.key, key, 0o600); err != nil {
		return nil, err
	}
	return f, nil
}

// args are the server flags that make it serve wss:// (edge's and the
// gorilla peer's alike).
func (f *certFiles) args() []string {
	if f == nil {
		return nil
	}
	return []string{"--tls-cert", f.cert, "--tls-key", f.key}
}

// edgeNoTLS is why an edge that does not take --tls-cert skips its wss://
// rows (edge's wss:// comes with issue 12).
const edgeNoTLS = "this edge does not accept --tls-cert (no wss:// yet): its wss:// rows are skipped"

// tlsNote describes what one more connection to a wss:// target
// negotiated: version, cipher suite, key exchange, and whether it resumed.
func tlsNote(ctx context.Context, t load.Target) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := load.Dial(ctx, t, 512)
	if err != nil {
		return "TLS: probe connection failed: " + err.Error()
	}
	defer c.Close()
	st, _ := c.TLSState()
	resumed := "a full handshake per connection"
	if st.DidResume {
		resumed = "RESUMED (the figures do not include full handshakes)"
	}
	return fmt.Sprintf("TLS: %s, %s, key exchange %s, %s", tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite),
		st.CurveID, resumed)
}
