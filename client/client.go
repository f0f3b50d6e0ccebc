// Package client is a Go client for edge and any OECP v1 JSON-RPC 2.0 server
// over WebSocket (ws://, wss://) or NDJSON over TCP (tcp://). It correlates responses,
// multiplexes subscriptions, and turns context cancellation into
// $/cancelRequest.
//
// A Client is safe for concurrent use. Its read loop never blocks on a slow
// subscriber: each subscription has a bounded local buffer, and one that
// overflows is ended locally with SLOW_CONSUMER and cancelled on the server.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
)

// Options configures Dial. Zero values mean the defaults.
type Options struct {
	// MaxMessageBytes is the largest inbound message accepted [1048576]; a
	// larger one ends the connection with ErrMessageTooBig.
	MaxMessageBytes int
	// SubscriptionBuffer is the number of undelivered events a subscription
	// holds locally before it is ended with SLOW_CONSUMER [1024].
	SubscriptionBuffer int
	// Dialer dials the TCP connection [a zero net.Dialer].
	Dialer *net.Dialer
	// TLSConfig configures wss:// [nil: the system roots, the URL's host as
	// the server name].
	TLSConfig *tls.Config
	// Token, when set, is sent as "Authorization: Bearer <Token>" on the
	// WebSocket upgrade. It never appears in an error.
	Token string
	// Header holds further headers for the WebSocket upgrade.
	Header http.Header
	// CloseTimeout bounds how long Close waits for the server's close frame
	// after sending its own (close code 1000) [2s].
	CloseTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultMaxMessageBytes    = 1 << 20
	DefaultSubscriptionBuffer = 1024
	DefaultCloseTimeout       = 2 * time.Second
)

// Sentinel errors of package client. Compare with errors.Is.
var (
	// ErrClosed reports a call on a closed client, or one whose connection ended.
	ErrClosed = errors.New("client: connection closed")
	// ErrMessageTooBig reports an inbound message over Options.MaxMessageBytes.
	ErrMessageTooBig = errors.New("client: inbound message too big")
	// ErrScheme reports a URL that is not ws://, wss:// or tcp://.
	ErrScheme = errors.New("client: url scheme must be ws, wss or tcp")
)

// Error is a JSON-RPC error response (CONTRACT.md section 7).
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	if c := e.DataCode(); c != "" {
		return fmt.Sprintf("rpc error %d: %s (%s)", e.Code, e.Message, c)
	}
	return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message)
}

// DataCode returns data.code, the machine-readable reason ("SERVER_BUSY",
// "DUPLICATE_REQUEST_ID", ...), or "".
func (e *Error) DataCode() string {
	var d struct {
		Code string `json:"code"`
	}
	if len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil {
		return ""
	}
	return d.Code
}

// transport is the framing of one binding.
type transport interface {
	read() ([]byte, error)  // one inbound message; called only by the read loop
	write(msg []byte) error // one outbound message; called with Client.wmu held
	// shut starts the client's close: a WebSocket sends its close frame
	// (1000) and gives the server Options.CloseTimeout to answer it; NDJSON
	// closes at once. The read loop ends when the connection has.
	shut() error
	close() error // ends the connection at once
}

// Client is a connection to a JSON-RPC server. Safe for concurrent use.
type Client struct {
	t    transport // immutable after Dial
	opts Options   // immutable after Dial
	ws   bool      // immutable after Dial: $/cancelRequest is available

	wmu sync.Mutex // serialises writes

	nextID atomic.Int64

	mu      sync.Mutex
	pending map[int64]*call          // guarded by mu: requests awaiting a response
	subs    map[string]*Subscription // guarded by mu: live subscriptions by key (Subscription.key)
	err     error                    // guarded by mu: why the connection ended

	done chan struct{} // closed when the read loop has ended
}

// call is one request awaiting its response.
type call struct {
	subscribe bool          // immutable: the request establishes a subscription
	plain     string        // immutable: a plain subscription's namespace (NS of NS_subscribe), else ""
	ch        chan response // buffered 1: the read loop never blocks on it
	abandoned bool          // guarded by Client.mu: the caller stopped waiting
}

type response struct {
	result json.RawMessage
	err    error
	sub    *Subscription
}

