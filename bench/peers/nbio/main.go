// Command nbio is the lesismal/nbio peer of edge's benchmark suite: an
// event-loop WebSocket server (nbhttp.Engine + nbhttp/websocket) whose
// OnMessage callback answers JSON-RPC 2.0, written the way a typical nbio
// service would be (encoding/json into json.RawMessage, nbio's defaults, one
// poller per GOMAXPROCS).
//
// Dialect "jsonrpc", one JSON message per text frame:
//
//	-> {"jsonrpc":"2.0","id":1,"method":"edge/echo","params":P}
//	<- {"jsonrpc":"2.0","id":1,"result":P}                       (P verbatim)
//	-> {"jsonrpc":"2.0","id":2,"method":"edge/topic","params":{"name":"t"}}
//	<- {"jsonrpc":"2.0","id":2,"result":{"subscriptionId":"s1"}}
//	-> {"jsonrpc":"2.0","id":3,"method":"edge/publish","params":{"name":"t","data":D}}
//	<- {"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","seq":1,"data":D}}  (to every subscriber)
//	<- {"jsonrpc":"2.0","id":3,"result":{"delivered":1}}
//
// Usage: nbio --listen 127.0.0.1:0. Once accepting it prints one line
// "listening <host:port>" to stdout; logs go to stderr; SIGTERM/SIGINT exit 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

// maxMessageBytes matches edge's default text message limit (CONTRACT.md
// section 1.1); nbio's own default is 4 MiB.
const maxMessageBytes = 1 << 20

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "nbio:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then shuts the engine down and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nbio", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on, host:port (port 0 picks a free port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" {
		return errors.New("--listen is required")
	}
	// nbio logs to stdout by default; stdout carries only the listening line.
	logging.Output = stderr

	h := newHub()
	u := websocket.NewUpgrader()
	u.CheckOrigin = func(*http.Request) bool { return true }
	u.MessageLengthLimit = maxMessageBytes
	u.OnOpen(h.open)
	u.OnMessage(h.message)
	u.OnClose(h.close)

	var bound net.Addr // set by Listen inside engine.Start
	engine := nbhttp.NewEngine(nbhttp.Config{
		Network: "tcp",
		Addrs:   []string{*listen},
		// NPoller is nbio's event-loop count (its default is NumCPU/4).
		NPoller: runtime.GOMAXPROCS(0),
		// OnMessage keeps no reference to the payload, so nbio may recycle it
		// (as its own DefaultEngine does).
		ReleaseWebsocketPayload: true,
		Listen: func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err == nil {
				bound = ln.Addr()
			}
			return ln, err
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				http.NotFound(w, r)
				return
			}
			_, _ = u.Upgrade(w, r, nil) // on error Upgrade has answered with an HTTP error
		}),
	})
	if err := engine.Start(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening %s\n", bound)

	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = engine.Shutdown(sctx) // closes every connection
	return nil
}

// hub holds the topic subscriptions. Safe for concurrent use.
type hub struct {
	mu     sync.Mutex
	topics map[string]map[*sub]struct{} // guarded by mu
}

// sub is one edge/topic subscription of one connection.
type sub struct {
	c    *conn  // immutable
	id   string // immutable: "s1", "s2", ... per connection
	name string // immutable: topic name
	seq  uint64 // guarded by c.wmu
}

// conn is the per-connection state kept in the nbio connection's session.
type conn struct {
	ws   *websocket.Conn
	h    *hub
	wmu  sync.Mutex // orders a subscription's result before its events, guards seq and subs
	subs []*sub     // guarded by wmu
	done bool       // guarded by wmu: closed, no new subscriptions
}

func newHub() *hub {
	return &hub{topics: make(map[string]map[*sub]struct{})}
}

func (h *hub) open(ws *websocket.Conn) {
	ws.SetSession(&conn{ws: ws, h: h})
}

func (h *hub) message(ws *websocket.Conn, typ websocket.MessageType, msg []byte) {
	c, ok := ws.Session().(*conn)
	if !ok || typ != websocket.TextMessage {
		return
	}
	if err := c.handle(msg); err != nil {
		_ = ws.Close()
	}
}

