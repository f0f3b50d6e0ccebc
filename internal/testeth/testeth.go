// Package testeth is an Ethereum-style JSON-RPC node over WebSocket for
// tests of plain JSON-RPC subscriptions (CONTRACT.md section 10): a real
// WebSocket server on 127.0.0.1 that serves eth_subscribe (its result a hex
// id string, numbered per connection from 0x1, so that two connections
// hand out the same ids), pushes eth_subscription notifications when a test
// says so, answers eth_unsubscribe true or false, answers any other method
// with its name, and records what it receives. Its ids are 0xfeed01,
// 0xfeed02, ... on each connection: unlike any id edge gives its clients
// (0x1, 0x2, ...), and the same on two connections. It is a stand-in written for
// edge's tests, not a client of any Ethereum library.
package testeth

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// Sub is one subscription the node made: the connection it was made on
// (numbered from 0 in accept order) and its id there.
type Sub struct {
	Conn int
	ID   string
}

// Node is a running node. Its methods are safe for concurrent use.
type Node struct {
	URL string // ws://127.0.0.1:PORT/

	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	conns   []*conn
	live    []Sub     // subscriptions not unsubscribed, in the order made
	unsubs  []Sub     // eth_unsubscribe calls received: the connection and the id param
	methods []string  // every method received, in order
	hold    bool      // eth_subscribe answers wait for Release
	held    []heldSub // the answers held
}

type heldSub struct {
	c  *conn
	id json.RawMessage
}

type conn struct {
	n      int
	nc     net.Conn
	wmu    sync.Mutex // serializes writes
	nextID uint64     // guarded by Node.mu
}

// Start starts a node and stops it in t.Cleanup.
func Start(t testing.TB) *Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{URL: "ws://" + ln.Addr().String() + "/", ln: ln}
	n.wg.Add(1)
	go n.accept()
	t.Cleanup(n.Close)
	return n
}

// Close stops the node: the listener and every connection close.
func (n *Node) Close() {
	n.ln.Close()
	n.DropConns()
	n.wg.Wait()
}

// DropConns closes every open connection, as a node that crashed would
// (edge reconnects).
func (n *Node) DropConns() {
	n.mu.Lock()
	cs := n.conns
	n.conns = nil
	n.live = nil
	n.mu.Unlock()
	for _, c := range cs {
		c.nc.Close()
	}
}

func (n *Node) accept() {
	defer n.wg.Done()
	count := 0
	for {
		nc, err := n.ln.Accept()
		if err != nil {
			return
		}
		if _, err := ws.Upgrade(nc); err != nil {
			nc.Close()
			continue
		}
		c := &conn{n: count, nc: nc}
		count++
		n.mu.Lock()
		n.conns = append(n.conns, c)
		n.mu.Unlock()
		n.wg.Add(1)
		go n.serve(c)
	}
}

// request is what the node reads of a message.
type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func (n *Node) serve(c *conn) {
	defer n.wg.Done()
	defer c.nc.Close()
	rw := struct {
		io.Reader
		io.Writer
	}{bufio.NewReader(c.nc), c.nc}
	for {
		msg, err := wsutil.ReadClientText(rw)
		if err != nil {
			return
		}
		var r request
		if json.Unmarshal(msg, &r) != nil {
			continue
		}
		n.apply(c, r)
	}
}

func (n *Node) apply(c *conn, r request) {
	n.mu.Lock()
	n.methods = append(n.methods, r.Method)
	var answer string
	switch r.Method {
	case "eth_subscribe":
		if n.hold {
			n.held = append(n.held, heldSub{c, r.ID})
			n.mu.Unlock()
			return
		}
		answer = n.subscribeLocked(c, r.ID)
	case "eth_unsubscribe":
		var ps []string
		json.Unmarshal(r.Params, &ps)
		found := false
		if len(ps) == 1 {
			n.unsubs = append(n.unsubs, Sub{c.n, ps[0]})
			for i, s := range n.live {
				if s == (Sub{c.n, ps[0]}) {
					n.live = append(n.live[:i], n.live[i+1:]...)
					found = true
					break
				}
			}
		}
		answer = `{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":` + strconv.FormatBool(found) + `}`
	default:
		answer = `{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":` + strconv.Quote(r.Method) + `}`
	}
	n.mu.Unlock()
	if r.ID != nil {
		c.write(answer)
	}
}

// subscribeLocked makes a subscription on c and returns the answer to
// request id. Called with mu held.
func (n *Node) subscribeLocked(c *conn, id json.RawMessage) string {
	c.nextID++
	s := Sub{c.n, fmt.Sprintf("0xfeed%02x", c.nextID)}
	n.live = append(n.live, s)
	return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":"` + s.ID + `"}`
}

func (c *conn) write(msg string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return wsutil.WriteServerText(c.nc, []byte(msg))
}

// Hold makes eth_subscribe wait for Release: its answer is held.
func (n *Node) Hold() {
	n.mu.Lock()
	n.hold = true
	n.mu.Unlock()
}

// Release answers every held eth_subscribe and stops holding.
func (n *Node) Release() {
	n.mu.Lock()
	held := n.held
	n.held, n.hold = nil, false
	answers := make([]string, len(held))
	for i, h := range held {
		answers[i] = n.subscribeLocked(h.c, h.id)
	}
	n.mu.Unlock()
	for i, h := range held {
		h.c.write(answers[i])
	}
}

// Held returns the connections of the eth_subscribe calls held, in order.
func (n *Node) Held() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	var cs []int
	for _, h := range n.held {
		cs = append(cs, h.c.n)
	}
	return cs
}

// Live returns the subscriptions not unsubscribed, in the order made.
func (n *Node) Live() []Sub {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Sub(nil), n.live...)
}

// Unsubscribed returns the eth_unsubscribe calls received, in order: the
// connection each came on and the id it named.
func (n *Node) Unsubscribed() []Sub {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Sub(nil), n.unsubs...)
}

// Methods returns every method received, in order.
func (n *Node) Methods() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.methods...)
}

// Push sends s's connection an eth_subscription notification for s with
// result, raw JSON. It fails when the connection is gone.
func (n *Node) Push(s Sub, result string) error {
	n.mu.Lock()
	var c *conn
	for _, x := range n.conns {
		if x.n == s.Conn {
			c = x
		}
	}
	n.mu.Unlock()
	if c == nil {
		return fmt.Errorf("testeth: no connection %d", s.Conn)
	}
	return c.write(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"` + s.ID + `","result":` + result + `}}`)
}
