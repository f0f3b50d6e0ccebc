// Package test holds edge's end-to-end tests: an in-process gateway on
// 127.0.0.1:0 driven over real sockets by a raw WebSocket client that builds
// every frame by hand, so that a test can send exactly the bytes it wants
// (CONTRACT.md is the specification under test).
package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
)

// Time bounds. Every read carries a deadline; quiet is used only to assert
// that nothing arrives, never to wait for an effect.
const (
	readTimeout     = 5 * time.Second
	quiet           = 200 * time.Millisecond
	pollTimeout     = 5 * time.Second
	watchdogTimeout = 45 * time.Second
)

// TestMain runs the tests, then checks that no gateway goroutine outlives
// them: every gateway a test started must have stopped its event loops and
// backend workers.
func TestMain(m *testing.M) { testgw.Main(m, removeEdgeBinary) }

// gwConfig is what a test may override before its gateway starts.
type gwConfig struct {
	loop     loop.Config
	rpc      rpc.Config
	maxTasks int // global backend task cap
	// clientTLS, when set, makes dialTCP speak TLS to the gateway
	// (loop.TLS set by withTLS).
	clientTLS *tls.Config
}

// gateway is one in-process edge gateway with the memory backend.
type gateway struct {
	t    *testing.T
	srv  *loop.Server
	rpc  *rpc.Server
	mem  *backend.Memory
	pool *backend.Pool
	addr string
	logs *testgw.Buffer
	// clientTLS is gwConfig.clientTLS: dialTCP connects over TLS with it.
	clientTLS *tls.Config
}

// startGateway starts a gateway on 127.0.0.1:0 with the memory backend and
// stops it in t.Cleanup (testgw.Start). opts adjust the configuration; the
// memory backend is already the rpc handler when they run, for options
// that wrap it. It also arms a watchdog that dumps every goroutine if the
// test hangs.
func startGateway(t *testing.T, opts ...func(*gwConfig)) *gateway {
	t.Helper()
	watchdog(t)
	mem := backend.NewMemory()
	cfg := gwConfig{
		loop:     loop.Config{Listen: "127.0.0.1:0", Loops: 2},
		rpc:      rpc.Config{Handler: mem},
		maxTasks: 65536,
	}
	for _, o := range opts {
		o(&cfg)
	}
	g := testgw.Start(t, testgw.Config{Loop: cfg.loop, RPC: cfg.rpc, Mem: mem, MaxTasks: cfg.maxTasks})
	return &gateway{t: t, srv: g.Srv, rpc: g.RPC, mem: mem, pool: g.Pool, addr: g.Srv.Addr().String(), logs: g.Logs, clientTLS: cfg.clientTLS}
}

// watchdog fails the whole run if t outlives watchdogTimeout (testgw.Watchdog).
func watchdog(t *testing.T) { testgw.Watchdog(t, watchdogTimeout) }

// waitGate polls until n requests wait on gate name (a bounded poll on the
// backend's own bookkeeping: a worker registers on the gate asynchronously).
func (gw *gateway) waitGate(name string, n int) {
	gw.t.Helper()
	poll.Until(gw.t, pollTimeout, fmt.Sprintf("%d requests waiting on gate %q", n, name), func() (bool, string) {
		got := gw.mem.Waiting(name)
		return got == n, fmt.Sprintf("%d waiting", got)
	})
}

// waitTasks polls until the gateway's backend holds n global task slots (a
// worker releases its slot just after it posts its completion).
func (gw *gateway) waitTasks(n int) {
	gw.t.Helper()
	poll.Until(gw.t, pollTimeout, fmt.Sprintf("%d global backend tasks", n), func() (bool, string) {
		got := gw.pool.Running()
		return got == n, fmt.Sprintf("%d running", got)
	})
}

// waitDraining polls until a Shutdown started on another goroutine has begun
// to drain (new requests are answered SERVER_SHUTTING_DOWN from then on).
func (gw *gateway) waitDraining() {
	gw.t.Helper()
	poll.Until(gw.t, pollTimeout, "Shutdown to start draining", func() (bool, string) {
		return gw.rpc.Draining(), "not draining"
	})
}

// openGate releases gate name directly in the backend (for when no
// connection can send edge/open, as during a drain).
func (gw *gateway) openGate(name string) {
	gw.t.Helper()
	if _, err := gw.mem.Call(context.Background(), "edge/open", []byte(`{"name":`+strconv.Quote(name)+`}`), nil); err != nil {
		gw.t.Fatalf("open gate %q: %v", name, err)
	}
}

