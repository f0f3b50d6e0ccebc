package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/client"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
)

func TestDialScheme(t *testing.T) {
	tests := []struct {
		name string
		url  string
	}{
		{"http", "http://127.0.0.1:1/"},
		{"https", "https://127.0.0.1:1/"},
		{"no scheme", "//127.0.0.1:1"},
		{"host as scheme", "localhost:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.Dial(context.Background(), tt.url, nil)
			if !errors.Is(err, client.ErrScheme) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("Dial(%q) = %v, want ErrScheme", tt.url, err)
			}
		})
	}
}

// TestDialErrors: a refused upgrade fails Dial, and ctx bounds the upgrade
// of a server that never answers it.
func TestDialErrors(t *testing.T) {
	gw := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if c, err := client.Dial(ctx, gw.wsURL+"nope", nil); err == nil {
		c.Close()
		t.Fatalf("Dial on a path that does not upgrade succeeded")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			held <- conn // accepted, never answered
		}
	}()
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	start := time.Now()
	c, err := client.Dial(short, "ws://"+ln.Addr().String()+"/", nil)
	if err == nil {
		c.Close()
		t.Fatalf("Dial to a silent server succeeded")
	}
	if took := time.Since(start); took > waitTimeout {
		t.Fatalf("Dial took %s with a 100ms ctx", took)
	}
	recv(t, held, "the accepted connection").Close()
}

// TestDialCtxOnlyBoundsDial: the ctx given to Dial bounds the dial and the
// upgrade, not the connection (edge subscribe cancels it once established).
func TestDialCtxOnlyBoundsDial(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			c, err := client.Dial(ctx, gw.url(tr), nil)
			cancel()
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			defer c.Close()
			sub := subscribe(t, c, "edge/ticks", map[string]int{"count": 3, "intervalMs": 10})
			checkTicks(t, sub, drain(t, sub), 3)
			mustEcho(t, c, 1)
		})
	}
}

func TestCallEcho(t *testing.T) {
	type payload struct {
		A int               `json:"a"`
		B string            `json:"b"`
		C []float64         `json:"c"`
		D map[string]bool   `json:"d"`
		E *payload          `json:"e,omitempty"`
		F json.RawMessage   `json:"f"`
		G map[string][]uint `json:"g"`
	}
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			want := payload{A: 7, B: "h\u00e9llo \"w\"\n", C: []float64{1.5, -2}, D: map[string]bool{"x": true},
				E: &payload{A: 1, F: json.RawMessage(`null`)}, F: json.RawMessage(`[1,{"k":"v"}]`), G: map[string][]uint{"z": {0}}}
			var got payload
			if err := call(t, c, "edge/echo", want, &got); err != nil {
				t.Fatalf("edge/echo: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("edge/echo: got %+v, want %+v", got, want)
			}

			// nil params send {}; a json.RawMessage is sent as is; a nil
			// result discards the answer.
			var raw json.RawMessage
			if err := call(t, c, "edge/echo", nil, &raw); err != nil || string(raw) != `{}` {
				t.Fatalf("edge/echo nil params: %s, %v; want {}", raw, err)
			}
			if err := call(t, c, "edge/echo", json.RawMessage(`{"x" : [ 1 ]}`), &raw); err != nil || string(raw) != `{"x" : [ 1 ]}` {
				t.Fatalf("edge/echo raw params: %s, %v", raw, err)
			}
			if err := call(t, c, "edge/echo", map[string]int{"n": 1}, nil); err != nil {
				t.Fatalf("edge/echo nil result: %v", err)
			}
			// Params that do not marshal fail before anything is sent.
			if err := call(t, c, "edge/echo", map[string]any{"f": func() {}}, nil); err == nil || errors.Is(err, client.ErrClosed) {
				t.Fatalf("unmarshalable params: %v, want a marshal error", err)
			}
			// A result that does not fit the destination is a decode error,
			// not an *Error, and the connection stays up.
			var wrong []int
			err := call(t, c, "edge/echo", nil, &wrong)
			var re *client.Error
			if err == nil || errors.As(err, &re) {
				t.Fatalf("decode {} into []int: %v, want a decode error", err)
			}
			mustEcho(t, c, 1)
		})
	}
}

