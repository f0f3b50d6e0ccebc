package upstream

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
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

// TestHTTPResponseHeadBounded (issue 24 item 4): an http upstream's
// response head is read up to Config.MaxHeaderBytes (--max-header-bytes):
// an answer with 8 MB of headers fails its call UPSTREAM_UNAVAILABLE, is
// counted as dropped, and leaves the replica up. Before, net/http's own
// 10 MB cap let it through: the call succeeded and reading it allocated
// over 8 MB (200 such answers at once took 604 MB).
func TestHTTPResponseHeadBounded(t *testing.T) {
	pad := strings.Repeat("a", 8<<20)
	url := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		id, method := request(r)
		if method == "big" {
			w.Header().Set("X-Pad", pad)
		}
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"result":"fine"}`)
	})
	logs := &logBuffer{}
	u := startUpstream(t, logs, Config{}, url)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c := newChanCall("big")
	u.Forward(c, backend.Origin{})
	a := c.wait(t)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("an answer with an 8 MiB header: %q %v; %d KiB allocated by the process meanwhile", a.result, a.err, allocated>>10)
	if !errors.Is(a.err, backend.ErrUpstreamUnavailable) {
		t.Fatalf("the call finished %q %v, want UPSTREAM_UNAVAILABLE", a.result, a.err)
	}
	if allocated > 1<<20 {
		t.Fatalf("%d KiB allocated for one answer, want at most 1 MiB with a 16 KiB head cap", allocated>>10)
	}
	if n := u.Dropped(); n != 1 || !strings.Contains(logs.String(), dropLongHead) {
		t.Fatalf("dropped %d, want 1 logged %q; logs:\n%s", n, dropLongHead, logs.String())
	}
	// The replica is not failed: the next call goes through at once.
	c = newChanCall("small")
	u.Forward(c, backend.Origin{})
	if a := c.wait(t); a.err != nil || a.result != `"fine"` {
		t.Fatalf("the next call finished %q %v, want \"fine\"", a.result, a.err)
	}
}

// TestHTTPRedirectNotFollowed (issue 24 item 5): a redirect from an http
// upstream is not followed, to another host or to its own: the call gets
// -32603 UPSTREAM_PROTOCOL, the redirect is counted as dropped and logged
// with its Location, and nothing reaches where it points. Before, 307 and
// 308 re-sent the POST to the other host and 301-303 sent it a GET, and
// the other host's answer was the call's.
func TestHTTPRedirectNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		id, _ := request(r)
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"result":"from elsewhere"}`)
	})
	other = strings.Replace(other, "127.0.0.1", "localhost", 1) // another host
	for _, status := range []int{301, 302, 303, 307, 308} {
		for _, to := range []string{other, "/rpc2"} {
			t.Run(fmt.Sprintf("%d to %s", status, to), func(t *testing.T) {
				var own atomic.Int64
				url := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path != "/rpc" {
						own.Add(1)
						id, _ := request(r)
						io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"result":"from /rpc2"}`)
						return
					}
					http.Redirect(w, r, to, status)
				})
				logs := &logBuffer{}
				u := startUpstream(t, logs, Config{}, url)
				before := elsewhere.Load()
				c := newChanCall("m")
				u.Forward(c, backend.Origin{})
				a := c.wait(t)
				if a.err != errUpstreamProtocol {
					t.Fatalf("the call finished %q %v, want -32603 UPSTREAM_PROTOCOL", a.result, a.err)
				}
				if n := elsewhere.Load() - before + own.Load(); n != 0 {
					t.Fatalf("%d requests followed the redirect", n)
				}
				if n := u.Dropped(); n != 1 || !strings.Contains(logs.String(), "location="+to) {
					t.Fatalf("dropped %d, want 1 logged with its location; logs:\n%s", n, logs.String())
				}
				if st := u.Stats(); st.Outcomes[outcomeError] != 1 {
					t.Fatalf("outcomes %v, want one error", st.Outcomes)
				}
			})
		}
	}
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
		u.Forward(c, backend.Origin{})
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
					if req.Method == probeMethod {
						io.WriteString(conn, probeAnswer)
						continue
					}
					io.WriteString(conn, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"error":`+errorMembers[req.Method]+"}\n")
				}
			}()
		}
	}()
	logs := &logBuffer{}
	checkErrorMembers(t, startUpstream(t, logs, Config{Conns: 1}, "tcp://"+ln.Addr().String()), logs)
}

