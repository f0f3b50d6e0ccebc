package load

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// testServer is a small in-process WebSocket server speaking the jsonrpc
// dialect (edge/echo, edge/topic, edge/publish, edge/sleep with
// $/cancelRequest, edge/stats, and test/silent, never answered) or, with raw
// set, echoing every text message.
// It exists to test the generator without the real servers.
type testServer struct {
	ln  net.Listener
	raw bool
	tls *tls.Config // serve wss:// (set before start)
	// closeEvery > 0: every closeEvery-th connection accepted is closed by
	// the server after its first message (without answering it), with a
	// close frame first when closeFrame is set. Immutable after start.
	closeEvery int
	closeFrame bool

	accepted atomic.Int64
	mu       sync.Mutex
	subs     map[*srvConn]struct{} // guarded by mu
	seq      int64                 // guarded by mu
	gates    map[string][]func()   // guarded by mu: edge/gate waiters by name
	conns    sync.WaitGroup
}

type srvConn struct {
	nc net.Conn
	mu sync.Mutex // serialises writes

	smu     sync.Mutex
	pending map[string]chan struct{} // guarded by smu: in-flight edge/sleep by id
	gated   int                      // guarded by smu: edge/gate calls waiting
}

func (c *srvConn) write(p []byte) {
	c.mu.Lock()
	wsutil.WriteServerText(c.nc, p)
	c.mu.Unlock()
}

func startTestServer(t testing.TB, raw bool) *testServer {
	t.Helper()
	return start(t, &testServer{raw: raw})
}

// start starts s, configured but not yet listening.
func start(t testing.TB, s *testServer) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.ln, s.subs, s.gates = ln, map[*srvConn]struct{}{}, map[string][]func(){}
	go s.serve()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *testServer) target(d Dialect) Target {
	t := Target{Addr: s.ln.Addr().String(), Dialect: d}
	if s.tls != nil {
		t.TLS = ClientTLS()
	}
	return t
}

// serverTLS is a server configuration with a new self-signed certificate.
func serverTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, key, err := SelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{kp}}
}

func (s *testServer) serve() {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.handle(nc)
	}
}

func (s *testServer) handle(nc net.Conn) {
	defer nc.Close()
	if _, err := ws.Upgrade(nc); err != nil {
		return
	}
	c := &srvConn{nc: nc, pending: map[string]chan struct{}{}}
	closing := s.closeEvery > 0 && s.accepted.Add(1)%int64(s.closeEvery) == 0
	defer func() {
		s.mu.Lock()
		delete(s.subs, c)
		s.mu.Unlock()
	}()
	rw := struct {
		io.Reader
		io.Writer
	}{bufio.NewReader(nc), nc}
	for {
		msg, op, err := wsutil.ReadClientData(rw)
		if err != nil {
			return
		}
		if op != ws.OpText {
			continue
		}
		if closing {
			if s.closeFrame {
				c.mu.Lock()
				ws.WriteFrame(nc, ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusGoingAway, "bye")))
				c.mu.Unlock()
			}
			return
		}
		if s.raw {
			c.write(msg)
			continue
		}
		s.dispatch(c, msg)
	}
}

func (s *testServer) dispatch(c *srvConn, msg []byte) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(msg, &req) != nil {
		return
	}
	reply := func(result string) {
		c.write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + result + `}`))
	}
	switch req.Method {
	case "edge/echo":
		reply(string(req.Params))
	case "edge/topic":
		s.mu.Lock()
		s.subs[c] = struct{}{}
		s.mu.Unlock()
		reply(`{"subscriptionId":"s1"}`)
	case "edge/publish":
		var p struct {
			Data json.RawMessage `json:"data"`
		}
		json.Unmarshal(req.Params, &p)
		s.mu.Lock()
		s.seq++
		ev := fmt.Sprintf(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"%d","seq":%d,"data":%s}}`, s.seq, s.seq, p.Data)
		subs := make([]*srvConn, 0, len(s.subs))
		for sc := range s.subs {
			subs = append(subs, sc)
		}
		s.mu.Unlock()
		for _, sc := range subs {
			sc.write([]byte(ev))
		}
		reply(fmt.Sprintf(`{"delivered":%d}`, len(subs)))
	case "edge/sleep":
		var p struct {
			Ms int `json:"ms"`
		}
		json.Unmarshal(req.Params, &p)
		ch := make(chan struct{})
		id := string(req.ID)
		c.smu.Lock()
		c.pending[id] = ch
		c.smu.Unlock()
		go func() {
			select {
			case <-time.After(time.Duration(p.Ms) * time.Millisecond):
				c.smu.Lock()
				_, live := c.pending[id]
				delete(c.pending, id)
				c.smu.Unlock()
				if live {
					reply(fmt.Sprintf(`{"sleptMs":%d}`, p.Ms))
				}
			case <-ch:
			}
		}()
	case "$/cancelRequest":
		var p struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(req.Params, &p)
		c.smu.Lock()
		if ch, ok := c.pending[string(p.ID)]; ok {
			close(ch)
			delete(c.pending, string(p.ID))
		}
		c.smu.Unlock()
	case "edge/gate":
		var p struct {
			Name string `json:"name"`
		}
		json.Unmarshal(req.Params, &p)
		c.smu.Lock()
		c.gated++
		c.smu.Unlock()
		s.mu.Lock()
		s.gates[p.Name] = append(s.gates[p.Name], func() {
			c.smu.Lock()
			c.gated--
			c.smu.Unlock()
			reply(`{"name":"` + p.Name + `"}`)
		})
		s.mu.Unlock()
	case "edge/open":
		var p struct {
			Name string `json:"name"`
		}
		json.Unmarshal(req.Params, &p)
		s.mu.Lock()
		ws := s.gates[p.Name]
		delete(s.gates, p.Name)
		s.mu.Unlock()
		for _, f := range ws {
			f()
		}
		reply(fmt.Sprintf(`{"released":%d}`, len(ws)))
	case "test/silent": // never answered
	case "edge/stats":
		c.smu.Lock()
		n := len(c.pending) + c.gated
		c.smu.Unlock()
		reply(fmt.Sprintf(`{"inFlightIds":%d,"tasks":%d,"subscriptions":0,"outboundBytes":0}`, n, n))
	default:
		c.write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"error":{"code":-32601,"message":"Method not found"}}`))
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func short(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return strings.TrimSpace(s)
}
