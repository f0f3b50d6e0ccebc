package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gobwas/ws/wsutil"

	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/metrics"
	"github.com/openengine/edge/upstream"
)

// probeRequest is the request a tcp:// upstream gets first, and
// probeAnswer what a JSON-RPC server answers it: the connection counts as up
// once it is answered (upstream/probe.go).
const (
	probeRequest = `{"jsonrpc":"2.0","id":"edge.probe","method":"rpc.edge.probe"}`
	probeAnswer  = `{"jsonrpc":"2.0","id":"edge.probe","error":{"code":-32601,"message":"Method not found"}}` + "\n"
)

// handUpstream is one connection of a hand-written upstream, over NDJSON
// (tcp://) or WebSocket (ws://): the test reads what the proxy sends it and
// writes what it answers, message by message (tcp: but for the probe, which
// it answers by itself).
type handUpstream struct {
	t    *testing.T
	c    net.Conn
	msgs chan string // what the proxy sent, one message each
	ws   bool
}

// startHandUpstream listens for one connection of transport ("tcp" or
// "ws") and returns its URL and a function that returns the connection
// once the proxy made it.
func startHandUpstream(t *testing.T, transport string) (string, func() *handUpstream) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ready := make(chan *handUpstream, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		h := &handUpstream{t: t, c: c, msgs: make(chan string, 64), ws: transport == "ws"}
		br := bufio.NewReader(c)
		if h.ws { // the handshake, before the proxy reports the connection up
			req, err := http.ReadRequest(br)
			if err != nil {
				c.Close()
				return
			}
			resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
				acceptKey(req.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n"
			if _, err := io.WriteString(c, resp); err != nil {
				c.Close()
				return
			}
		}
		ready <- h
		defer close(h.msgs)
		if h.ws {
			rw := struct {
				io.Reader
				io.Writer
			}{br, c}
			for {
				msg, err := wsutil.ReadClientText(rw)
				if err != nil {
					return
				}
				h.msgs <- string(msg)
			}
		}
		sc := bufio.NewScanner(br)
		for sc.Scan() {
			if sc.Text() == probeRequest {
				io.WriteString(c, probeAnswer) // as any JSON-RPC server
				continue
			}
			h.msgs <- sc.Text()
		}
	}()
	url := "tcp://" + ln.Addr().String()
	if transport == "ws" {
		url = "ws://" + ln.Addr().String() + "/"
	}
	return url, func() *handUpstream {
		t.Helper()
		select {
		case h := <-ready:
			t.Cleanup(func() { h.c.Close() })
			return h
		case <-time.After(readTimeout):
			t.Fatal("the proxy did not connect")
		}
		return nil
	}
}

// read returns the next message the proxy sent.
func (h *handUpstream) read() string {
	h.t.Helper()
	select {
	case m, ok := <-h.msgs:
		if !ok {
			h.t.Fatal("the proxy closed the upstream connection")
		}
		return m
	case <-time.After(readTimeout):
		h.t.Fatal("nothing from the proxy")
	}
	return ""
}

// requestID reads the next message, a request for method, and returns its
// upstream id.
func (h *handUpstream) requestID(method string) string {
	h.t.Helper()
	msg := h.read()
	m, ok := codec.ParseMessage([]byte(msg))
	if !ok || m.ID == nil || !codec.KeyIs(m.Method, method) {
		h.t.Fatalf("the proxy sent %s, want a request for %s", msg, method)
	}
	return string(m.ID)
}

// write sends msgs, each one message.
func (h *handUpstream) write(msgs ...string) {
	h.t.Helper()
	h.c.SetWriteDeadline(time.Now().Add(readTimeout))
	for _, m := range msgs {
		var err error
		if h.ws {
			err = wsutil.WriteServerText(h.c, []byte(m))
		} else {
			_, err = io.WriteString(h.c, m+"\n")
		}
		if err != nil {
			h.t.Fatal(err)
		}
	}
}

// TestUpstreamOrphanedSubscription (issue 19 item 2): a subscription
// request that timed out (the client got UPSTREAM_TIMEOUT) and that the
// upstream establishes later is cancelled at the upstream with
// subscription/cancel and the upstream's id, its answer is counted late and
// its events dropped and counted (edge_upstream_messages_dropped_total);
// none reaches the client. Before the call table the late answer was only
// counted late: the upstream's subscription stayed live for ever, its
// events ignored without a count.
func TestUpstreamOrphanedSubscription(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			url, accept := startHandUpstream(t, transport)
			p := startProxy(t, upstream.Config{Conns: 1, Timeout: timeout}, []string{"e=" + url})
			up := accept()
			c := dial(t, p.gateway)
			c.sendText(`{"jsonrpc":"2.0","id":1,"method":"edge/ticks","params":{"count":3,"intervalMs":0}}`)
			subReq := up.requestID("edge/ticks")
			c.expectText(upstreamTimeout("1"))
			u := p.set.Upstreams()[0]
			late, dropped := u.Late(), u.Dropped()
			// The upstream establishes it now, and streams.
			up.write(`{"jsonrpc":"2.0","id":`+subReq+`,"result":{"subscriptionId":"up-1"}}`,
				`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"up-1","cursor":"1","seq":1}}`,
				`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"up-1","cursor":"2","seq":2}}`,
				`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"up-1","cursor":"3","seq":3}}`)
			if got, want := up.read(), `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"up-1"}}`; got != want {
				t.Fatalf("the upstream received %s, want %s", got, want)
			}
			poll.Until(t, pollTimeout, "the late answer counted late, its 3 events dropped", func() (bool, string) {
				l, d := u.Late()-late, u.Dropped()-dropped
				return l == 1 && d == 3, fmt.Sprintf("late %d, dropped %d", l, d)
			})
			// Nothing of it reached the client: the next thing it gets is
			// the answer to its next call.
			c.sendText(`{"jsonrpc":"2.0","id":2,"method":"edge/echo","params":{"x":1}}`)
			echo := up.requestID("edge/echo")
			up.write(`{"jsonrpc":"2.0","id":` + echo + `,"result":{"x":1}}`)
			c.expectText(`{"jsonrpc":"2.0","id":2,"result":{"x":1}}`)
			c.expectSettled(0, 0)
			hs := httptest.NewServer(metrics.New(p.gateway.srv, p.gateway.rpc, p.set).Handler())
			t.Cleanup(hs.Close)
			s := scrapeMetrics(t, hs.URL)
			if v, ok := s.value("edge_upstream_messages_dropped_total", "upstream=e"); !ok || v != 3 {
				t.Fatalf("edge_upstream_messages_dropped_total{upstream=\"e\"} = %v (%v), want the 3 events", v, ok)
			}
		})
	}
}
