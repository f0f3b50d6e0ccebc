package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
)

// withNDJSON turns on the NDJSON-over-TCP listener (CONTRACT.md section 1.2)
// on an ephemeral loopback port next to the WebSocket one. Its address string
// differs from the WebSocket listener's "127.0.0.1:0": gnet, which owned the
// listeners until edge accepted for itself, told them apart by that string
// (TestNDJSONListenSameAddressString covers equal strings).
func withNDJSON(c *gwConfig) { c.loop.NDJSONListen = ndjsonListen }

// ndjsonListen is a loopback address (all of 127.0.0.0/8 is local) that is
// not spelled like the harness's WebSocket listener.
const ndjsonListen = "127.0.0.2:0"

// ndClient is a raw NDJSON-over-TCP client: it writes exactly the bytes it is
// told and reads the server's output line by line.
type ndClient struct {
	t    *testing.T
	conn *net.TCPConn
	br   *bufio.Reader
	seq  int // for generated request ids
}

// dialND connects to the gateway's NDJSON listener, once checkNDJSON has
// found that it serves NDJSON; the connection is closed in t.Cleanup.
func dialND(t *testing.T, gw *gateway) *ndClient {
	t.Helper()
	checkNDJSON(t, gw)
	return dialNDRaw(t, gw)
}

// dialNDRaw connects to the gateway's NDJSON listener without checks.
func dialNDRaw(t *testing.T, gw *gateway) *ndClient {
	t.Helper()
	addr := gw.srv.NDJSONAddr()
	if addr == nil {
		t.Fatalf("gateway has no NDJSON listener (start it with withNDJSON)")
	}
	conn, err := net.DialTimeout("tcp", addr.String(), readTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &ndClient{t: t, conn: conn.(*net.TCPConn), br: bufio.NewReader(conn)}
}

// ndChecked records, per gateway, whether its NDJSON listener was found to
// speak NDJSON: "" if so, else why not (see checkNDJSON).
var ndChecked sync.Map // *gateway -> string

// checkNDJSON makes sure, once per gateway, that its NDJSON listener serves
// NDJSON, so that a gateway that serves it as WebSocket fails every test at
// once instead of each read timing out. The probe line ends in a blank line:
// an NDJSON session answers the echo first, a WebSocket handshake parser
// answers "HTTP/1.1 400" at once.
func checkNDJSON(t *testing.T, gw *gateway) {
	t.Helper()
	if v, done := ndChecked.Load(gw); done {
		if v.(string) != "" {
			t.Fatal(v)
		}
		return
	}
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		ndChecked.Store(gw, msg)
		t.Fatal(msg)
	}
	gw.t.Cleanup(func() { ndChecked.Delete(gw) })
	nd := gw.srv.NDJSONAddr()
	if nd == nil {
		fail("gateway has no NDJSON listener (start it with withNDJSON)")
	}
	if nd.String() == gw.srv.Addr().String() {
		fail("NDJSONAddr() %s is the WebSocket listener's address (see TestNDJSONListenSameAddressString)", nd)
	}
	c := dialNDRaw(t, gw)
	defer c.conn.Close()
	c.write(`{"jsonrpc":"2.0","id":"probe","method":"edge/echo","params":{}}` + "\r\n\r\n")
	// The inline -32700 of the blank line may come before the echo's answer.
	want := []string{`{"jsonrpc":"2.0","id":"probe","result":{}}`, parseError}
	var got []string
	for range want {
		line, err := c.readLine(readTimeout)
		if err != nil {
			fail("the NDJSON listener %s does not serve NDJSON: got %q then %v, want %q (see TestNDJSONConnRecognisedOnEphemeralPort)", nd, got, err, want)
		}
		got = append(got, line)
	}
	if !slices.Contains(got, want[0]) || !slices.Contains(got, want[1]) {
		fail("the NDJSON listener %s does not serve NDJSON: got %q, want %q (see TestNDJSONConnRecognisedOnEphemeralPort)", nd, got, want)
	}
	ndChecked.Store(gw, "")
}

