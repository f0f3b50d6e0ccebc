package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testeth"
)

// TestSubscribeMethodsFlag: --subscribe-methods is a comma list of
// patterns (also EDGE_SUBSCRIBE_METHODS) that reaches the gateway, *_subscribe
// by default, "" for none; a bad pattern is refused naming the flag and
// what is wrong, each one, with exit status 2 from the binary.
func TestSubscribeMethodsFlag(t *testing.T) {
	cfg, err := loadConfig(nil, nil, io.Discard)
	if err != nil || cfg.opts.subscribeMethods != "*_subscribe" {
		t.Fatalf("default %q (%v), want *_subscribe", cfg.opts.subscribeMethods, err)
	}
	cfg, err = loadConfig(nil, []string{"EDGE_SUBSCRIBE_METHODS=eth_subscribe, *_watch_subscribe"}, io.Discard)
	if err != nil || cfg.opts.subscribeMethods != "eth_subscribe, *_watch_subscribe" {
		t.Fatalf("from the environment: %q (%v)", cfg.opts.subscribeMethods, err)
	}
	for _, tt := range []struct {
		value string
		want  []string
	}{
		{"eth_sub", []string{`subscribe-methods: "eth_sub": want a name ending in _subscribe`}},
		{"*", []string{`"*": want a name ending in _subscribe`}},
		{"eth_*_subscribe", []string{`"eth_*_subscribe": * only at the start`}},
		{"_subscribe,eth_subscribe,,x", []string{`"_subscribe": no namespace`, `"": want a name`, `"x": want a name`}},
	} {
		_, err := loadConfig([]string{"--subscribe-methods", tt.value}, nil, io.Discard)
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("--subscribe-methods %q: error %v, want one containing %q", tt.value, err, w)
			}
		}
	}
	if _, err := loadConfig([]string{"--subscribe-methods", ""}, nil, io.Discard); err != nil {
		t.Errorf(`--subscribe-methods "": %v`, err)
	}

	bin := buildEdge(t) // before the watchdog: a cold build can take longer than its bound
	watchdog(t)
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout) // an edge that started is killed: the test fails, it does not hang
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--listen", "127.0.0.1:0", "--profile", "jsonrpc", "--subscribe-methods", "eth_sub*")
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), `subscribe-methods: "eth_sub*"`) {
		t.Fatalf("edge --subscribe-methods eth_sub*: %v, stderr %q; want exit status 2 naming the flag", err, stderr.String())
	}
}

// ethHTTPNode is an Ethereum-style JSON-RPC node over HTTP POST: it answers
// eth_subscribe with the error such a node gives over HTTP, and every
// other method with its name, and records the methods it was called with.
func ethHTTPNode(t *testing.T) (url string, methods func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var id, method string
		// The tests send {"jsonrpc":"2.0","id":N,"method":"M",...}: edge's
		// request has its own id, which the answer must carry.
		if _, rest, ok := strings.Cut(string(body), `"id":`); ok {
			id, _, _ = strings.Cut(rest, ",")
		}
		if _, rest, ok := strings.Cut(string(body), `"method":"`); ok {
			method, _, _ = strings.Cut(rest, `"`)
		}
		got <- method
		w.Header().Set("Content-Type", "application/json")
		if method == "eth_subscribe" {
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"error":{"code":-32601,"message":"notifications not supported"}}`)
			return
		}
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"result":"`+method+`"}`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/", func() []string {
		var ms []string
		for {
			select {
			case m := <-got:
				ms = append(ms, m)
			default:
				return ms
			}
		}
	}
}

// TestJSONRPCProfileHTTPFirstUpstream is issue 22 item 2: `edge --profile
// jsonrpc --upstream eth=http://...` starts (the oecp profile's route
// check, that the OECP registry's subscription methods would go to an http
// upstream, used to refuse it: "the default route (the first --upstream)
// sends subscription method watch to http upstream eth"), and eth_subscribe
// over it gets the node's own answer; the oecp profile still refuses.
func TestJSONRPCProfileHTTPFirstUpstream(t *testing.T) {
	url, methods := ethHTTPNode(t)
	if _, err := tryEdge(t, "--listen", "127.0.0.1:0", "--upstream", "eth="+url); err == nil || !strings.Contains(err.Error(), "sends subscription method") {
		t.Fatalf("oecp profile with an http first upstream: %v, want the route refused", err)
	}
	e := startEdge(t, "--listen", "127.0.0.1:0", "--profile", "jsonrpc", "--upstream", "eth="+url)
	conn := dialWS(t, e.ws)
	for _, tt := range []struct{ req, want string }{
		{`{"jsonrpc":"2.0","id":7,"method":"eth_subscribe","params":["newHeads"]}`, `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"notifications not supported"}}`},
		{`{"jsonrpc":"2.0","id":8,"method":"eth_blockNumber","params":[]}`, `{"jsonrpc":"2.0","id":8,"result":"eth_blockNumber"}`},
		{`{"jsonrpc":"2.0","id":9,"method":"watch","params":{}}`, `{"jsonrpc":"2.0","id":9,"result":"watch"}`},
	} {
		if err := wsutil.WriteClientText(conn, []byte(tt.req)); err != nil {
			t.Fatal(err)
		}
		got, err := wsutil.ReadServerText(conn)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Fatalf("%s: got %s, want %s", tt.req, got, tt.want)
		}
	}
	if got, want := methods(), []string{"eth_subscribe", "eth_blockNumber", "watch"}; !slices.Equal(got, want) {
		t.Fatalf("the node was called with %q, want %q", got, want)
	}
}