// client is a raw WebSocket client: it writes frames byte by byte as told
// and checks what the server sends.
type client struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	seq  int // for generated request ids
}

// dialTCP opens a bare TCP connection to the gateway, closed in t.Cleanup:
// a TLS connection, its handshake done, when the gateway serves wss://.
func dialTCP(t *testing.T, gw *gateway) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", gw.addr, readTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", gw.addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	if gw.clientTLS == nil {
		return conn
	}
	tc := tls.Client(conn, gw.clientTLS)
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatalf("TLS handshake with %s: %v", gw.addr, err)
	}
	return tc
}

// upgradeRequest returns an HTTP upgrade request for path with key and the
// extra header lines (each "Name: value").
func upgradeRequest(host, path, key string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", path, host)
	fmt.Fprintf(&b, "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", key)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// dial connects and completes the WebSocket upgrade on "/", checking the 101
// response. extra are additional request header lines.
func dial(t *testing.T, gw *gateway, extra ...string) *client {
	c, _ := dialResp(t, gw, extra...)
	return c
}

// dialResp is dial that also returns the 101 response for further checks.
func dialResp(t *testing.T, gw *gateway, extra ...string) (*client, *http.Response) {
	t.Helper()
	conn, br, resp, key := sendUpgrade(t, gw, extra...)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: status %d, want 101", resp.StatusCode)
	}
	if got, want := resp.Header.Get("Sec-WebSocket-Accept"), acceptKey(key); got != want {
		t.Fatalf("Sec-WebSocket-Accept %q, want %q", got, want)
	}
	return &client{t: t, conn: conn, br: br}, resp
}

// frame returns the bytes of one client frame. masked selects a masked frame
// (what RFC 6455 requires of a client); rsv sets RSV bits (ws.Rsv).
func frame(fin bool, op ws.OpCode, payload []byte, masked bool, rsv byte) []byte {
	h := ws.Header{Fin: fin, Rsv: rsv, OpCode: op, Length: int64(len(payload)), Masked: masked}
	if masked {
		h.Mask = ws.NewMask()
	}
	var b bytes.Buffer
	if err := ws.WriteHeader(&b, h); err != nil {
		panic(err)
	}
	n := b.Len()
	b.Write(payload)
	if masked {
		ws.Cipher(b.Bytes()[n:], h.Mask, 0)
	}
	return b.Bytes()
}

// textFrame is a masked text frame with FIN set.
func textFrame(s string) []byte { return frame(true, ws.OpText, []byte(s), true, 0) }

// closeBody is a close frame payload: a 2-byte code and a reason.
func closeBody(code uint16, reason string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, code), reason...)
}