// write sends raw bytes.
func (c *ndClient) write(s string) {
	c.t.Helper()
	c.conn.SetWriteDeadline(time.Now().Add(readTimeout))
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// send sends msg as one line.
func (c *ndClient) send(msg string) {
	c.t.Helper()
	c.write(msg + "\n")
}

// readLine reads the next server line within d and returns it without its
// "\n".
func (c *ndClient) readLine(d time.Duration) (string, error) {
	c.conn.SetReadDeadline(time.Now().Add(d))
	s, err := c.br.ReadString('\n')
	if err != nil {
		if s != "" {
			return "", errors.Join(err, errors.New("unterminated line "+strconv.Quote(s)))
		}
		return "", err
	}
	return s[:len(s)-1], nil
}

// recv reads the next server message. Every server message must end with
// exactly "\n" (no "\r").
func (c *ndClient) recv() string {
	c.t.Helper()
	s, err := c.readLine(readTimeout)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if strings.HasSuffix(s, "\r") {
		c.t.Errorf("server line ends in CRLF: %q", s)
	}
	return s
}

// expect requires the next message to be exactly want.
func (c *ndClient) expect(want string) {
	c.t.Helper()
	if got := c.recv(); got != want {
		c.t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// expectAny requires the next len(want) messages to be want in any order
// (answers of different backend calls are not ordered).
func (c *ndClient) expectAny(want ...string) {
	c.t.Helper()
	pending := map[string]int{}
	for _, w := range want {
		pending[w]++
	}
	for range want {
		got := c.recv()
		if pending[got] == 0 {
			c.t.Fatalf("unexpected message %s\nstill expecting %q", got, keys(pending))
		}
		pending[got]--
	}
}

// expectEOF requires the server to end the TCP connection with nothing more
// sent (a reset counts as an end too).
func (c *ndClient) expectEOF() {
	c.t.Helper()
	s, err := c.readLine(readTimeout)
	switch {
	case err == nil:
		c.t.Fatalf("got %s, want EOF", s)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
	default:
		c.t.Fatalf("got %v, want EOF", err)
	}
}

// echo sends edge/echo and checks its answer: the connection still serves.
func (c *ndClient) echo() {
	c.t.Helper()
	c.seq++
	n := strconv.Itoa(c.seq)
	c.send(`{"jsonrpc":"2.0","id":"echo-` + n + `","method":"edge/echo","params":{"n":` + n + `}}`)
	c.expect(`{"jsonrpc":"2.0","id":"echo-` + n + `","result":{"n":` + n + `}}`)
}

// statsNow asks edge/stats; every other message before its answer is returned.
func (c *ndClient) statsNow() (stats, []string) {
	c.t.Helper()
	c.seq++
	id := `"stats-` + strconv.Itoa(c.seq) + `"`
	c.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"edge/stats","params":{}}`)
	var others []string
	for {
		msg := c.recv()
		r := parseResponse(c.t, msg)
		if string(r.ID) != id {
			others = append(others, msg)
			continue
		}
		var s stats
		if err := json.Unmarshal(r.Result, &s); err != nil {
			c.t.Fatalf("edge/stats answer %s: %v", msg, err)
		}
		return s, others
	}
}

// expectSettled polls edge/stats until no id and no slot is held and requires
// that nothing else arrived meanwhile.
func (c *ndClient) expectSettled() {
	c.t.Helper()
	poll.Until(c.t, pollTimeout, "nothing held", func() (bool, string) {
		s, others := c.statsNow()
		if len(others) > 0 {
			c.t.Fatalf("unexpected messages: %q", others)
		}
		return s.Tasks == 0 && s.InFlightIDs == 0 && s.Subscriptions == 0, fmt.Sprintf("stats %+v", s)
	})
}

// echoReq is an edge/echo request with a JSON id and a padding string, and
// echoRes its answer.
func echoReq(id, pad string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"edge/echo","params":{"pad":"` + pad + `"}}`
}

func echoRes(id, pad string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{"pad":"` + pad + `"}}`
}

// paddedEcho returns an edge/echo request line of exactly n bytes (n >= 64).
func paddedEcho(id string, n int) (req, res string) {
	base := len(echoReq(id, ""))
	pad := strings.Repeat("p", n-base)
	return echoReq(id, pad), echoRes(id, pad)
}

// TestNDJSONLineLimit checks the NDJSON line limit (CONTRACT.md section 1.2)
// with MaxMessageBytes 1024: a line of exactly 1024 bytes is served, also
// with CRLF; a longer line gets one -32700 (id null) and the next line is
// answered; an over-long line is answered as soon as its first 1025 bytes
// have arrived, before its newline, and reported only once however long it
// goes on.
func TestNDJSONLineLimit(t *testing.T) {
	const max = 1024
	gw := startGateway(t, withNDJSON, func(c *gwConfig) { c.loop.MaxMessageBytes = max })
	tests := []struct {
		name string
		run  func(c *ndClient)
	}{
		{name: "exactly the limit", run: func(c *ndClient) {
			req, res := paddedEcho("1", max)
			c.write(req + "\n")
			c.expect(res)
		}},
		{name: "exactly the limit with CRLF", run: func(c *ndClient) {
			req, res := paddedEcho("1", max)
			c.write(req + "\r\n")
			c.expect(res)
		}},
		{name: "one byte over", run: func(c *ndClient) {
			req, _ := paddedEcho("1", max+1)
			c.write(req + "\n")
			c.expect(parseError)
			c.echo()
		}},
		{name: "one byte over then the next line in the same write", run: func(c *ndClient) {
			req, _ := paddedEcho("1", max+1)
			req2, res2 := paddedEcho("2", 100)
			c.write(req + "\n" + req2 + "\n")
			c.expect(parseError)
			c.expect(res2)
		}},
		{name: "reported before its newline and only once", run: func(c *ndClient) {
			c.write(strings.Repeat("x", max+1))
			c.expect(parseError) // no newline sent yet
			for range 8 {
				c.write(strings.Repeat("y", 4096))
			}
			c.write("\n")
			c.echo() // the echo answer is the next message: one parse error only
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialND(t, gw)
			tt.run(c)
			c.expectSettled()
		})
	}
}

// TestNDJSONMalformedLineKeepsServing checks that lines that are not JSON
// get -32700 (id null), lines that are JSON but no valid request get -32600
// (id null), and the connection keeps serving. An empty line is a message
// like any other: it is not JSON, so it is answered -32700 (as an empty
// WebSocket text message is).
func TestNDJSONMalformedLineKeepsServing(t *testing.T) {
	gw := startGateway(t, withNDJSON)
	c := dialND(t, gw)
	for _, tt := range []struct{ line, want string }{
		{line: "not json", want: parseError},
		{line: `{"jsonrpc":"2.0","id":1,`, want: parseError},
		{line: "{}}", want: parseError},
		{line: "", want: parseError},
		{line: "\r", want: parseError}, // CRLF of an empty line
		{line: "[]", want: invalidRequest},
		{line: `{"jsonrpc":"2.0","id":1.5,"method":"edge/echo","params":{}}`, want: invalidRequest},
	} {
		c.send(tt.line)
		c.expect(tt.want)
	}
	c.echo()
}

// TestNDJSONInputFraming checks how NDJSON input is split (CONTRACT.md
// section 1.2): a line that arrives in many TCP writes, CRLF line ends, and
// many lines in one write. Output lines always end in a bare "\n".
func TestNDJSONInputFraming(t *testing.T) {
	gw := startGateway(t, withNDJSON)
	tests := []struct {
		name string
		run  func(c *ndClient)
	}{
		{name: "line split across many writes", run: func(c *ndClient) {
			// TCP_NODELAY is on (Go's default), so each write is its own
			// segment; the gateway reads them as they come.
			req := echoReq(`"split"`, "abc") + "\n"
			for i := range len(req) {
				c.write(req[i : i+1])
			}
			c.expect(echoRes(`"split"`, "abc"))
		}},
		{name: "line split in the middle of CRLF", run: func(c *ndClient) {
			c.write(echoReq("7", "crlf") + "\r")
			c.write("\n")
			c.expect(echoRes("7", "crlf"))
		}},
		{name: "CRLF input", run: func(c *ndClient) {
			c.write(echoReq("1", "a") + "\r\n" + echoReq("2", "b") + "\r\n")
			c.expectAny(echoRes("1", "a"), echoRes("2", "b"))
		}},
		{name: "many lines in one write", run: func(c *ndClient) {
			var in strings.Builder
			var want []string
			for i := range 20 {
				id := strconv.Itoa(i)
				in.WriteString(echoReq(id, "m") + "\n")
				want = append(want, echoRes(id, "m"))
			}
			c.write(in.String())
			c.expectAny(want...)
		}},
		{name: "two lines split at odd places", run: func(c *ndClient) {
			s := echoReq(`"a"`, "1") + "\n" + echoReq(`"b"`, "2") + "\r\n"
			c.write(s[:5])
			c.write(s[5 : len(s)/2])
			c.write(s[len(s)/2 : len(s)-1])
			c.write(s[len(s)-1:])
			c.expectAny(echoRes(`"a"`, "1"), echoRes(`"b"`, "2"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialND(t, gw)
			tt.run(c)
			c.expectSettled()
		})
	}
}

// TestNDJSONTCPHalfCloseAnswersEverything is the regression test for NDJSON
// over TCP treating the client's half-close (shutdown(SHUT_WR), as `nc -N`
// does) as an abort: gnet ends a connection as soon as a read returns EOF, so
// the session was closed, the request in flight got no answer and a final
// line without its "\n" was dropped, where stdio answers both (cmd/edge's
// TestStdioEOF). The same input must get the same answers on both transports
// (CONTRACT.md section 1.2): every request is answered, then the server
// closes the connection.
func TestNDJSONTCPHalfCloseAnswersEverything(t *testing.T) {
	gw := startGateway(t, withNDJSON)
	c := dialND(t, gw)
	c.write(`{"jsonrpc":"2.0","id":1,"method":"edge/sleep","params":{"ms":50}}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"edge/echo","params":{}}`)
	if err := c.conn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.expectAny(`{"jsonrpc":"2.0","id":1,"result":{"sleptMs":50}}`, `{"jsonrpc":"2.0","id":2,"result":{}}`)
	c.expectEOF()
}

// TestNDJSONTCPHalfCloseAfterRead is the other order of the same bug: the
// request was read and is held in the backend before the client half-closes,
// so the EOF arrives on its own, in a later read. The held request is still
// answered once it finishes, and a subscription still running then ends with
// subscription/closed "done", as on stdio.
func TestNDJSONTCPHalfCloseAfterRead(t *testing.T) {
	gw := startGateway(t, withNDJSON, func(c *gwConfig) { c.loop.Loops = 1 })
	c := dialND(t, gw)
	c.send(`{"jsonrpc":"2.0","id":"w","method":"watch","params":{}}`)
	c.expect(`{"jsonrpc":"2.0","id":"w","result":{"subscriptionId":"s1","runId":null,"atCursor":null}}`)
	c.send(gate(`"held"`, "halfclose"))
	gw.waitGate("halfclose", 1)
	if err := c.conn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// The gate opens (directly in the backend) only once the loop has seen
	// the EOF, which the client cannot observe directly: on the gateway's
	// only loop, a round trip on a second connection, whose request was
	// sent after the EOF was already pending, comes after it.
	other := dialND(t, gw)
	other.echo()
	gw.openGate("halfclose")
	c.expect(gateResult(`"held"`, "halfclose"))
	c.expect(`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done"}}`)
	c.expectEOF()
}

// TestNDJSONTCPHalfClosedShutdown checks that graceful shutdown still ends a
// half-closed NDJSON connection whose request outlives the shutdown timeout:
// the connection closes and Shutdown returns. Whether the request still
// running at the deadline gets SERVER_SHUTTING_DOWN or nothing is the
// shutdown's business (CONTRACT.md section 9); nothing else may arrive.
func TestNDJSONTCPHalfClosedShutdown(t *testing.T) {
	gw := startGateway(t, withNDJSON, func(c *gwConfig) {
		c.loop.Loops = 1
		c.loop.ShutdownTimeout = 100 * time.Millisecond
	})
	c := dialND(t, gw)
	c.send(gate(`"held"`, "halfshut"))
	gw.waitGate("halfshut", 1)
	if err := c.conn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	other := dialND(t, gw) // see TestNDJSONTCPHalfCloseAfterRead
	other.echo()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- gw.srv.Shutdown(ctx)
	}()
	for {
		line, err := c.readLine(readTimeout)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("got %v, want EOF", err)
			}
			break
		}
		if line != `{"jsonrpc":"2.0","id":"held","error":{"code":-32000,"message":"Server shutting down","data":{"code":"SERVER_SHUTTING_DOWN"}}}` {
			t.Fatalf("got %s, want nothing or SERVER_SHUTTING_DOWN, then EOF", line)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(readTimeout):
		t.Fatal("Shutdown did not return")
	}
	gw.waitGate("halfshut", 0)
}

