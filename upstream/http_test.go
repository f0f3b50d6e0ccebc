package upstream

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/poll"
)

// chanCall is a backend.Call finished on any goroutine: its answer goes to
// done.
type chanCall struct {
	method string
	done   chan answerOf
}

type answerOf struct {
	result string
	err    error
}

func newChanCall(method string) *chanCall {
	return &chanCall{method: method, done: make(chan answerOf, 2)}
}

func (c *chanCall) Method() string         { return c.method }
func (c *chanCall) Params() []byte         { return []byte(`[]`) }
func (c *chanCall) Stream() backend.Stream { return nil }
func (c *chanCall) Finish(result []byte, err error) {
	c.done <- answerOf{string(result), err}
}

// wait returns the call's answer, failing the test if none comes in time.
func (c *chanCall) wait(t *testing.T) answerOf {
	t.Helper()
	select {
	case a := <-c.done:
		return a
	case <-time.After(5 * time.Second):
		t.Fatalf("call %s: no answer in 5s", c.method)
		return answerOf{}
	}
}

// serveHTTP starts an HTTP server on 127.0.0.1 with h and returns its
// /rpc URL.
func serveHTTP(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/rpc"
}

// startUpstream starts an upstream of the given replica URLs, logging to
// logs, and waits until every connection is up.
func startUpstream(t *testing.T, logs io.Writer, cfg Config, urls ...string) *Upstream {
	t.Helper()
	var rs []Replica
	for _, s := range urls {
		r, err := ParseURL(s)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if logs == nil {
		logs = io.Discard
	}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	u := New("t", rs, cfg)
	u.Start()
	t.Cleanup(u.Close)
	poll.Until(t, 5*time.Second, "the upstream connected", func() (bool, string) {
		up, total := u.Connected()
		return up == total, fmt.Sprintf("%d of %d up", up, total)
	})
	return u
}

// request reads the id and the method of the JSON-RPC request in r's
// body.
func request(r *http.Request) (id, method string) {
	var req struct {
		ID     json.RawMessage
		Method string
	}
	body, _ := io.ReadAll(r.Body)
	json.Unmarshal(body, &req)
	return string(req.ID), req.Method
}

// errorMembers are answers whose error member is no JSON-RPC error object,
// by method, and one that is.
var errorMembers = map[string]string{
	"null":   `null`,
	"five":   `5`,
	"string": `"boom"`,
	"array":  `[1]`,
	"object": `{"code":1,"message":"m"}`,
}

// checkErrorMembers forwards a call per errorMembers entry to u and checks
// that the object passes through and everything else is -32603
// UPSTREAM_PROTOCOL, counted as dropped.
func checkErrorMembers(t *testing.T, u *Upstream, logs *logBuffer) {
	t.Helper()
	for method, member := range errorMembers {
		c := newChanCall(method)
		u.Forward(c)
		a := c.wait(t)
		if method == "object" {
			if raw, ok := a.err.(*backend.RawError); !ok || string(raw.Object) != member {
				t.Errorf("error %s: finished %v, want it passed through", member, a.err)
			}
			continue
		}
		if a.err != errUpstreamProtocol {
			t.Errorf("error %s: finished %q %v, want -32603 UPSTREAM_PROTOCOL", member, a.result, a.err)
		}
	}
	if n := u.Dropped(); n != int64(len(errorMembers)-1) || !strings.Contains(logs.String(), dropBadError) {
		t.Errorf("dropped %d, want %d logged %q; logs:\n%s", n, len(errorMembers)-1, dropBadError, logs.String())
	}
}

// TestHTTPErrorMemberNotObject (issue 24 item 5): an http upstream's
// answer with "error":null, 5, a string or an array is answered -32603
// UPSTREAM_PROTOCOL; an error object passes through byte for byte. Before,
// each passed through as the client's "error".
func TestHTTPErrorMemberNotObject(t *testing.T) {
	url := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		id, method := request(r)
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"error":`+errorMembers[method]+`}`)
	})
	logs := &logBuffer{}
	checkErrorMembers(t, startUpstream(t, logs, Config{}, url), logs)
}

// TestTCPErrorMemberNotObject is TestHTTPErrorMemberNotObject over a tcp
// upstream (NDJSON on 127.0.0.1): the shared answer path (link.answer)
// that exec, ws and nats links take too.
func TestTCPErrorMemberNotObject(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close() // once edge closes its side
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					var req struct {
						ID     json.RawMessage
						Method string
					}
					json.Unmarshal(sc.Bytes(), &req)
					io.WriteString(conn, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"error":`+errorMembers[req.Method]+"}\n")
				}
			}()
		}
	}()
	logs := &logBuffer{}
	checkErrorMembers(t, startUpstream(t, logs, Config{Conns: 1}, "tcp://"+ln.Addr().String()), logs)
}
