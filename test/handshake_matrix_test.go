package test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/openengine/edge/auth"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/loop"
)

// This file is the handshake matrix of issue 12: every row of CONTRACT.md
// section 11 over real sockets, with the exact status and headers of the
// answer. The JWT rows use real keys and tokens (auth's unit tests cover
// the verifier's edges); the rows run in order, and the limit rows count
// the connections earlier rows of the same gateway kept open.

// Issuer and audience of the matrix's JWT gateways.
const (
	matrixIss = "https://issuer.example"
	matrixAud = "edge"
)

// matrixKeys are the keys the JWT rows sign with.
type matrixKeys struct {
	rsa    *rsa.PrivateKey
	rsaPEM []byte // the public key, as --jwt-key has it
	ec     *ecdsa.PrivateKey
	ed     ed25519.PrivateKey
}

func newMatrixKeys(t *testing.T) *matrixKeys {
	t.Helper()
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(r.Public())
	if err != nil {
		t.Fatal(err)
	}
	return &matrixKeys{rsa: r, rsaPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), ec: e, ed: ed}
}

// jwtVerifier loads key files (written to a temporary directory) as
// --jwt-key would, with the matrix's issuer and audience.
func jwtVerifier(t *testing.T, files map[string][]byte) auth.Verifier {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	v, err := auth.NewJWT(auth.JWTConfig{KeyFiles: paths, Audience: matrixAud, Issuer: matrixIss})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// token signs the matrix's valid claims, changed by mod, with key; kid
// goes in the header when set.
func token(t *testing.T, m jwt.SigningMethod, key any, kid string, mod func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{"sub": "alice", "aud": matrixAud, "iss": matrixIss,
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
	if mod != nil {
		mod(c)
	}
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// proxyV1 and proxyV2 are PROXY protocol headers from src (v2: cmd 1
// PROXY, 0 LOCAL).
func proxyV1(src netip.AddrPort) []byte {
	return []byte("PROXY TCP4 " + src.Addr().String() + " 127.0.0.1 " + strconv.Itoa(int(src.Port())) + " 8080\r\n")
}

func proxyV2(cmd byte, src netip.AddrPort) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n")
	b = append(b, 0x20|cmd, 0x11, 0, 12)
	a := src.Addr().As4()
	b = append(b, a[:]...)
	b = append(b, 127, 0, 0, 1)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, 8080)
}

// errorHeader is the exact head of edge's HTTP error answers (codec.AppendHTTPError).
func errorHeader(status int, extra ...string) http.Header {
	text := http.StatusText(status)
	h := http.Header{
		"Content-Type":   {"text/plain; charset=utf-8"},
		"Content-Length": {strconv.Itoa(len(text) + 1)},
	} // and "Connection: close", which net/http turns into Response.Close
	for i := 0; i < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return h
}

// matrixRow is one handshake: from a local address, with a PROXY header
// first, a path and extra header lines; the answer's status and, for an
// error, its exact header; for a 101, the address edge/whoami reports.
type matrixRow struct {
	name    string
	gw      *gateway
	from    string // local address to dial from [127.0.0.1]
	prefix  []byte // sent before the request, a byte per write
	path    string // [/]
	header  []string
	status  int
	want    http.Header // for an error status
	remote  string      // for 101: whoami's remote; "peer": the dialing socket's address
	subject string      // for 101 with authentication: whoami's subject
	conn    *net.Conn   // set to the row's connection
}

// TestHandshakeMatrix: see the file's comment.
func TestHandshakeMatrix(t *testing.T) {
	k := newMatrixKeys(t)
	jwks := []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"` +
		base64.RawURLEncoding.EncodeToString(k.ed.Public().(ed25519.PublicKey)) + `"}]}`)
	origins := startGateway(t, func(c *gwConfig) { c.loop.AllowOrigins = []string{"https://app.example"} })
	anyOrigin := startGateway(t, func(c *gwConfig) { c.loop.AllowOrigins = []string{"*"} })
	maxConns := startGateway(t, func(c *gwConfig) { c.loop.MaxConns = 1 })
	perIP := startGateway(t, func(c *gwConfig) { c.loop.MaxConnsPerIP = 1 })
	rsaGW := startGateway(t, func(c *gwConfig) {
		c.loop.Auth = jwtVerifier(t, map[string][]byte{"rsa.pem": k.rsaPEM})
		c.loop.AuthQueryParam = "access_token"
	})
	jwksGW := startGateway(t, func(c *gwConfig) { c.loop.Auth = jwtVerifier(t, map[string][]byte{"jwks.json": jwks}) })
	xff := startGateway(t, func(c *gwConfig) {
		c.loop.MaxConnsPerIP = 1
		c.loop.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}
	})
	pp := startGateway(t, func(c *gwConfig) {
		c.loop.ProxyProtocol, c.loop.MaxConnsPerIP = true, 1
		c.loop.ProxyProtocolFrom = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("127.0.0.2/32")}
	})

	rs := func(mod func(jwt.MapClaims)) string { return token(t, jwt.SigningMethodRS256, k.rsa, "", mod) }
	bearer := func(tok string) []string { return []string{"Authorization: Bearer " + tok} }
	now := time.Now()
	unauthorized := errorHeader(401, "WWW-Authenticate", "Bearer")
	unavailable := errorHeader(503, "Retry-After", "1")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"mallory","aud":"edge","iss":"https://issuer.example","exp":9999999999}`)) + "."
	ap := netip.MustParseAddrPort
	var first net.Conn            // the connection that fills --max-conns
	var viaXFF, viaPROXY net.Conn // the ones counted for 192.0.2.7

	rows := []matrixRow{
		// 11.2 Origin.
		{name: "no origin", gw: origins, status: 101, remote: "peer"},
		{name: "same-host origin", gw: origins, header: []string{"Origin: http://" + origins.addr}, status: 101},
		{name: "listed origin", gw: origins, header: []string{"Origin: https://app.example"}, status: 101},
		{name: "listed origin, other scheme", gw: origins, header: []string{"Origin: http://app.example"}, status: 403, want: errorHeader(403)},
		{name: "foreign origin", gw: origins, header: []string{"Origin: https://evil.example"}, status: 403, want: errorHeader(403)},
		{name: "origin null", gw: origins, header: []string{"Origin: null"}, status: 403, want: errorHeader(403)},
		{name: "repeated origin", gw: origins, header: []string{"Origin: https://app.example", "Origin: https://app.example"}, status: 403, want: errorHeader(403)},
		{name: "any origin with *", gw: anyOrigin, header: []string{"Origin: https://evil.example"}, status: 101},

		// 11.1 Limits: the first connection of each gateway stays open.
		{name: "max-conns: first", gw: maxConns, status: 101, conn: &first},
		{name: "max-conns reached", gw: maxConns, status: 503, want: unavailable},
		{name: "per-ip: first from 127.0.0.1", gw: perIP, status: 101},
		{name: "per-ip reached from 127.0.0.1", gw: perIP, status: 503, want: unavailable},
		{name: "per-ip: another address is served", gw: perIP, from: "127.0.0.2", status: 101, remote: "peer"},

		// 11.3 Authentication.
		{name: "no token", gw: rsaGW, status: 401, want: unauthorized},
		{name: "not a bearer token", gw: rsaGW, header: []string{"Authorization: Basic YWxpY2U6eA=="}, status: 401, want: unauthorized},
		{name: "bad token", gw: rsaGW, header: bearer("not-a-jwt"), status: 401, want: unauthorized},
		{name: "expired token", gw: rsaGW, header: bearer(rs(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })), status: 401, want: unauthorized},
		{name: "nbf beyond the leeway", gw: rsaGW, header: bearer(rs(func(c jwt.MapClaims) { c["nbf"] = now.Add(5 * time.Minute).Unix() })), status: 401, want: unauthorized},
		{name: "wrong aud", gw: rsaGW, header: bearer(rs(func(c jwt.MapClaims) { c["aud"] = "someone-else" })), status: 401, want: unauthorized},
		{name: "wrong iss", gw: rsaGW, header: bearer(rs(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })), status: 401, want: unauthorized},
		{name: "alg none", gw: rsaGW, header: bearer(none), status: 401, want: unauthorized},
		{name: "HS256 with the RSA public key as secret (confusion)", gw: rsaGW,
			header: bearer(token(t, jwt.SigningMethodHS256, k.rsaPEM, "", nil)), status: 401, want: unauthorized},
		{name: "another key", gw: rsaGW, header: bearer(token(t, jwt.SigningMethodES256, k.ec, "", nil)), status: 401, want: unauthorized},
		{name: "valid token in the header", gw: rsaGW, header: bearer(rs(nil)), status: 101, subject: "alice"},
		{name: "valid token, scheme in lower case", gw: rsaGW, header: []string{"authorization: bearer " + rs(nil)}, status: 101, subject: "alice"},
		{name: "valid token in the query parameter", gw: rsaGW, path: "/?access_token=" + rs(nil), status: 101, subject: "alice"},
		{name: "token in another query parameter", gw: rsaGW, path: "/?token=" + rs(nil), status: 401, want: unauthorized},
		{name: "JWKS: known kid", gw: jwksGW, header: bearer(token(t, jwt.SigningMethodEdDSA, k.ed, "k1", nil)), status: 101, subject: "alice"},
		{name: "JWKS: unknown kid", gw: jwksGW, header: bearer(token(t, jwt.SigningMethodEdDSA, k.ed, "k2", nil)), status: 401, want: unauthorized},

		// 11.5 Client address: X-Forwarded-For from a trusted proxy
		// (127.0.0.1) is the client, counted per address; from another
		// peer (127.0.0.2) it is ignored.
		{name: "XFF from a trusted proxy", gw: xff, header: []string{"X-Forwarded-For: 6.6.6.6, 192.0.2.7, 10.1.2.3"}, status: 101, remote: "192.0.2.7:0", conn: &viaXFF},
		{name: "XFF: the same client again, over per-ip", gw: xff, header: []string{"X-Forwarded-For: 192.0.2.7"}, status: 503, want: unavailable},
		{name: "XFF: another client through the same proxy", gw: xff, header: []string{"X-Forwarded-For: 192.0.2.8"}, status: 101, remote: "192.0.2.8:0"},
		{name: "XFF: malformed hop, the proxy is the client", gw: xff, header: []string{"X-Forwarded-For: 192.0.2.9, unknown"}, status: 101, remote: "peer"},
		{name: "XFF from an untrusted peer is ignored", gw: xff, from: "127.0.0.2", header: []string{"X-Forwarded-For: 192.0.2.10"}, status: 101, remote: "peer"},
		{name: "XFF from an untrusted peer: counted by the peer", gw: xff, from: "127.0.0.2", header: []string{"X-Forwarded-For: 192.0.2.11"}, status: 503, want: unavailable},

		// 11.5 PROXY protocol.
		{name: "PROXY v1", gw: pp, prefix: proxyV1(ap("192.0.2.7:51000")), status: 101, remote: "192.0.2.7:51000", conn: &viaPROXY},
		{name: "PROXY v2", gw: pp, prefix: proxyV2(1, ap("198.51.100.9:4242")), status: 101, remote: "198.51.100.9:4242"},
		{name: "PROXY v2 LOCAL: the peer", gw: pp, prefix: proxyV2(0, ap("198.51.100.10:1")), status: 101, remote: "peer"},
		{name: "PROXY: per-ip by the header's address", gw: pp, from: "127.0.0.2", prefix: proxyV1(ap("192.0.2.7:51001")), status: 503, want: unavailable},
	}
	for _, r := range rows {
		t.Run(r.name, func(sub *testing.T) { r.run(sub, t) })
	}

	// Once a connection leaves, --max-conns has room again.
	first.Close()
	poll.Until(t, pollTimeout, "an upgrade once a connection closed", func() (bool, string) {
		_, _, resp, _ := sendUpgrade(t, maxConns)
		resp.Body.Close()
		return resp.StatusCode == 101, resp.Status
	})

	// The close releases the address that was counted: the forwarded one,
	// the PROXY header's.
	viaXFF.Close()
	viaPROXY.Close()
	for _, again := range []struct {
		gw     *gateway
		prefix []byte
		header []string
	}{
		{xff, nil, []string{"X-Forwarded-For: 192.0.2.7"}},
		{pp, proxyV1(ap("192.0.2.7:51002")), nil},
	} {
		poll.Until(t, pollTimeout, "192.0.2.7 served again once its connection left", func() (bool, string) {
			status, err := tryUpgrade(again.gw, again.prefix, again.header)
			return status == 101, fmt.Sprint(status, err)
		})
	}

	// A connection without a PROXY header is closed without an answer.
	conn := dialFrom(t, pp, "", nil)
	if _, err := io.WriteString(conn, upgradeRequest(pp.addr, "/", "ZWRnZS1lMmUta2V5LTE2Yg==")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(readTimeout))
	if n, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("upgrade without a PROXY header: read %d bytes, %v; want EOF", n, err)
	}
	poll.Until(t, pollTimeout, "rejected{reason=proxy_header} counted", func() (bool, string) {
		st := pp.srv.Stats(readTimeout)
		for i := range loop.NumRejectReasons {
			if loop.RejectReasonLabel(i) == "proxy_header" {
				return st.Rejected[i] == 1, strconv.FormatUint(st.Rejected[i], 10)
			}
		}
		return false, "no proxy_header reason"
	})
}

// tryUpgrade sends an upgrade to gw from 127.0.0.1, after prefix, with
// the extra header lines, and returns the answer's status; the connection
// is closed.
func tryUpgrade(gw *gateway, prefix []byte, header []string) (int, error) {
	conn, err := net.DialTimeout("tcp", gw.addr, readTimeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(readTimeout))
	req := string(prefix) + upgradeRequest(gw.addr, "/", "ZWRnZS1lMmUta2V5LTE2Yg==", header...)
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodGet})
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// dialFrom opens a TCP connection to gw from the local address from
// (127.0.0.1 when empty), closed in keep's Cleanup (t's when nil).
func dialFrom(t *testing.T, gw *gateway, from string, keep *testing.T) net.Conn {
	t.Helper()
	if from == "" {
		from = "127.0.0.1"
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: readTimeout}
	conn, err := d.Dial("tcp", gw.addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	if keep == nil {
		keep = t
	}
	keep.Cleanup(func() { conn.Close() })
	return conn
}

// run runs the row in t; its connection stays open until the matrix
// (keep) ends, so that later rows count it.
func (r matrixRow) run(t, keep *testing.T) {
	conn := dialFrom(t, r.gw, r.from, keep)
	if r.conn != nil {
		*r.conn = conn
	}
	conn.SetDeadline(time.Now().Add(readTimeout))
	for i := range r.prefix { // split delivery of the PROXY header
		if _, err := conn.Write(r.prefix[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	path := r.path
	if path == "" {
		path = "/"
	}
	key := "ZWRnZS1lMmUta2V5LTE2Yg=="
	if _, err := io.WriteString(conn, upgradeRequest(r.gw.addr, path, key, r.header...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	if resp.StatusCode != r.status {
		t.Fatalf("status %d, want %d", resp.StatusCode, r.status)
	}
	if r.status != 101 {
		if !reflect.DeepEqual(resp.Header, r.want) || !resp.Close {
			t.Fatalf("header %v (Connection: close %v), want exactly %v and Connection: close", resp.Header, resp.Close, r.want)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatalf("body: %v", err)
		}
		if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("after the answer: %d bytes, %v; want the socket closed", n, err)
		}
		return
	}
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != acceptKey(key) {
		t.Fatalf("Sec-WebSocket-Accept %q", got)
	}
	conn.SetDeadline(time.Time{})
	if r.remote == "" && r.subject == "" {
		return
	}
	c := &client{t: t, conn: conn, br: br}
	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/whoami","params":{}}`)
	got := parseResponse(t, c.readText())
	var who struct {
		Subject *string `json:"subject"`
		Remote  string  `json:"remote"`
	}
	if err := json.Unmarshal(got.Result, &who); err != nil {
		t.Fatalf("whoami: %v", err)
	}
	if want := r.remote; want != "" {
		if want == "peer" {
			want = conn.LocalAddr().String()
		}
		if who.Remote != want {
			t.Fatalf("whoami remote %q, want %q", who.Remote, want)
		}
	}
	if r.subject != "" && (who.Subject == nil || *who.Subject != r.subject) {
		t.Fatalf("whoami subject %v, want %q", who.Subject, r.subject)
	}
	if strings.Contains(r.gw.logs.String(), "access_token") {
		t.Fatalf("a query string is in the logs:\n%s", r.gw.logs)
	}
}