// TestNDJSONCancelRequestIsInvalid checks that $/cancelRequest is not
// honoured on NDJSON (CONTRACT.md section 1.2): it is an ordinary id-less
// envelope and gets -32600 with id null, and the request it names goes on
// and answers. Variants with a numeric id and extra members get the same.
func TestNDJSONCancelRequestIsInvalid(t *testing.T) {
	gw := startGateway(t, withNDJSON)
	c := dialND(t, gw)
	opener := dialND(t, gw)
	c.send(gate(`"c"`, "ndcancel"))
	gw.waitGate("ndcancel", 1)
	c.send(cancel(`"c"`))
	c.expect(invalidRequest)
	c.send(cancel(`1`))
	c.expect(invalidRequest)
	c.send(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"c"},"x":1}`)
	c.expect(invalidRequest)
	if s, others := c.statsNow(); s.InFlightIDs != 1 || s.Tasks != 1 || len(others) > 0 {
		t.Fatalf("stats %+v, messages %q; want the gated request still in flight", s, others)
	}
	opener.send(`{"jsonrpc":"2.0","id":1,"method":"edge/open","params":{"name":"ndcancel"}}`)
	opener.expect(`{"jsonrpc":"2.0","id":1,"result":{"released":1}}`)
	c.expect(gateResult(`"c"`, "ndcancel"))
	c.expectSettled()
}

// TestNDJSONConnRecognisedOnEphemeralPort is the regression test for NDJSON
// connections served as WebSocket. loop.Server.isNDJSON compared the
// connection's c.LocalAddr() with NDJSONAddr(), but gnet's Conn.LocalAddr()
// is the listener's configured address as resolved from its string: with
// port 0 it stays "127.0.0.2:0" and never equals the bound port, so every
// connection of the NDJSON listener got the WebSocket handshake parser (no
// answer to a line; HTTP 400 once a blank line ends the "header"). Now each
// listener's acceptor hands its binding to OnOpen with the connection.
func TestNDJSONConnRecognisedOnEphemeralPort(t *testing.T) {
	gw := startGateway(t, withNDJSON)
	c := dialNDRaw(t, gw)
	c.write(echoReq("1", "x") + "\n\r\n")
	c.expectAny(echoRes("1", "x"), parseError) // parseError: the blank line
}

// TestNDJSONListenSameAddressString is the regression test for listeners
// told apart by their address string. loop.Server finds each listener's bound
// address with gnet's Engine.DupListener(network, addr), which matches the
// address string; with Listen and NDJSONListen both "127.0.0.1:0" (two
// ephemeral ports) both lookups return whichever of the two listeners gnet's
// map yields first, so Addr() and NDJSONAddr() can name the same listener or
// be swapped, and connections get the other listener's binding. The gateway
// must either refuse that configuration or serve WebSocket on Addr() and
// NDJSON on NDJSONAddr().
func TestNDJSONListenSameAddressString(t *testing.T) {
	watchdog(t)
	logs := &testgw.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	pool := backend.NewPool(64, time.Second)
	t.Cleanup(pool.Close) // runs last: after the engine stopped
	mem := backend.NewMemory()
	rs, err := rpc.NewServer(rpc.Config{Handler: mem, Pool: pool, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := loop.New(loop.Config{Listen: "127.0.0.1:0", NDJSONListen: "127.0.0.1:0", Loops: 1, Logger: logger}, rs)
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		t.Logf("refused, as allowed: %v", err)
		return
	}
	t.Cleanup(func() { testgw.Stop(t, srv) })
	gw := &gateway{t: t, srv: srv, rpc: rs, mem: mem, pool: pool, addr: srv.Addr().String(), logs: logs}
	if a, n := srv.Addr().String(), srv.NDJSONAddr().String(); a == n {
		t.Fatalf("Addr() and NDJSONAddr() are both %s", a)
	}
	ws := dial(t, gw) // requires 101 Switching Protocols
	ws.echo()
	nd := dialND(t, gw)
	nd.echo()
}