// write sends raw bytes.
func (c *client) write(b []byte) {
	c.t.Helper()
	c.conn.SetWriteDeadline(time.Now().Add(readTimeout))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// sendFrame sends one frame built by frame.
func (c *client) sendFrame(fin bool, op ws.OpCode, payload []byte, masked bool) {
	c.t.Helper()
	c.write(frame(fin, op, payload, masked, 0))
}

// sendText sends s as one masked, unfragmented text message.
func (c *client) sendText(s string) {
	c.t.Helper()
	c.write(textFrame(s))
}

// readFrame reads one server frame within d. Server frames must be unmasked,
// unfragmented and without RSV bits (CONTRACT.md section 1.1).
func (c *client) readFrame(d time.Duration) (ws.Header, []byte, error) {
	c.conn.SetReadDeadline(time.Now().Add(d))
	h, err := ws.ReadHeader(c.br)
	if err != nil {
		return h, nil, err
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(c.br, p); err != nil {
		return h, nil, err
	}
	if h.Masked || !h.Fin || h.Rsv != 0 {
		c.t.Errorf("server frame with masked=%v fin=%v rsv=%d (op %d)", h.Masked, h.Fin, h.Rsv, h.OpCode)
	}
	return h, p, nil
}

// readMessage reads the next server frame and returns its opcode and payload.
func (c *client) readMessage() (ws.OpCode, []byte) {
	c.t.Helper()
	h, p, err := c.readFrame(readTimeout)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return h.OpCode, p
}

// readText reads the next frame and requires a text message.
func (c *client) readText() string {
	c.t.Helper()
	op, p := c.readMessage()
	if op != ws.OpText {
		c.t.Fatalf("got %s, want a text message", describe(op, p))
	}
	return string(p)
}

// expectText requires the next message to be exactly want.
func (c *client) expectText(want string) {
	c.t.Helper()
	if got := c.readText(); got != want {
		c.t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// expectTexts requires the next len(want) messages to be want in any order
// (responses from different backend calls are not ordered).
func (c *client) expectTexts(want ...string) {
	c.t.Helper()
	pending := map[string]int{}
	for _, w := range want {
		pending[w]++
	}
	for range want {
		got := c.readText()
		if pending[got] == 0 {
			c.t.Fatalf("unexpected message %s\nstill expecting %v", got, keys(pending))
		}
		pending[got]--
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k, n := range m {
		for range n {
			out = append(out, k)
		}
	}
	return out
}

// expectClose requires the next frame to be a close frame with code and
// returns its reason.
func (c *client) expectClose(code ws.StatusCode) string {
	c.t.Helper()
	op, p := c.readMessage()
	if op != ws.OpClose {
		c.t.Fatalf("got %s, want close %d", describe(op, p), code)
	}
	if len(p) < 2 {
		c.t.Fatalf("close frame without a code (%q), want %d", p, code)
	}
	if got := ws.StatusCode(binary.BigEndian.Uint16(p)); got != code {
		c.t.Fatalf("close code %d (%q), want %d", got, p[2:], code)
	}
	return string(p[2:])
}

// expectEOF requires the server to close the TCP connection with nothing
// more sent.
func (c *client) expectEOF() {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(readTimeout))
	b, err := c.br.ReadByte()
	switch {
	case err == nil:
		rest, _ := c.br.Peek(c.br.Buffered())
		c.t.Fatalf("got byte %#x (then %q), want EOF", b, rest)
	case errors.Is(err, io.EOF):
	default:
		c.t.Fatalf("got %v, want EOF", err)
	}
}

// answerCloseAndExpectEOF answers the server's close frame with one of ours,
// as a well-behaved client does, and requires the server to end the TCP
// connection. The server may have done so already, in which case the write
// may fail or draw a reset.
func (c *client) answerCloseAndExpectEOF() {
	c.t.Helper()
	c.conn.SetWriteDeadline(time.Now().Add(readTimeout))
	_, _ = c.conn.Write(frame(true, ws.OpClose, closeBody(1000, ""), true, 0))
	c.conn.SetReadDeadline(time.Now().Add(readTimeout))
	b, err := c.br.ReadByte()
	switch {
	case err == nil:
		c.t.Fatalf("got byte %#x after the close frames, want EOF", b)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
	default:
		c.t.Fatalf("got %v after the close frames, want EOF", err)
	}
}

// expectNoMessage requires that nothing arrives within quiet. Only for
// asserting absence.
func (c *client) expectNoMessage() {
	c.t.Helper()
	h, p, err := c.readFrame(quiet)
	var ne net.Error
	if err == nil {
		c.t.Fatalf("got %s, want nothing", describe(h.OpCode, p))
	}
	if !errors.As(err, &ne) || !ne.Timeout() {
		c.t.Fatalf("got %v, want nothing (a read timeout)", err)
	}
}

func describe(op ws.OpCode, p []byte) string {
	switch op {
	case ws.OpText:
		return "text " + string(p)
	case ws.OpClose:
		if len(p) >= 2 {
			return fmt.Sprintf("close %d %q", binary.BigEndian.Uint16(p), p[2:])
		}
		return fmt.Sprintf("close %q", p)
	}
	return fmt.Sprintf("opcode %d payload %q", op, p)
}

// stats is the result of edge/stats.
type stats struct {
	InFlightIDs   int `json:"inFlightIds"`
	Tasks         int `json:"tasks"`
	Subscriptions int `json:"subscriptions"`
	OutboundBytes int `json:"outboundBytes"`
}

type response struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    *struct {
			Code string `json:"code"`
		} `json:"data"`
	} `json:"error"`
}

func parseResponse(t *testing.T, msg string) response {
	t.Helper()
	var r response
	if err := json.Unmarshal([]byte(msg), &r); err != nil {
		t.Fatalf("response %s: %v", msg, err)
	}
	return r
}

// stats asks edge/stats and returns the counts together with every other
// message that arrived before its answer.
func (c *client) stats() (stats, []string) {
	c.t.Helper()
	c.seq++
	id := `"stats-` + strconv.Itoa(c.seq) + `"`
	c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/stats","params":{}}`)
	var others []string
	for {
		msg := c.readText()
		r := parseResponse(c.t, msg)
		if string(r.ID) != id {
			others = append(others, msg)
			continue
		}
		if r.Error != nil && r.Error.Data != nil && r.Error.Data.Code == "SERVER_BUSY" {
			// edge/stats takes a task slot like any request: with every
			// slot held it is refused. Report that as unknown counts.
			return stats{InFlightIDs: -1, Tasks: -1}, others
		}
		var s stats
		if err := json.Unmarshal(r.Result, &s); err != nil {
			c.t.Fatalf("edge/stats answer %s: %v", msg, err)
		}
		return s, others
	}
}

// settle polls edge/stats until the connection holds tasks task slots and
// inFlight ids, and returns every other message received meanwhile. Stats
// are answered on the loop after every completion already applied, so once
// they show a worker returned, its answer (if any) has been received.
func (c *client) settle(tasks, inFlight int) []string {
	c.t.Helper()
	var all []string
	poll.Until(c.t, pollTimeout, fmt.Sprintf("tasks %d inFlightIds %d", tasks, inFlight), func() (bool, string) {
		s, others := c.stats()
		all = append(all, others...)
		return s.Tasks == tasks && s.InFlightIDs == inFlight, fmt.Sprintf("stats %+v (other messages: %q)", s, all)
	})
	return all
}

// expectSettled is settle that requires no other message.
func (c *client) expectSettled(tasks, inFlight int) {
	c.t.Helper()
	if others := c.settle(tasks, inFlight); len(others) > 0 {
		c.t.Fatalf("unexpected messages: %q", others)
	}
}

// echo sends an edge/echo request and checks its answer; it proves the
// connection still serves requests.
func (c *client) echo() {
	c.t.Helper()
	c.seq++
	id := `"echo-` + strconv.Itoa(c.seq) + `"`
	c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/echo","params":{"n":` + strconv.Itoa(c.seq) + `}}`)
	c.expectText(`{"jsonrpc":"2.0","id":` + id + `,"result":{"n":` + strconv.Itoa(c.seq) + `}}`)
}

// gate returns an edge/gate request with id (raw JSON) on gate name.
func gate(id, name string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"edge/gate","params":{"name":"` + name + `"}}`
}

// gateResult is the answer to gate(id, name) once the gate opens.
func gateResult(id, name string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{"name":"` + name + `"}}`
}

// cancel returns a $/cancelRequest for id (raw JSON).
func cancel(id string) string {
	return `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":` + id + `}}`
}

// open sends edge/open on name over c and checks that released requests
// were released.
func (c *client) open(name string, released int) {
	c.t.Helper()
	c.seq++
	id := `"open-` + strconv.Itoa(c.seq) + `"`
	c.sendText(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/open","params":{"name":"` + name + `"}}`)
	c.expectText(`{"jsonrpc":"2.0","id":` + id + `,"result":{"released":` + strconv.Itoa(released) + `}}`)
}

// Fixed error responses of CONTRACT.md section 7.
const (
	parseError     = `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`
	invalidRequest = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`
)

func duplicateID(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32600,"message":"Invalid Request","data":{"code":"DUPLICATE_REQUEST_ID"}}}`
}

func serverBusy(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32000,"message":"Server busy","data":{"code":"SERVER_BUSY"}}}`
}

// sendUpgrade opens a connection, sends an upgrade request with extra
// header lines and reads the answer's head; the connection's deadline is
// cleared afterwards.
func sendUpgrade(t *testing.T, gw *gateway, extra ...string) (net.Conn, *bufio.Reader, *http.Response, string) {
	t.Helper()
	conn := dialTCP(t, gw)
	br, resp, key := upgradeOn(t, conn, gw.addr, extra...)
	return conn, br, resp, key
}

// upgradeOn sends an upgrade request for host on conn and reads the
// answer's head, within readTimeout.
func upgradeOn(t *testing.T, conn net.Conn, host string, extra ...string) (*bufio.Reader, *http.Response, string) {
	t.Helper()
	key := base64.StdEncoding.EncodeToString([]byte("edge-e2e-key-16b"))
	conn.SetDeadline(time.Now().Add(readTimeout))
	if _, err := io.WriteString(conn, upgradeRequest(host, "/", key, extra...)); err != nil {
		t.Fatalf("write upgrade: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("read upgrade response: %v", err)
	}
	conn.SetDeadline(time.Time{})
	return br, resp, key
}