// Dial connects to rawURL: ws://host:port/path or wss://host:port/path for
// WebSocket, tcp://host:port for NDJSON. ctx bounds the dial, the TLS
// handshake and the upgrade. An error names the URL without its userinfo and
// query (where a token may be).
func Dial(ctx context.Context, rawURL string, opts *Options) (*Client, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.SubscriptionBuffer <= 0 {
		o.SubscriptionBuffer = DefaultSubscriptionBuffer
	}
	if o.Dialer == nil {
		o.Dialer = &net.Dialer{}
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("client: invalid URL") // url.Error repeats the URL, token and all
	}
	shown := displayURL(u)
	c := &Client{opts: o, pending: make(map[int64]*call), subs: make(map[string]*Subscription), done: make(chan struct{})}
	switch u.Scheme {
	case "ws", "wss":
		h := o.Header.Clone()
		if o.Token != "" {
			if h == nil {
				h = http.Header{}
			}
			h.Set("Authorization", "Bearer "+o.Token)
		}
		d := ws.Dialer{NetDial: o.Dialer.DialContext, TLSConfig: o.TLSConfig}
		if h != nil {
			d.Header = ws.HandshakeHeaderHTTP(h)
		}
		conn, br, _, err := d.Dial(ctx, rawURL)
		if err != nil {
			return nil, fmt.Errorf("client: dial %s: %w", shown, err)
		}
		c.t = newWSTransport(conn, br, o.MaxMessageBytes, o.CloseTimeout, &c.wmu)
		c.ws = true
	case "tcp":
		conn, err := o.Dialer.DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return nil, fmt.Errorf("client: dial %s: %w", shown, err)
		}
		c.t = &lineTransport{conn: conn, br: bufio.NewReaderSize(conn, 64<<10), max: o.MaxMessageBytes}
	default:
		return nil, fmt.Errorf("%w: %q", ErrScheme, shown)
	}
	go c.readLoop()
	return c, nil
}

// displayURL is u for an error message: without userinfo and query, where
// credentials may be.
func displayURL(u *url.URL) string {
	v := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, Opaque: u.Opaque}
	if u.RawQuery != "" {
		v.RawQuery = "..."
	}
	return v.String()
}

// Close closes the connection: over WebSocket with close code 1000, waiting
// at most Options.CloseTimeout for the server's close frame. Pending calls
// return ErrClosed and subscriptions end. Safe for concurrent use.
func (c *Client) Close() error {
	select {
	case <-c.done:
		return nil // already ended (by the server, or an earlier Close)
	default:
	}
	err := c.t.shut()
	<-c.done
	if errors.Is(err, net.ErrClosed) {
		err = nil // the read loop closed it first
	}
	return err
}

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err reports why the connection ended, or nil while it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Call sends a request and decodes its result into result (unless result is
// nil). params is marshalled with encoding/json (a json.RawMessage is sent as
// is; nil sends {}). When ctx is done first, Call returns ctx.Err() at once
// and, on WebSocket, sends $/cancelRequest for it. A JSON-RPC error response
// is returned as *Error. Safe for concurrent use.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	cl := &call{ch: make(chan response, 1)}
	id, err := c.send(method, params, cl)
	if err != nil {
		return err
	}
	select {
	case r := <-cl.ch:
		if r.err != nil {
			return r.err
		}
		if result != nil {
			if err := json.Unmarshal(r.result, result); err != nil {
				return fmt.Errorf("client: decode result of %s: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		_, waiting := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if waiting && c.ws {
			c.notify(cancelRequest(id))
		}
		return ctx.Err()
	}
}

// send registers cl and writes its request.
func (c *Client) send(method string, params any, cl *call) (int64, error) {
	p, err := marshalParams(params)
	if err != nil {
		return 0, err
	}
	id := c.nextID.Add(1)
	msg := appendRequest(nil, id, method, p)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	c.pending[id] = cl
	c.mu.Unlock()
	if err := c.write(msg); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return 0, err
	}
	return id, nil
}

// appendRequest appends a request with id, method and raw params to dst.
func appendRequest(dst []byte, id int64, method string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"method":`...)
	m, _ := json.Marshal(method)
	dst = append(dst, m...)
	dst = append(dst, `,"params":`...)
	dst = append(dst, params...)
	return append(dst, '}')
}

func marshalParams(params any) ([]byte, error) {
	switch p := params.(type) {
	case nil:
		return []byte("{}"), nil
	case json.RawMessage:
		return p, nil
	case []byte:
		return p, nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("client: marshal params: %w", err)
	}
	return b, nil
}

func (c *Client) write(msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.t.write(msg); err != nil {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return nil
}

// notify writes a notification without waiting for the write lock's holder
// to finish if the read loop called it: it never blocks the read loop.
func (c *Client) notify(msg []byte) {
	go func() { _ = c.write(msg) }()
}

func cancelRequest(id int64) []byte {
	b := append([]byte(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":`), strconv.FormatInt(id, 10)...)
	return append(b, "}}"...)
}