// TestCallErrors checks that error responses come back as *client.Error with
// the code, message and data.code of CONTRACT.md section 7.
func TestCallErrors(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		params   any
		code     int
		message  string
		dataCode string
	}{
		{"method not found", "edge/nope", nil, -32601, "Method not found", ""},
		{"params not an object", "edge/echo", []int{1}, -32602, "Invalid params", ""},
		{"params null", "edge/echo", json.RawMessage(`null`), -32602, "Invalid params", ""},
		{"schema violation", "edge/sleep", map[string]int{"ms": -1}, -32602, "Invalid params", "SCHEMA_VIOLATION"},
		{"application error", "plan", nil, -32000, "Backend does not support plan", "INVALID_PHASE"},
		{"unsupported version", "initialize", map[string]string{"protocolVersion": "x/v0"}, -32000, "Unsupported protocol version", "UNSUPPORTED_PROTOCOL_VERSION"},
	}
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					var result json.RawMessage
					err := call(t, c, tt.method, tt.params, &result)
					var re *client.Error
					if !errors.As(err, &re) {
						t.Fatalf("got %v (result %s), want *client.Error", err, result)
					}
					if re.Code != tt.code || re.Message != tt.message || re.DataCode() != tt.dataCode {
						t.Fatalf("got code %d message %q data %s (DataCode %q), want %d %q %q",
							re.Code, re.Message, re.Data, re.DataCode(), tt.code, tt.message, tt.dataCode)
					}
					if result != nil {
						t.Fatalf("result %s decoded from an error response", result)
					}
					if !strings.Contains(re.Error(), tt.message) {
						t.Fatalf("Error() = %q, want it to mention %q", re.Error(), tt.message)
					}
				})
			}
			mustEcho(t, c, 1)
		})
	}
}

