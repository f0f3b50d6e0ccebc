package test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
)

// TestUpstreamCollidingIDs: many clients, all connected at once, each
// pipeline the same ids 1..64 through one proxy that multiplexes them onto
// two NDJSON connections to an upstream edge. Every answer reaches the
// client that sent the call, with that client's id, and with the params
// that identify the client and the call, byte for byte; one call in eight
// is an initialize whose error the upstream builds from the params, so
// errors are checked for misrouting too. Each client gets its 64 answers,
// then its edge/stats shows nothing held and no other message came first.
//
// 1,000 clients without the race detector (about 2 s on a shared 2-core
// machine); 500 with it, where 1,000 take 5 s alone and up to 15 s while
// other packages' tests share the cores.
func TestUpstreamCollidingIDs(t *testing.T) {
	clients, calls := 1000, 64
	if raceEnabled {
		clients = 500
	}
	u := startUpstreamEdgeWith(t, testgw.Config{NDJSON: true, QuietLogs: true,
		// The proxy's two connections carry every client's calls.
		RPC: rpc.Config{MaxConnTasks: clients * calls}})
	p := startProxy(t, upstream.Config{}, []string{"e=" + u.nd})

	conns := make([]*loadConn, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	sem := make(chan struct{}, 64) // dials in flight, within the listen backlog
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := dialLoad(p.addr)
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.conn.Close()
			}
		}
	})
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.run(i, calls); err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 10 {
			t.Error(err)
		}
	}
	t.Logf("%d clients x %d calls in %s", clients, calls, time.Since(start).Round(time.Millisecond))
	if n := p.set.Upstreams()[0].Dropped(); n != 0 {
		t.Fatalf("the proxy dropped %d upstream messages", n)
	}
}

// loadConn is a bare WebSocket client for load: no testing.T, errors
// returned.
type loadConn struct {
	conn net.Conn
	br   *bufio.Reader
}

func dialLoad(addr string) (*loadConn, error) {
	conn, err := net.DialTimeout("tcp", addr, readTimeout)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(readTimeout))
	key := base64.StdEncoding.EncodeToString([]byte("edge-e2e-key-16b"))
	if _, err := io.WriteString(conn, upgradeRequest(addr, "/", key)); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		conn.Close()
		return nil, fmt.Errorf("upgrade: %v %v", resp, err)
	}
	conn.SetDeadline(time.Time{})
	return &loadConn{conn: conn, br: br}, nil
}

// run sends calls pipelined requests with ids 1..calls in one write and
// checks that each is answered once, as client i expects.
func (c *loadConn) run(i, calls int) error {
	want := make(map[string]int, calls)
	var out bytes.Buffer
	for id := 1; id <= calls; id++ {
		req, resp := collidingCall(i, id)
		want[resp] = id
		out.Write(textFrame(req))
	}
	c.conn.SetDeadline(time.Now().Add(4 * readTimeout))
	if _, err := c.conn.Write(out.Bytes()); err != nil {
		return err
	}
	for range calls {
		msg, err := c.readText()
		if err != nil {
			return fmt.Errorf("%d answers missing: %w", len(want), err)
		}
		if _, ok := want[msg]; !ok {
			return fmt.Errorf("unexpected or repeated message %s", msg)
		}
		delete(want, msg)
	}
	// Nothing else came first, and the connection holds nothing.
	if _, err := c.conn.Write(textFrame(`{"jsonrpc":"2.0","id":"stats","method":"edge/stats","params":{}}`)); err != nil {
		return err
	}
	msg, err := c.readText()
	if want := `{"jsonrpc":"2.0","id":"stats","result":{"inFlightIds":0,"tasks":0,"subscriptions":0,"outboundBytes":0}}`; err != nil || msg != want {
		return fmt.Errorf("after the answers: %s %v, want %s", msg, err, want)
	}
	return nil
}

// readText reads one text message.
func (c *loadConn) readText() (string, error) {
	h, err := ws.ReadHeader(c.br)
	if err != nil {
		return "", err
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(c.br, p); err != nil {
		return "", err
	}
	if h.OpCode != ws.OpText {
		return "", fmt.Errorf("got %s, want a text message", describe(h.OpCode, p))
	}
	return string(p), nil
}

// collidingCall returns call id of client i and its answer: an edge/echo
// of params naming both, or (one in eight) an initialize whose error
// details carry them.
func collidingCall(i, id int) (req, resp string) {
	ids := strconv.Itoa(id)
	tag := `"c` + strconv.Itoa(i) + `-` + ids + `"`
	if id%8 == 0 {
		return `{"jsonrpc":"2.0","id":` + ids + `,"method":"initialize","params":{"protocolVersion":` + tag + `}}`,
			`{"jsonrpc":"2.0","id":` + ids + `,"error":{"code":-32000,"message":"Unsupported protocol version","data":{"code":"UNSUPPORTED_PROTOCOL_VERSION","details":{"requestedProtocolVersion":` + tag + `,"supportedProtocolVersion":"openengine.cluster/v1"}}}}`
	}
	params := `{"client":` + strconv.Itoa(i) + `,"id":` + ids + `,"tag":` + tag + `}`
	return `{"jsonrpc":"2.0","id":` + ids + `,"method":"edge/echo","params":` + params + `}`,
		`{"jsonrpc":"2.0","id":` + ids + `,"result":` + params + `}`
}