// TestSubscribeMethodsReachGateway: edge --profile jsonrpc in front of an
// Ethereum-style node over ws: by default eth_subscribe is a subscription
// (edge's id 0x1, the node's heads in the eth_subscription shape); with
// --subscribe-methods "" it is an ordinary call, answered with the node's
// own id, and no notification is passed on.
func TestSubscribeMethodsReachGateway(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"default", nil, []string{`{"jsonrpc":"2.0","id":1,"result":"0x1"}`,
			`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{"number":"0x1"}}}`}},
		{"none", []string{"--subscribe-methods", ""}, []string{`{"jsonrpc":"2.0","id":1,"result":"0xfeed01"}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node := testeth.Start(t)
			e := startEdge(t, append([]string{"--listen", "127.0.0.1:0", "--profile", "jsonrpc", "--upstream-conns", "1", "--upstream", "eth=" + node.URL}, tt.flags...)...)
			conn := dialWS(t, e.ws)
			// The upstream connection is up once a call gets the node's answer.
			poll.Until(t, edgeWait, "the node answering through edge", func() (bool, string) {
				wsutil.WriteClientText(conn, []byte(`{"jsonrpc":"2.0","id":0,"method":"eth_chainId","params":[]}`))
				got, _ := wsutil.ReadServerText(conn)
				return string(got) == `{"jsonrpc":"2.0","id":0,"result":"eth_chainId"}`, string(got)
			})
			wsutil.WriteClientText(conn, []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`))
			got, err := wsutil.ReadServerText(conn)
			if err != nil || string(got) != tt.want[0] {
				t.Fatalf("eth_subscribe: %s (%v), want %s", got, err, tt.want[0])
			}
			poll.Until(t, edgeWait, "the node's subscription", func() (bool, string) {
				return len(node.Live()) == 1, fmt.Sprint(node.Live())
			})
			node.Push(node.Live()[0], `{"number":"0x1"}`)
			for _, w := range tt.want[1:] {
				if got, err := wsutil.ReadServerText(conn); err != nil || string(got) != w {
					t.Fatalf("got %s (%v), want %s", got, err, w)
				}
			}
			wsutil.WriteClientText(conn, []byte(`{"jsonrpc":"2.0","id":2,"method":"eth_chainId","params":[]}`))
			if got, err := wsutil.ReadServerText(conn); err != nil || string(got) != `{"jsonrpc":"2.0","id":2,"result":"eth_chainId"}` {
				t.Fatalf("after the head: got %s (%v), want the call's answer and nothing before it", got, err)
			}
		})
	}
}

// dialWS opens a WebSocket connection to url, closed in t.Cleanup, its
// reads and writes bounded by readTimeout from now.
func dialWS(t *testing.T, url string) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	conn, _, _, err := ws.Dialer{Timeout: readTimeout}.Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(readTimeout))
	return conn
}

// TestRunSubscribePlain: `edge subscribe URL eth_subscribe '["newHeads"]'`
// in front of an Ethereum-style node prints edge's id, then each head as
// {"subscription":ID,"result":R}; interrupted, it unsubscribes (the node
// gets eth_unsubscribe with its own id) and returns nil. Before package
// client knew plain subscriptions it failed at once: "subscription result
// without subscriptionId".
func TestRunSubscribePlain(t *testing.T) {
	node := testeth.Start(t)
	e := startEdge(t, "--listen", "127.0.0.1:0", "--profile", "jsonrpc", "--upstream-conns", "1", "--upstream", "eth="+node.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// --wait: the upstream connection may not be up yet (UPSTREAM_UNAVAILABLE).
	done, lines := runLines(ctx, "subscribe", "--wait", edgeWait.String(), e.ws, "eth_subscribe", `["newHeads"]`)
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before %s: %v", what, <-done)
			}
			return l
		case <-time.After(edgeWait):
			t.Fatalf("no %s within %s", what, edgeWait)
		}
		return ""
	}
	// Edge's id, 0x1 unless a first try met the upstream not connected yet.
	l := next("the result")
	id, err := strconv.Unquote(strings.TrimSuffix(l, "\n"))
	if err != nil || !strings.HasPrefix(id, "0x") || strings.HasPrefix(id, "0xfeed") {
		t.Fatalf("first line %q, want edge's own id", l)
	}
	poll.Until(t, edgeWait, "the node's subscription", func() (bool, string) {
		return len(node.Live()) == 1, fmt.Sprint(node.Live())
	})
	up := node.Live()[0]
	node.Push(up, `{"number":"0x1"}`)
	if l := next("the head"); l != `{"subscription":"`+id+`","result":{"number":"0x1"}}`+"\n" {
		t.Fatalf("event line %q", l)
	}
	interrupt(t, cancel, done, edgeWait)
	poll.Until(t, edgeWait, "eth_unsubscribe at the node", func() (bool, string) {
		got := node.Unsubscribed()
		return slices.Equal(got, []testeth.Sub{up}), fmt.Sprint(got)
	})
}