// close forgets the subscriptions of a closed connection.
func (h *hub) close(ws *websocket.Conn, _ error) {
	c, ok := ws.Session().(*conn)
	if !ok {
		return
	}
	c.wmu.Lock()
	subs := c.subs
	c.subs, c.done = nil, true
	c.wmu.Unlock()
	h.mu.Lock()
	for _, s := range subs {
		if set := h.topics[s.name]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(h.topics, s.name)
			}
		}
	}
	h.mu.Unlock()
}

// publish delivers data to every subscriber of name and returns how many
// events were written.
func (h *hub) publish(name string, data json.RawMessage) int {
	h.mu.Lock()
	subs := make([]*sub, 0, len(h.topics[name]))
	for s := range h.topics[name] {
		subs = append(subs, s)
	}
	h.mu.Unlock()
	n := 0
	for _, s := range subs {
		if s.c.deliver(s, data) == nil {
			n++
		}
	}
	return n
}

// request is a JSON-RPC 2.0 request; id and params stay raw so they are
// echoed byte for byte.
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// handle answers one message on nbio's per-connection executor. Only a
// failed write is returned.
func (c *conn) handle(msg []byte) error {
	var req request
	if err := json.Unmarshal(msg, &req); err != nil {
		return c.write(appendError(nil, nil, -32700, "Parse error"))
	}
	if req.JSONRPC != "2.0" || req.Method == "" || len(req.ID) == 0 {
		return c.write(appendError(nil, req.ID, -32600, "Invalid Request"))
	}
	switch req.Method {
	case "edge/echo":
		return c.write(appendResult(nil, req.ID, req.Params))
	case "edge/topic":
		var p struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(req.Params, &p) != nil || p.Name == "" {
			return c.write(appendError(nil, req.ID, -32602, "Invalid params"))
		}
		return c.subscribe(req.ID, p.Name)
	case "edge/publish":
		var p struct {
			Name string          `json:"name"`
			Data json.RawMessage `json:"data"`
		}
		if json.Unmarshal(req.Params, &p) != nil || p.Name == "" {
			return c.write(appendError(nil, req.ID, -32602, "Invalid params"))
		}
		n := c.h.publish(p.Name, p.Data)
		result := append(strconv.AppendInt([]byte(`{"delivered":`), int64(n), 10), '}')
		return c.write(appendResult(nil, req.ID, result))
	default:
		return c.write(appendError(nil, req.ID, -32601, "Method not found"))
	}
}

// subscribe registers a subscription and answers with its id while holding
// the write lock, so the result precedes the subscription's first event.
func (c *conn) subscribe(id json.RawMessage, name string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.done {
		return net.ErrClosed
	}
	s := &sub{c: c, id: "s" + strconv.Itoa(len(c.subs)+1), name: name}
	c.subs = append(c.subs, s)
	c.h.mu.Lock()
	set := c.h.topics[name]
	if set == nil {
		set = make(map[*sub]struct{})
		c.h.topics[name] = set
	}
	set[s] = struct{}{}
	c.h.mu.Unlock()
	return c.writeLocked(appendResult(nil, id, []byte(`{"subscriptionId":"`+s.id+`"}`)))
}

// deliver writes one event of s. Safe for concurrent use.
func (c *conn) deliver(s *sub, data json.RawMessage) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	s.seq++
	b := append([]byte(`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"`), s.id...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, s.seq, 10)
	b = append(b, `,"data":`...)
	b = appendRaw(b, data)
	b = append(b, "}}"...)
	return c.writeLocked(b)
}

// write sends one text frame. Safe for concurrent use.
func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(b)
}

// writeLocked queues one text frame on nbio's non-blocking writer.
func (c *conn) writeLocked(b []byte) error {
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

func appendResult(b, id, result []byte) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = appendRaw(b, id)
	b = append(b, `,"result":`...)
	b = appendRaw(b, result)
	return append(b, '}')
}

func appendError(b, id []byte, code int, msg string) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = appendRaw(b, id)
	b = append(b, `,"error":{"code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"message":`...)
	b = strconv.AppendQuote(b, msg)
	return append(b, "}}"...)
}

// appendRaw appends a raw JSON value, or null when it is absent.
func appendRaw(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, "null"...)
	}
	return append(b, v...)
}