// TestHTTPBoundPerReplica: Config.HTTPConns bounds each http replica's
// requests in flight, calls and notifications together; a call goes to a
// replica with a slot free, and with every replica at its bound it gets
// SERVER_BUSY at once and a notification is dropped and counted; once a
// request ends its slot takes the next call.
func TestHTTPBoundPerReplica(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan string, 8)
	hold := func(w http.ResponseWriter, r *http.Request) {
		id, method := request(r)
		if method == "hold" {
			arrived <- method
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"result":"`+method+`"}`)
	}
	u := startUpstream(t, nil, Config{HTTPConns: 1}, serveHTTP(t, hold), serveHTTP(t, hold))
	held := []*chanCall{newChanCall("hold"), newChanCall("hold")}
	for _, c := range held {
		u.Forward(c, backend.Origin{})
		<-arrived // one on each replica: each takes its one slot
	}
	busy := newChanCall("m")
	u.Forward(busy, backend.Origin{})
	if a := busy.wait(t); a.err != backend.ErrServerBusy {
		t.Fatalf("a call over the bound finished %q %v, want SERVER_BUSY", a.result, a.err)
	}
	u.Notify("note", []byte(`[]`))
	if st := u.Stats(); st.NotificationsDropped != 1 || st.Outcomes[outcomeBusy] != 1 {
		t.Fatalf("notifications dropped %d, busy calls %d; want 1 and 1", st.NotificationsDropped, st.Outcomes[outcomeBusy])
	}
	close(release)
	for _, c := range held {
		if a := c.wait(t); a.err != nil || a.result != `"hold"` {
			t.Fatalf("a held call finished %q %v", a.result, a.err)
		}
	}
	// A slot is given back once its goroutine has closed the response.
	poll.Until(t, 5*time.Second, "a call answered once the held ones ended", func() (bool, string) {
		c := newChanCall("m")
		u.Forward(c, backend.Origin{})
		a := c.wait(t)
		return a.err == nil, fmt.Sprintf("%q %v", a.result, a.err)
	})
}

// onceCall is a unary backend.Call finished on any goroutine: a second
// Finish panics (the table's exactly-once, checked where it is broken).
type onceCall struct {
	done     chan answerOf
	finished atomic.Int32
}

func (c *onceCall) Method() string         { return "m" }
func (c *onceCall) Params() []byte         { return []byte(`[]`) }
func (c *onceCall) Stream() backend.Stream { return nil }
func (c *onceCall) Finish(result []byte, err error) {
	if c.finished.Add(1) > 1 {
		panic("upstream: http call finished twice")
	}
	c.done <- answerOf{string(result), err}
}

// TestHTTPCallTransitions: an http call's moveLocked allows exactly sent
// -> dropped, sent -> ended and dropped -> ended (callState's table less
// what only links take: subscriptions, expired calls awaiting a late
// answer) and panics on every other pair, naming both states, with the
// entry left as it was.
func TestHTTPCallTransitions(t *testing.T) {
	legal := map[[2]callState]bool{
		{callSent, callDropped}:  true,
		{callSent, callEnded}:    true,
		{callDropped, callEnded}: true,
	}
	for _, from := range allCallStates {
		for _, to := range allCallStates {
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				u := testUpstream(nil, Config{})
				h := newHTTPReplica(u, Replica{URL: "http://127.0.0.1:1/"})
				h.active.Store(1)
				c := &recCall{method: "m"}
				aborted := false
				e := &httpCall{state: from, c: c, abort: func() { aborted = true }, sent: 1}
				h.pending[7] = e
				var got any
				h.mu.Lock()
				func() {
					defer func() { got = recover() }()
					h.moveLocked(7, e, to, byAnswer, nil, nil).do()
				}()
				h.mu.Unlock()
				ok := legal[[2]callState{from, to}]
				switch {
				case ok && got != nil:
					t.Fatalf("legal transition panicked: %v", got)
				case !ok && got == nil:
					t.Fatalf("illegal transition %s -> %s allowed", from, to)
				case !ok && !strings.Contains(fmt.Sprint(got), from.String()+" -> "+to.String()):
					t.Fatalf("panic %q does not name the transition", got)
				case !ok && (e.state != from || h.pending[7] != e || aborted || len(c.errs) != 0):
					t.Fatalf("illegal transition changed the entry: state %s, in table %v, aborted %v, finished %d",
						e.state, h.pending[7] == e, aborted, len(c.errs))
				case ok && !aborted:
					t.Fatalf("%s -> %s did not abort the request", from, to)
				case ok && to == callEnded && (h.pending[7] != nil || h.active.Load() != 0 || len(c.errs) != 1):
					t.Fatalf("%s -> ended: in table %v, slots %d, finished %d; want gone, 0, 1",
						from, h.pending[7] != nil, h.active.Load(), len(c.errs))
				}
			})
		}
	}
}

// TestHTTPCancelRacingAnswer: the gateway cancels an http call after its
// answer was read but before its goroutine ended it (held there by
// hookAnswered). The call is finished once, UPSTREAM_UNAVAILABLE (dropped:
// the answer is not delivered), counted once as cancelled, and its slot
// and table entry are given back. A Cancel that finished the call itself,
// or an end that did not see the drop, would finish it twice (onceCall
// panics) or deliver the answer as ok.
func TestHTTPCancelRacingAnswer(t *testing.T) {
	url := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		id, _ := request(r)
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"result":"late"}`)
	})
	u := startUpstream(t, nil, Config{HTTPConns: 2}, url)
	h := u.http[0]
	answered, resume := make(chan uint64), make(chan struct{})
	h.hookAnswered = func(id uint64) {
		answered <- id
		<-resume
	}
	c := &onceCall{done: make(chan answerOf, 2)}
	tk := u.Forward(c, backend.Origin{})
	<-answered // the response is read and closed; the call not ended yet
	tk.Cancel()
	tk.Cancel() // a second cancel finds it dropped: nothing
	close(resume)
	a := <-c.done
	if a.err != backend.ErrUpstreamUnavailable || a.result != "" {
		t.Fatalf("finished %q %v, want UPSTREAM_UNAVAILABLE", a.result, a.err)
	}
	h.running.Wait()
	tk.Cancel() // after its end: nothing
	st := u.Stats()
	if st.Outcomes[outcomeCancelled] != 1 || st.Outcomes[outcomeOK] != 0 {
		t.Fatalf("outcomes %v, want one cancelled", st.Outcomes)
	}
	h.mu.Lock()
	n := len(h.pending)
	h.mu.Unlock()
	if n != 0 || h.active.Load() != 0 || c.finished.Load() != 1 {
		t.Fatalf("%d entries, %d slots taken, %d finishes after the end; want 0, 0, 1", n, h.active.Load(), c.finished.Load())
	}
}
