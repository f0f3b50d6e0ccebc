// Command gorilla is the gorilla/websocket peer of edge's benchmark suite: a
// classic goroutine-per-connection JSON-RPC 2.0 server, written the way a
// typical idiomatic Go service would be (encoding/json into json.RawMessage,
// one read loop per connection, writes serialised by a per-connection mutex).
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
// Usage: gorilla --listen 127.0.0.1:0 [--tls-cert FILE --tls-key FILE]. Once
// accepting it prints one line "listening <host:port>" to stdout; logs go to
// stderr; SIGTERM/SIGINT exit 0. With --tls-cert and --tls-key it serves
// wss:// on the same listener (http.Server.ServeTLS: crypto/tls with Go's
// defaults, TLS 1.2 and later).
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

const (
	// maxMessageBytes matches edge's default text message limit (CONTRACT.md section 1.1).
	maxMessageBytes = 1 << 20
	// writeWait bounds one frame write, as in gorilla's own examples.
	writeWait = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gorilla:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then closes every connection and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gorilla", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on, host:port (port 0 picks a free port)")
	certFile := fs.String("tls-cert", "", "serve wss:// with this PEM certificate (chain) file; needs --tls-key")
	keyFile := fs.String("tls-key", "", "the PEM private key of --tls-cert")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" {
		return errors.New("--listen is required")
	}
	if (*certFile == "") != (*keyFile == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if *certFile != "" {
		// Load them now: a bad file is an error before the listening line.
		if _, err := tls.LoadX509KeyPair(*certFile, *keyFile); err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	h := newHub()
	srv := &http.Server{Handler: h, ErrorLog: log.New(stderr, "gorilla: ", 0)}
	served := make(chan error, 1)
	go func() {
		if *certFile != "" {
			served <- srv.ServeTLS(ln, *certFile, *keyFile)
		} else {
			served <- srv.Serve(ln)
		}
	}()
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	_ = srv.Close() // the listener and any not-yet-upgraded connections
	h.closeAll()    // hijacked WebSocket connections are ours to close
	return nil
}

var upgrader = websocket.Upgrader{
	// No origin check and no compression (EnableCompression defaults to false).
	CheckOrigin: func(*http.Request) bool { return true },
}

// hub holds the live connections and the topic subscriptions. Safe for
// concurrent use.
type hub struct {
	mu     sync.Mutex
	conns  map[*conn]struct{}           // guarded by mu
	topics map[string]map[*sub]struct{} // guarded by mu
}

// sub is one edge/topic subscription of one connection.
type sub struct {
	c    *conn  // immutable
	id   string // immutable: "s1", "s2", ... per connection
	name string // immutable: topic name
	seq  uint64 // guarded by c.wmu
}

// conn is one upgraded connection: its read loop runs in ServeHTTP, and any
// goroutine may write through write/deliver.
type conn struct {
	ws   *websocket.Conn
	h    *hub
	wmu  sync.Mutex // serialises frames on ws
	subs []*sub     // owned by the read loop
}

func newHub() *hub {
	return &hub{conns: make(map[*conn]struct{}), topics: make(map[string]map[*sub]struct{})}
}

func (h *hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has already answered with an HTTP error
	}
	ws.SetReadLimit(maxMessageBytes)
	c := &conn{ws: ws, h: h}
	h.mu.Lock()
	h.conns[c] = struct{}{}
	h.mu.Unlock()
	defer h.drop(c)
	c.readLoop()
}

// drop forgets c and its subscriptions and closes its socket.
func (h *hub) drop(c *conn) {
	h.mu.Lock()
	delete(h.conns, c)
	for _, s := range c.subs {
		if set := h.topics[s.name]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(h.topics, s.name)
			}
		}
	}
	h.mu.Unlock()
	_ = c.ws.Close()
}

// closeAll sends 1001 going away to every connection and closes it, which
// ends its read loop.
func (h *hub) closeAll() {
	h.mu.Lock()
	conns := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, "")
	for _, c := range conns {
		_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		_ = c.ws.Close()
	}
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

func (c *conn) readLoop() {
	for {
		typ, msg, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		if typ != websocket.TextMessage {
			continue
		}
		if err := c.handle(msg); err != nil {
			return
		}
	}
}

// handle answers one message. Only a failed write is returned.
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

func (c *conn) writeLocked(b []byte) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
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