func subscriptionCancel(sid string) []byte {
	q, _ := json.Marshal(sid)
	b := append([]byte(`{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":`), q...)
	return append(b, "}}"...)
}

// inbound is the union of the messages a server sends.
type inbound struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
}

// readLoop reads every inbound message and routes it. It never blocks on a
// caller or a subscriber.
func (c *Client) readLoop() {
	defer close(c.done)
	var err error
	for {
		var msg []byte
		msg, err = c.t.read()
		if err != nil {
			break
		}
		var in inbound
		if json.Unmarshal(msg, &in) != nil {
			continue // not ours to answer; a server never sends garbage
		}
		if in.Method != "" {
			c.notification(&in)
			continue
		}
		c.response(&in)
	}
	c.shutdown(err)
}

func (c *Client) response(in *inbound) {
	id, perr := strconv.ParseInt(string(bytes.TrimSpace(in.ID)), 10, 64)
	if perr != nil {
		return // id null (a parse error we caused?) or not ours
	}
	c.mu.Lock()
	cl := c.pending[id]
	delete(c.pending, id)
	if cl == nil {
		c.mu.Unlock()
		return // cancelled: the late answer is dropped
	}
	var r response
	switch {
	case in.Error != nil:
		r.err = in.Error
	case cl.subscribe:
		// Register before the next message is read: events follow the response.
		r.sub, r.err = c.established(cl, in.Result)
		if r.err != nil {
			break
		}
		if cl.abandoned {
			// The caller gave up but the server established it: cancel it there.
			c.mu.Unlock()
			c.notify(r.sub.cancelMessage())
			return
		}
		c.subs[r.sub.key] = r.sub
	default:
		r.result = in.Result
	}
	c.mu.Unlock()
	cl.ch <- r
}

func (c *Client) notification(in *inbound) {
	if ns, ok := strings.CutSuffix(in.Method, plainEventSuffix); ok && ns != "" {
		c.plainNotification(ns, in.Params)
		return
	}
	var p struct {
		SubscriptionID      string          `json:"subscriptionId"`
		Cursor              json.RawMessage `json:"cursor"`
		Reason              string          `json:"reason"`
		LastDeliveredCursor json.RawMessage `json:"lastDeliveredCursor"`
	}
	if json.Unmarshal(in.Params, &p) != nil {
		return
	}
	c.mu.Lock()
	sub := c.subs[p.SubscriptionID]
	c.mu.Unlock()
	if sub == nil {
		return
	}
	switch in.Method {
	case "event":
		c.deliver(sub, in.Params, p.Cursor)
	case "subscription/closed":
		c.forget(sub.key)
		var err error
		if p.Reason != "done" {
			err = &ClosedError{Reason: p.Reason, LastDeliveredCursor: p.LastDeliveredCursor}
		}
		sub.end(err)
	}
}

// deliver hands an event to sub; when the local buffer overflows, it ends
// sub here and on the server.
func (c *Client) deliver(sub *Subscription, params, cursor json.RawMessage) {
	if !sub.deliver(params, cursor) {
		c.forget(sub.key)
		sub.end(&ClosedError{Reason: "SLOW_CONSUMER", LastDeliveredCursor: sub.lastCursor(), Local: true})
		c.notify(sub.cancelMessage())
	}
}

// forget removes the subscription with key from the live ones.
func (c *Client) forget(key string) {
	c.mu.Lock()
	delete(c.subs, key)
	c.mu.Unlock()
}

// shutdown fails every pending call and ends every subscription.
func (c *Client) shutdown(cause error) {
	switch {
	case cause == nil || errors.Is(cause, io.EOF) || errors.Is(cause, net.ErrClosed):
		cause = ErrClosed
	case errors.Is(cause, ErrMessageTooBig):
		cause = fmt.Errorf("%w: %w", ErrClosed, cause)
	default:
		cause = fmt.Errorf("%w: %v", ErrClosed, cause)
	}
	_ = c.t.close()
	c.mu.Lock()
	c.err = cause
	pending, subs := c.pending, c.subs
	c.pending, c.subs = map[int64]*call{}, map[string]*Subscription{}
	c.mu.Unlock()
	for _, cl := range pending {
		cl.ch <- response{err: cause}
	}
	for _, s := range subs {
		s.end(cause)
	}
}
