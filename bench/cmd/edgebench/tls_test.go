package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWriteCert: the run's certificate loads as a key pair, is ECDSA P-256
// and valid for 127.0.0.1 now.
func TestWriteCert(t *testing.T) {
	f, err := writeCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("public key %T", leaf.PublicKey)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		t.Fatalf("valid %s to %s", leaf.NotBefore, leaf.NotAfter)
	}
	if !slices.Equal(f.args(), []string{"--tls-cert", f.cert, "--tls-key", f.key}) || (*certFiles)(nil).args() != nil {
		t.Fatalf("args %v", f.args())
	}
	if !slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
		t.Fatalf("IPs %v", leaf.IPAddresses)
	}
}

// TestWSSPhases: W1-wss and W3-wss are W1's and W3's variants for edge and
// gorilla only, over TLS, and -w3-conns sizes W3-wss too.
func TestWSSPhases(t *testing.T) {
	m := standardMatrix()
	plain := map[string]bool{}
	for _, p := range m.phases([]string{"W1", "W3"}, peerNames) {
		plain[p.workload+"-wss|"+p.variant+"|"+p.peer] = true
		if p.tls {
			t.Fatalf("%s %s %s over TLS", p.workload, p.variant, p.peer)
		}
	}
	ps := m.phases([]string{"W1-wss", "W3-wss"}, peerNames)
	if len(ps) == 0 {
		t.Fatal("no wss phases")
	}
	for _, p := range ps {
		if !p.tls || !slices.Contains(wssPeers, p.peer) || !plain[p.workload+"|"+p.variant+"|"+p.peer] {
			t.Fatalf("phase %s %s %s (tls %v) has no plaintext twin", p.workload, p.variant, p.peer, p.tls)
		}
	}
	if got := m.phases([]string{"W1-wss"}, []string{"raw", "geth"}); len(got) != 0 {
		t.Fatalf("%d wss phases without edge or gorilla", len(got))
	}
	if err := m.override(&options{w3Conns: "300"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.phases([]string{"W3-wss"}, []string{"gorilla"}) {
		if p.variant != "300" {
			t.Fatalf("-w3-conns 300: W3-wss variant %s", p.variant)
		}
	}
}

// TestWSSReport: the wss:// sections show a skipped edge as skipped, the
// ratios to edge, and each server's plaintext figures beside its wss://
// ones.
func TestWSSReport(t *testing.T) {
	dir := t.TempDir()
	recs := []Record{
		{Run: "t", Workload: "W1", Variant: "c50w1-16B", Peer: "edge", OK: true, Throughput: 1000, Server: &Usage{UsPerOp: 10}},
		{Run: "t", Workload: "W1", Variant: "c50w1-16B", Peer: "gorilla", OK: true, Throughput: 800, Server: &Usage{UsPerOp: 20}},
		{Run: "t", Workload: "W3", Variant: "1000", Peer: "gorilla", OK: true, Conns: 1000, RSSPerConnKiB: 20, HeapPerConnKiB: 10},
		{Run: "t", Workload: "W1-wss", Variant: "c50w1-16B", Peer: "edge", OK: true, Throughput: 500, Server: &Usage{UsPerOp: 15}},
		{Run: "t", Workload: "W1-wss", Variant: "c50w1-16B", Peer: "gorilla", OK: true, Throughput: 400, Server: &Usage{UsPerOp: 30}},
		{Run: "t", Workload: "W3-wss", Variant: "1000", Peer: "edge", Skipped: true, Error: edgeNoTLS},
		{Run: "t", Workload: "W3-wss", Variant: "1000", Peer: "gorilla", OK: true, Conns: 1000, RSSPerConnKiB: 50, HeapPerConnKiB: 30},
	}
	if err := writeReport(dir, recs); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## W1-wss: unary echo over wss:// (TLS)", "## W3-wss: idle connections over wss:// (TLS)",
		"| c50w1-16B | gorilla | 400 | x0.80 | 30 | x2.00 |",            // vs edge over wss
		"| c50w1-16B | edge | 1k | 500 | x0.50 | 10 | 15 | x1.50 | 5 |", // edge ws vs wss
		"| c50w1-16B | gorilla | 800 | 400 | x0.50 | 20 | 30 | x1.50 | 10 |",
		"| 1000 | edge | skipped: " + edgeNoTLS,
		"| 1000 | gorilla | 20 | 50 | x2.50 | 10 | 30 | x3.00 | 20 |",
		"![W1-wss](W1-wss.svg)", "![W3-wss](W3-wss.svg)",
	} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	if bytes.Contains(md, []byte("## Failed phases")) {
		t.Error("a skipped phase is listed as failed")
	}
}