func TestErrorDataCode(t *testing.T) {
	tests := []struct {
		name string
		data string
		want string
	}{
		{"none", ``, ""},
		{"code", `{"code":"SERVER_BUSY"}`, "SERVER_BUSY"},
		{"code and details", `{"code":"SCHEMA_VIOLATION","details":{"path":"/a"}}`, "SCHEMA_VIOLATION"},
		{"not an object", `"SERVER_BUSY"`, ""},
		{"code not a string", `{"code":1}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &client.Error{Code: -32000, Message: "m", Data: json.RawMessage(tt.data)}
			if got := e.DataCode(); got != tt.want {
				t.Fatalf("DataCode() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCallServerBusy fills a connection's task slots with gated calls: the
// next call is refused with SERVER_BUSY, and is admitted again once a slot
// frees.
func TestCallServerBusy(t *testing.T) {
	const slots = 2
	gw := startGateway(t, func(c *gwConfig) { c.rpc.MaxConnTasks = slots })
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			name := "busy-" + tr
			errc := make(chan error, slots)
			for range slots {
				go func() { errc <- call(t, c, "edge/gate", gateParams(name), nil) }()
			}
			gw.waitGate(name, slots)
			err := call(t, c, "edge/echo", nil, nil)
			var re *client.Error
			if !errors.As(err, &re) || re.Code != -32000 || re.Message != "Server busy" || re.DataCode() != "SERVER_BUSY" {
				t.Fatalf("call with every slot held: %v, want -32000 Server busy SERVER_BUSY", err)
			}
			gw.openGate(name, slots)
			for range slots {
				if err := recv(t, errc, "a gated call"); err != nil {
					t.Fatalf("gated call: %v", err)
				}
			}
			mustEcho(t, c, 1)
		})
	}
}

// openGate opens gate name directly in the backend and checks how many
// requests it released.
func (gw *gateway) openGate(name string, released int) {
	gw.t.Helper()
	res, err := gw.mem.Call(context.Background(), "edge/open", gateParams(name), nil)
	if err != nil {
		gw.t.Fatalf("open gate %q: %v", name, err)
	}
	if want := fmt.Sprintf(`{"released":%d}`, released); string(res) != want {
		gw.t.Fatalf("open gate %q: %s, want %s", name, res, want)
	}
}

// TestCallConcurrentIDsUnique runs 64 goroutines x 200 calls on one client:
// request ids are unique, so the gateway never answers DUPLICATE_REQUEST_ID,
// and every call gets its own payload back.
func TestCallConcurrentIDsUnique(t *testing.T) {
	const goroutines, calls = 64, 200
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			var wg sync.WaitGroup
			errc := make(chan error, goroutines)
			for g := range goroutines {
				wg.Go(func() {
					for i := range calls {
						want := echoParams{G: g, I: i, Text: strings.Repeat("x", (g*calls+i)%17)}
						var got echoParams
						if err := c.Call(context.Background(), "edge/echo", want, &got); err != nil {
							errc <- fmt.Errorf("goroutine %d call %d: %w", g, i, err)
							return
						}
						if got != want {
							errc <- fmt.Errorf("goroutine %d call %d: got %+v, want %+v", g, i, got, want)
							return
						}
					}
				})
			}
			finished := make(chan struct{})
			go func() { wg.Wait(); close(finished) }()
			select {
			case <-finished:
			case <-time.After(20 * time.Second):
				t.Fatalf("%d x %d calls not answered within 20s", goroutines, calls)
			}
			close(errc)
			for err := range errc {
				t.Error(err)
			}
			waitStats(t, c, "an idle connection", idle)
		})
	}
}

// TestCallCancel cancels the ctx of a call blocked on a gate. Call returns
// ctx.Err() at once. On WebSocket the client sends $/cancelRequest: the
// gateway frees the id and cancels the backend call, which leaves the gate.
// NDJSON has no $/cancelRequest (CONTRACT.md section 1.2): the call stays on
// the gate, and its late answer when the gate opens is dropped.
func TestCallCancel(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			name := "cancel-" + tr
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- c.Call(ctx, "edge/gate", gateParams(name), nil) }()
			gw.waitGate(name, 1)
			cancel()
			if err := recv(t, errc, "the cancelled call to return"); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call: %v, want context.Canceled", err)
			}
			if tr == "ws" {
				// The backend call left the gate and the worker returned.
				gw.waitGate(name, 0)
				waitStats(t, c, "an idle connection after $/cancelRequest", idle)
				mustEcho(t, c, 1)
				return
			}
			if got := gw.mem.Waiting(name); got != 1 {
				t.Fatalf("%d waiting on the gate after a cancel over NDJSON, want 1 (no $/cancelRequest)", got)
			}
			var opened struct{ Released int }
			if err := call(t, c, "edge/open", gateParams(name), &opened); err != nil || opened.Released != 1 {
				t.Fatalf("edge/open: %+v, %v; want released 1", opened, err)
			}
			// Once stats show the gated worker returned, its late answer
			// has been read (and dropped).
			waitStats(t, c, "an idle connection after the late answer", idle)
			mustEcho(t, c, 1)
		})
	}
}

// TestCallCancelLateResponse makes the gateway answer a cancelled call
// anyway (--cancel-reply=error on WebSocket; on NDJSON the gate opens), and
// proves through a recording proxy that the late answer reached the client,
// which dropped it without disturbing later calls.
func TestCallCancelLateResponse(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) {
		c.rpc.CancelReply = rpc.CancelReplyError
		c.tap = true
	})
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil) // a fresh client: its first request has id 1
			name := "late-" + tr
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- c.Call(ctx, "edge/gate", gateParams(name), nil) }()
			gw.waitGate(name, 1)
			cancel()
			if err := recv(t, errc, "the cancelled call to return"); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call: %v, want context.Canceled", err)
			}
			var late string
			if tr == "ws" {
				late = `{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}`
			} else {
				gw.openGate(name, 1)
				late = `{"jsonrpc":"2.0","id":1,"result":{"name":"` + name + `"}}`
			}
			gw.tap.waitSeen(t, late)
			// Calls after the late answer (which precedes them on the wire)
			// get their own answers.
			for i := range 10 {
				mustEcho(t, c, i)
			}
			waitStats(t, c, "an idle connection", idle)
		})
	}
}

// TestCallCtxAlreadyDone: a call whose ctx is done before it starts returns
// ctx.Err() (or its answer, if that wins the race) and leaves the connection
// usable.
func TestCallCtxAlreadyDone(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, nil)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			name := "done-" + tr
			if err := c.Call(ctx, "edge/gate", gateParams(name), nil); !errors.Is(err, context.Canceled) {
				t.Fatalf("call with a done ctx: %v, want context.Canceled", err)
			}
			if tr == "tcp" {
				// No $/cancelRequest on NDJSON: release it.
				gw.waitGate(name, 1)
				gw.openGate(name, 1)
			}
			waitStats(t, c, "an idle connection", idle)
			mustEcho(t, c, 1)
		})
	}
}

// TestMaxMessageBytes: an inbound message over Options.MaxMessageBytes ends
// the connection with ErrMessageTooBig; one of exactly the limit is accepted.
func TestMaxMessageBytes(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Run("4KiB answer, 1KiB limit", func(t *testing.T) {
				c := gw.dial(tr, &client.Options{MaxMessageBytes: 1024})
				mustEcho(t, c, 1) // small messages pass
				err := call(t, c, "edge/echo", echoParams{Text: strings.Repeat("x", 4096)}, nil)
				if !errors.Is(err, client.ErrMessageTooBig) {
					t.Fatalf("call with a 4 KiB answer: %v, want ErrMessageTooBig", err)
				}
				waitDone(t, c)
				if err := c.Err(); !errors.Is(err, client.ErrMessageTooBig) {
					t.Fatalf("Err() = %v, want ErrMessageTooBig", err)
				}
				if err := call(t, c, "edge/echo", nil, nil); !errors.Is(err, client.ErrMessageTooBig) {
					t.Fatalf("call after the connection ended: %v, want its cause ErrMessageTooBig", err)
				}
			})
			t.Run("pending calls", func(t *testing.T) {
				c := gw.dial(tr, &client.Options{MaxMessageBytes: 1024})
				name := "big-" + tr
				errc := make(chan error, 1)
				go func() { errc <- call(t, c, "edge/gate", gateParams(name), nil) }()
				gw.waitGate(name, 1)
				if err := call(t, c, "edge/echo", echoParams{Text: strings.Repeat("x", 4096)}, nil); !errors.Is(err, client.ErrMessageTooBig) {
					t.Fatalf("call with a 4 KiB answer: %v, want ErrMessageTooBig", err)
				}
				if err := recv(t, errc, "the pending call"); !errors.Is(err, client.ErrMessageTooBig) {
					t.Fatalf("pending call: %v, want ErrMessageTooBig", err)
				}
				gw.waitGate(name, 0) // the gateway saw the close and cancelled it
			})
		})
	}
}

// TestMaxMessageBytesBoundary: an answer of exactly MaxMessageBytes is
// accepted, one byte more ends the connection, on both transports.
//
// Regression test for the NDJSON off-by-one: lineTransport.read rejects a
// line only when len(line incl. "\n") > max+2, a slack meant for "\r\n";
// a server ends lines with "\n" alone, so a message of max+1 bytes was
// accepted over tcp://.
func TestMaxMessageBytesBoundary(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			// The answer to a client's first call (id 1) to edge/echo is
			// {"jsonrpc":"2.0","id":1,"result":<params>}.
			params := `{"text":"` + strings.Repeat("y", 300) + `"}`
			size := len(`{"jsonrpc":"2.0","id":1,"result":`) + len(params) + len(`}`)
			for _, b := range []struct {
				name  string
				limit int
				ok    bool
			}{
				{"exactly the limit", size, true},
				{"one byte over", size - 1, false},
				{"two bytes over", size - 2, false},
			} {
				t.Run(b.name, func(t *testing.T) {
					c := gw.dial(tr, &client.Options{MaxMessageBytes: b.limit})
					var got json.RawMessage
					err := call(t, c, "edge/echo", json.RawMessage(params), &got)
					switch {
					case b.ok && err != nil:
						t.Fatalf("answer of %d bytes, limit %d: %v, want it accepted", size, b.limit, err)
					case b.ok && string(got) != params:
						t.Fatalf("answer %s, want %s", got, params)
					case !b.ok && !errors.Is(err, client.ErrMessageTooBig):
						t.Fatalf("answer of %d bytes, limit %d: %v (result %d bytes), want ErrMessageTooBig", size, b.limit, err, len(got))
					}
				})
			}
		})
	}
}

// TestClose: closing the client, or the gateway closing the connection,
// fails pending calls with ErrClosed (a graceful shutdown answers them
// SERVER_SHUTTING_DOWN first), ends subscriptions with an error,
// closes Done, and makes later calls fail with ErrClosed.
//
// The gateway ends connections by closing them ("gateway close") or, on a
// graceful shutdown, with a WebSocket close frame 1001 ("gateway shutdown").
func TestClose(t *testing.T) {
	for _, by := range []string{"client", "gateway close", "gateway shutdown"} {
		for _, tr := range transports {
			t.Run(by+"/"+tr, func(t *testing.T) {
				gw := startGateway(t, func(c *gwConfig) {
					c.loop = func(l *loop.Config) { l.ShutdownTimeout = 50 * time.Millisecond }
				})
				c := gw.dial(tr, nil)
				name := "close-" + tr
				errc := make(chan error, 1)
				go func() { errc <- c.Call(context.Background(), "edge/gate", gateParams(name), nil) }()
				gw.waitGate(name, 1)
				sub := subscribe(t, c, "watch", nil)
				ticks := subscribe(t, c, "edge/ticks", map[string]int{"count": 1000000, "intervalMs": 5})
				select {
				case <-c.Done():
					t.Fatalf("Done closed while the connection is up: %v", c.Err())
				default:
				}
				if err := c.Err(); err != nil {
					t.Fatalf("Err() = %v while the connection is up", err)
				}
				switch by {
				case "client":
					if err := c.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
				case "gateway close":
					gw.stop()
				case "gateway shutdown":
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						_ = gw.srv.Shutdown(ctx)
					}()
				}
				waitDone(t, c)
				err := recv(t, errc, "the pending call")
				var rpcErr *client.Error
				switch {
				case by == "gateway shutdown":
					// Still running at the shutdown deadline: answered before
					// the close (CONTRACT.md section 9).
					if !errors.As(err, &rpcErr) || rpcErr.DataCode() != "SERVER_SHUTTING_DOWN" {
						t.Fatalf("pending call: %v, want SERVER_SHUTTING_DOWN", err)
					}
				case !errors.Is(err, client.ErrClosed):
					t.Fatalf("pending call: %v, want ErrClosed", err)
				}
				for _, s := range []*client.Subscription{sub, ticks} {
					drain(t, s)
					err := s.Err()
					if err == nil && by == "gateway shutdown" {
						continue // the drain ended it with "done" (CONTRACT.md section 9)
					}
					if !errors.Is(err, client.ErrClosed) {
						t.Fatalf("subscription %s: Err() = %v, want ErrClosed", s.ID, err)
					}
				}
				if err := c.Err(); !errors.Is(err, client.ErrClosed) {
					t.Fatalf("Err() = %v, want ErrClosed", err)
				}
				if err := c.Call(context.Background(), "edge/echo", nil, nil); !errors.Is(err, client.ErrClosed) {
					t.Fatalf("call after close: %v, want ErrClosed", err)
				}
				if s, err := c.Subscribe(context.Background(), "watch", nil); !errors.Is(err, client.ErrClosed) {
					t.Fatalf("subscribe after close: %v, %v; want ErrClosed", s, err)
				}
				if err := sub.Close(); err != nil {
					t.Fatalf("Subscription.Close after the connection ended: %v", err)
				}
				gw.waitGate(name, 0)
			})
		}
	}
}

// TestConcurrentCallSubscribeClose runs Calls, cancelled Calls, Subscribes
// and Subscription.Closes against one client while it is closed from two
// goroutines. Everything returns, with nil, ErrClosed or ctx.Err(); the race
// detector watches the rest.
func TestConcurrentCallSubscribeClose(t *testing.T) {
	gw := startGateway(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := gw.dial(tr, &client.Options{SubscriptionBuffer: 16})
			var answered atomic.Int64
			enough := make(chan struct{})
			var once sync.Once
			progress := func() {
				if answered.Add(1) == 300 {
					once.Do(func() { close(enough) })
				}
			}
			ok := func(err error) bool {
				// SERVER_BUSY: cancelled calls keep their slots until their
				// workers return (and over NDJSON nothing cancels them), so
				// the loops below may briefly fill the 256 slots.
				var re *client.Error
				return err == nil || errors.Is(err, client.ErrClosed) || errors.Is(err, context.Canceled) ||
					errors.As(err, &re) && re.DataCode() == "SERVER_BUSY"
			}
			closed := func(err error) bool { return errors.Is(err, client.ErrClosed) }
			var wg sync.WaitGroup
			errc := make(chan error, 64)
			report := func(what string, err error) {
				select {
				case errc <- fmt.Errorf("%s: %w", what, err):
				default:
				}
			}
			for g := range 6 {
				wg.Go(func() { // plain calls
					for i := 0; ; i++ {
						want := echoParams{G: g, I: i}
						var got echoParams
						err := c.Call(context.Background(), "edge/echo", want, &got)
						if err != nil {
							if !ok(err) {
								report("call", err)
							}
							if closed(err) {
								return
							}
							continue
						}
						if got != want {
							report("call", fmt.Errorf("got %+v, want %+v", got, want))
							return
						}
						progress()
					}
				})
			}
			for range 3 {
				wg.Go(func() { // calls cancelled at once, each followed by a plain one
					for i := 0; ; i++ {
						ctx, cancel := context.WithCancel(context.Background())
						errs := make(chan error, 1)
						go func() { errs <- c.Call(ctx, "edge/sleep", map[string]int{"ms": i % 3}, nil) }()
						cancel()
						err := <-errs
						if !ok(err) {
							report("cancelled call", err)
							return
						}
						if closed(err) {
							return
						}
						// Wait for a round trip, which bounds the number of
						// cancelled calls still running on the gateway.
						if err := c.Call(context.Background(), "edge/sleep", map[string]int{"ms": 3}, nil); closed(err) {
							return
						} else if !ok(err) {
							report("call after a cancelled one", err)
							return
						}
					}
				})
			}
			for g := range 4 {
				wg.Go(func() { // subscriptions, read fully or closed early
					for i := 0; ; i++ {
						ctx, cancel := context.WithCancel(context.Background())
						if i%4 == 3 {
							cancel() // abandoned while establishing, maybe
						}
						sub, err := c.Subscribe(ctx, "edge/ticks", map[string]int{"count": 20, "intervalMs": 0})
						cancel()
						if err != nil {
							if !ok(err) {
								report("subscribe", err)
								return
							}
							if closed(err) {
								return
							}
							continue
						}
						n := 0
						for range sub.Events() {
							if n++; (g+i)%2 == 0 && n == 5 {
								if err := sub.Close(); err != nil && !ok(err) {
									report("sub close", err)
								}
							}
						}
						if err := sub.Err(); err != nil && !ok(err) {
							var ce *client.ClosedError
							if !errors.As(err, &ce) || ce.Reason != "SLOW_CONSUMER" {
								report("subscription end", err)
							}
						}
						progress()
					}
				})
			}
			recv(t, enough, "300 answers")
			wg.Go(func() { _ = c.Close() })
			wg.Go(func() { _ = c.Close() })
			finished := make(chan struct{})
			go func() { wg.Wait(); close(finished) }()
			recv(t, finished, "every goroutine to return after Close")
			close(errc)
			for err := range errc {
				t.Error(err)
			}
		})
	}
}

// TestMessageTooBigIsErrClosed is the regression test for a connection
// ended by an over-long inbound message not reporting ErrClosed. ErrClosed
// is documented as reporting "a call on a closed client, or one whose
// connection ended", and errors.Is(err, ErrClosed) is how a caller learns
// that it must reconnect; but shutdown keeps the bare ErrMessageTooBig as
// the cause, so the pending call, c.Err() and every later call fail with an
// error that is not ErrClosed.
func TestMessageTooBigIsErrClosed(t *testing.T) {
	t.Parallel()
	f, c := startFake(t, &client.Options{MaxMessageBytes: 64})
	e := async(func() error { return c.Call(context.Background(), "m", nil, nil) })
	f.expect(request(1, "m", `{}`))
	f.send(result(1, `"`+strings.Repeat("z", 100)+`"`))
	err := recv(t, e, "the pending call")
	waitDone(t, c)
	for _, got := range []struct {
		what string
		err  error
	}{
		{"pending call", err},
		{"Err()", c.Err()},
		{"later call", c.Call(context.Background(), "m", nil, nil)},
	} {
		if !errors.Is(got.err, client.ErrMessageTooBig) || !errors.Is(got.err, client.ErrClosed) {
			t.Errorf("%s: %v, want both ErrMessageTooBig and ErrClosed", got.what, got.err)
		}
	}
}

// TestWebSocketPingPong: the client answers the gateway's pings, so a
// connection silent for many ping intervals stays up. The gateway pings
// once after 20 ms of silence and closes after 2 s more without a pong; the
// test waits (through the recording proxy) until it has sent five pings,
// which it does within the poll's bound only if each one was answered.
func TestWebSocketPingPong(t *testing.T) {
	gw := startGateway(t, func(c *gwConfig) {
		c.tap = true
		c.loop = func(l *loop.Config) { l.PingInterval, l.PongTimeout = 20*time.Millisecond, 2*time.Second }
	})
	c := gw.dial("ws", nil)
	mustEcho(t, c, 1)
	poll.Until(t, waitTimeout, "five pings", func() (bool, string) {
		n := gw.tap.count([]byte{0x89}) // FIN + ping: never a byte of JSON text
		select {
		case <-c.Done():
			t.Fatalf("connection ended after %d pings: %v", n, c.Err())
		default:
		}
		return n >= 5, strconv.Itoa(n) + " pings"
	})
	mustEcho(t, c, 2)
}

// slowSubscriber wraps the memory backend so that each subscription's
// establishment waits until the test releases it.
type slowSubscriber struct {
	*backend.Memory
	entered     chan struct{} // a Subscribe call arrived
	release     chan struct{} // the test sends one value per establishment
	established chan struct{} // Establish was called
	returned    chan error    // Subscribe returned
}

func (s *slowSubscriber) Subscribe(ctx context.Context, method string, params []byte, st backend.Stream) error {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		s.returned <- ctx.Err()
		return ctx.Err()
	}
	err := s.Memory.Subscribe(ctx, method, params, signalStream{st, s.established})
	s.returned <- err
	return err
}

type signalStream struct {
	backend.Stream
	established chan struct{}
}

func (s signalStream) Establish(result []byte) {
	s.Stream.Establish(result)
	s.established <- struct{}{}
}
