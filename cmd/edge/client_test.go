package main

// Tests of the `edge call` and `edge subscribe` subcommands, run through run()
// against an in-process gateway on 127.0.0.1. Identifiers here carry a cli
// prefix so that they never clash with main_test.go's.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/auth"
	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/client"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testcert"
	"github.com/openengine/edge/internal/testgw"
	"github.com/openengine/edge/loop"
)

const cliWait = 5 * time.Second // one awaited effect

// cliGateway is an in-process gateway with the memory backend.
type cliGateway struct {
	mem    *backend.Memory
	pool   *backend.Pool
	wsURL  string
	tcpURL string
}

// cliStartGateway starts a gateway serving WebSocket and NDJSON over TCP
// (testgw.Start), stopped in t.Cleanup, and arms a watchdog.
func cliStartGateway(t *testing.T) *cliGateway {
	t.Helper()
	watchdog(t)
	g := testgw.Start(t, testgw.Config{Loop: loop.Config{Loops: 1}, MaxTasks: 1024, NDJSON: true, QuietLogs: true})
	return &cliGateway{mem: g.Mem, pool: g.Pool, wsURL: "ws://" + g.Srv.Addr().String() + "/", tcpURL: "tcp://" + g.Srv.NDJSONAddr().String()}
}

var cliTransports = []string{"ws", "tcp"}

func (gw *cliGateway) url(transport string) string {
	if transport == "ws" {
		return gw.wsURL
	}
	return gw.tcpURL
}

// cliRun runs edge with args, bounded by cliWait, and returns its output.
func cliRun(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, strings.NewReader(""), &out, &errOut) }()
	select {
	case err = <-done:
	case <-time.After(cliWait):
		cancel()
		<-done
		t.Fatalf("edge %q still running after %s", args, cliWait)
	}
	return out.String(), errOut.String(), err
}

func TestRunCall(t *testing.T) {
	gw := cliStartGateway(t)
	for _, tr := range cliTransports {
		t.Run(tr, func(t *testing.T) {
			tests := []struct {
				name string
				args []string
				want string
			}{
				{"echo", []string{"call", gw.url(tr), "edge/echo", `{"a":1}`}, `{"a":1}` + "\n"},
				{"no params", []string{"call", gw.url(tr), "edge/echo"}, `{}` + "\n"},
				{"params kept as written", []string{"call", gw.url(tr), "edge/echo", ` {"b" : [1, 2]} `}, `{"b" : [1, 2]}` + "\n"},
				{"timeout flag", []string{"call", "--timeout", "5s", gw.url(tr), "edge/sleep", `{"ms":1}`}, `{"sleptMs":1}` + "\n"},
				{"initialize", []string{"call", gw.url(tr), "initialize", `{"protocolVersion":"openengine.cluster/v1"}`},
					`{"protocolVersion":"openengine.cluster/v1","capabilities":{"graphProfiles":[],"logs":false,"agentAttach":false},"status":{"phase":"empty","observedGeneration":null,"currentRunId":null,"atCursor":null}}` + "\n"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					stdout, stderr, err := cliRun(t, tt.args...)
					if err != nil || stdout != tt.want || stderr != "" {
						t.Fatalf("edge %q: err %v, stdout %q, stderr %q; want stdout %q", tt.args, err, stdout, stderr, tt.want)
					}
				})
			}
		})
	}
}

// TestRunCallError: an RPC error is printed as one {"error":...} line and
// fails the command with the *client.Error.
func TestRunCallError(t *testing.T) {
	gw := cliStartGateway(t)
	tests := []struct {
		name   string
		method string
		params string
		want   string
	}{
		{"method not found", "edge/nope", `{}`, `{"error":{"code":-32601,"message":"Method not found"}}`},
		{"params not an object", "edge/echo", `[1]`, `{"error":{"code":-32602,"message":"Invalid params"}}`},
		{"with data", "edge/sleep", `{"ms":-1}`, `{"error":{"code":-32602,"message":"Invalid params","data":{"code":"SCHEMA_VIOLATION"}}}`},
		{"with details", "initialize", `{"protocolVersion":"x"}`,
			`{"error":{"code":-32000,"message":"Unsupported protocol version","data":{"code":"UNSUPPORTED_PROTOCOL_VERSION","details":{"requestedProtocolVersion":"x","supportedProtocolVersion":"openengine.cluster/v1"}}}}`},
	}
	for _, tr := range cliTransports {
		for _, tt := range tests {
			t.Run(tr+"/"+tt.name, func(t *testing.T) {
				stdout, _, err := cliRun(t, "call", gw.url(tr), tt.method, tt.params)
				var re *client.Error
				if !errors.As(err, &re) {
					t.Fatalf("err %v, want a *client.Error", err)
				}
				if stdout != tt.want+"\n" {
					t.Fatalf("stdout %q, want %q", stdout, tt.want+"\n")
				}
			})
		}
	}
}

// TestRunCallTimeout: --timeout bounds the whole call.
func TestRunCallTimeout(t *testing.T) {
	gw := cliStartGateway(t)
	for _, tr := range cliTransports {
		t.Run(tr, func(t *testing.T) {
			name := "cli-timeout-" + tr
			stdout, _, err := cliRun(t, "call", "--timeout", "50ms", gw.url(tr), "edge/gate", `{"name":"`+name+`"}`)
			if !errors.Is(err, context.DeadlineExceeded) || stdout != "" {
				t.Fatalf("err %v, stdout %q; want context.DeadlineExceeded and no output", err, stdout)
			}
			// Over NDJSON nothing cancels the call on the gateway.
			_, _ = gw.mem.Call(context.Background(), "edge/open", []byte(`{"name":"`+name+`"}`), nil)
		})
	}
}

// TestRunSubscribe: subscribe prints the establishment result, then each
// event's params, one line each, and returns nil when the server ends the
// subscription with "done".
func TestRunSubscribe(t *testing.T) {
	gw := cliStartGateway(t)
	for _, tr := range cliTransports {
		t.Run(tr, func(t *testing.T) {
			stdout, stderr, err := cliRun(t, "subscribe", gw.url(tr), "edge/ticks", `{"count":3,"intervalMs":0}`)
			if err != nil || stderr != "" {
				t.Fatalf("err %v, stderr %q, stdout %q", err, stderr, stdout)
			}
			lines := strings.Split(stdout, "\n")
			if len(lines) != 5 || lines[4] != "" {
				t.Fatalf("stdout %q, want 4 lines", stdout)
			}
			var res struct {
				SubscriptionID string `json:"subscriptionId"`
			}
			if err := json.Unmarshal([]byte(lines[0]), &res); err != nil || res.SubscriptionID == "" {
				t.Fatalf("first line %q, want the result with a subscriptionId", lines[0])
			}
			id, _ := json.Marshal(res.SubscriptionID)
			for i, line := range lines[1:4] {
				want := fmt.Sprintf(`{"subscriptionId":%s,"cursor":"%d","seq":%d}`, id, i+1, i+1)
				if line != want {
					t.Fatalf("event line %d: %q, want %q", i, line, want)
				}
			}
		})
	}
}

// TestRunSubscribeError: a failed establishment prints {"error":...} and
// fails the command.
func TestRunSubscribeError(t *testing.T) {
	gw := cliStartGateway(t)
	for _, tr := range cliTransports {
		t.Run(tr, func(t *testing.T) {
			stdout, _, err := cliRun(t, "subscribe", gw.url(tr), "edge/ticks", `{"count":0,"intervalMs":0}`)
			var re *client.Error
			want := `{"error":{"code":-32602,"message":"Invalid params","data":{"code":"SCHEMA_VIOLATION"}}}` + "\n"
			if !errors.As(err, &re) || stdout != want {
				t.Fatalf("err %v, stdout %q; want a *client.Error and %q", err, stdout, want)
			}
		})
	}
}

// TestRunSubscribeInterrupted: once ctx is cancelled (SIGINT), subscribe
// cancels the subscription on the gateway and returns nil.
func TestRunSubscribeInterrupted(t *testing.T) {
	gw := cliStartGateway(t)
	for _, tr := range cliTransports {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done, lines := runLines(ctx, "subscribe", gw.url(tr), "watch")
			select {
			case line := <-lines:
				if !strings.Contains(line, `"subscriptionId"`) || !strings.Contains(line, `"runId":null`) {
					t.Fatalf("first line %q, want the watch result", line)
				}
			case <-time.After(cliWait):
				t.Fatalf("no result line within %s", cliWait)
			}
			if n := gw.pool.Running(); n != 1 {
				t.Fatalf("%d backend tasks running, want the subscription's 1", n)
			}
			interrupt(t, cancel, done, cliWait)
			poll.Until(t, cliWait, "the subscription's backend task to end", func() (bool, string) {
				n := gw.pool.Running()
				return n == 0, fmt.Sprintf("%d backend tasks running", n)
			})
		})
	}
}

// runLines runs edge with args until ctx is done; done gets run's error,
// lines each line it prints (closed at the end of its output; the lines
// past 64 unread are dropped, so that run never waits on the test).
func runLines(ctx context.Context, args ...string) (done <-chan error, lines <-chan string) {
	pr, pw := io.Pipe()
	errc, out := make(chan error, 1), make(chan string, 64)
	go func() {
		err := run(ctx, args, strings.NewReader(""), pw, io.Discard)
		pw.Close()
		errc <- err
	}()
	go func() {
		defer close(out)
		br := bufio.NewReader(pr)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case out <- line:
			default:
			}
		}
	}()
	return errc, out
}

// interrupt cancels a running `edge subscribe`'s ctx (its SIGINT) and
// requires run to return nil, its error on done, within wait.
func interrupt(t *testing.T, cancel context.CancelFunc, done <-chan error, wait time.Duration) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatalf("subscribe still running %s after cancel", wait)
	}
}

// TestRunClientUsage: bad command lines fail with a clear error before or
// at the dial, and print nothing on stdout.
func TestRunClientUsage(t *testing.T) {
	gw := cliStartGateway(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string // substring of the error
		is      error  // or errors.Is target
		usage   bool   // usage on stderr
	}{
		{"no args", []string{"call"}, "want URL METHOD [PARAMS]", nil, true},
		{"no method", []string{"subscribe", gw.wsURL}, "want URL METHOD [PARAMS]", nil, true},
		{"too many", []string{"call", gw.wsURL, "edge/echo", "{}", "{}"}, "want URL METHOD [PARAMS]", nil, true},
		{"bad params", []string{"call", gw.wsURL, "edge/echo", `{a:1}`}, "PARAMS is not valid JSON", nil, false},
		{"truncated params", []string{"subscribe", gw.tcpURL, "edge/ticks", `{"count":1`}, "PARAMS is not valid JSON", nil, false},
		{"bad flag", []string{"call", "--nope", gw.wsURL, "edge/echo"}, "flag provided but not defined", nil, true},
		{"help", []string{"call", "-h"}, "", flag.ErrHelp, true},
		{"bad scheme", []string{"call", "http://127.0.0.1:1/", "edge/echo"}, "", client.ErrScheme, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := cliRun(t, tt.args...)
			switch {
			case err == nil:
				t.Fatalf("edge %q succeeded, stdout %q", tt.args, stdout)
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Fatalf("err %v, want %v", err, tt.is)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("err %q, want it to contain %q", err, tt.wantErr)
			}
			if stdout != "" {
				t.Fatalf("stdout %q, want nothing", stdout)
			}
			if tt.usage != strings.Contains(stderr, "Usage: edge ") {
				t.Fatalf("stderr %q, usage printed: want %v", stderr, tt.usage)
			}
		})
	}
}

// TestRunCallSecure: wss:// with --ca or --insecure, the token from --token
// or EDGE_TOKEN; a refused token fails without the token in the error.
func TestRunCallSecure(t *testing.T) {
	watchdog(t)
	cert := testcert.New(t, "edge-cli-test")
	dir := t.TempDir()
	const token = "cli-s3cret-token"
	tokens, ca := filepath.Join(dir, "tokens"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(tokens, []byte("carol "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := auth.LoadTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	g := testgw.Start(t, testgw.Config{Loop: loop.Config{Loops: 1, TLS: cert.ServerConfig(), Auth: v}, MaxTasks: 1024, QuietLogs: true})
	url := "wss://" + g.Srv.Addr().String() + "/"
	want := `{"subject":"carol",`
	for _, args := range [][]string{
		{"call", "--ca", ca, "--token", token, url, "edge/whoami"},
		{"call", "--insecure", "--token", token, url, "edge/whoami"},
	} {
		stdout, stderr, err := cliRun(t, args...)
		if err != nil || !strings.HasPrefix(stdout, want) {
			t.Fatalf("edge %q: err %v, stdout %q, stderr %q; want %s...", args, err, stdout, stderr, want)
		}
	}
	t.Setenv(clientTokenEnv, token)
	if stdout, _, err := cliRun(t, "call", "--ca", ca, url, "edge/whoami"); err != nil || !strings.HasPrefix(stdout, want) {
		t.Fatalf("with EDGE_TOKEN: err %v, stdout %q", err, stdout)
	}
	t.Setenv(clientTokenEnv, "")
	for _, args := range [][]string{
		{"call", "--ca", ca, "--token", token + "-wrong", url, "edge/whoami"},
		{"call", "--ca", ca, url + "?access_token=" + token + "-wrong", "edge/whoami"},
		{"call", "--token", token, url, "edge/whoami"}, // the certificate is not trusted
	} {
		stdout, stderr, err := cliRun(t, args...)
		if err == nil {
			t.Fatalf("edge %q succeeded: %q", args, stdout)
		}
		if strings.Contains(err.Error()+stdout+stderr, token) {
			t.Fatalf("edge %q shows the token: err %v, stdout %q, stderr %q", args, err, stdout, stderr)
		}
	}
}

// watchRetries hooks onDialRetry for the test: the channel gets the first
// refusal that edge call retries.
func watchRetries(t *testing.T) <-chan error {
	refused := make(chan error, 1)
	onDialRetry = func(err error) {
		select {
		case refused <- err:
		default:
		}
	}
	t.Cleanup(func() { onDialRetry = nil })
	return refused
}

// cliResult is what run printed on stdout, and its error.
type cliResult struct {
	stdout string
	err    error
}

// runAsync runs edge with args on a goroutine; the channel gets its result.
func runAsync(args ...string) <-chan cliResult {
	done := make(chan cliResult, 1)
	go func() {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, strings.NewReader(""), &out, &errOut)
		done <- cliResult{out.String(), err}
	}()
	return done
}

// TestRunCallWait: --wait retries while nothing listens yet, so a script can
// start edge and call it at once.
func TestRunCallWait(t *testing.T) {
	watchdog(t)
	addr := testgw.FreeAddr(t, "127.0.0.1")
	if _, _, err := cliRun(t, "call", "ws://"+addr+"/", "edge/echo"); err == nil {
		t.Fatal("a call with nothing listening succeeded")
	}
	refused := watchRetries(t)
	done := runAsync("call", "--wait", "4s", "ws://"+addr+"/", "edge/echo", `{"up":true}`)
	// The gateway starts once the caller has been refused: the listener
	// appears while it retries.
	select {
	case err := <-refused:
		t.Logf("refused, retrying: %v", err)
	case <-time.After(cliWait):
		t.Fatal("edge call --wait never retried")
	}
	testgw.Start(t, testgw.Config{Loop: loop.Config{Loops: 1, Listen: addr}, MaxTasks: 1024, QuietLogs: true})
	select {
	case r := <-done:
		if r.err != nil || r.stdout != `{"up":true}`+"\n" {
			t.Fatalf("edge call --wait: err %v, stdout %q", r.err, r.stdout)
		}
	case <-time.After(cliWait):
		t.Fatal("edge call --wait did not return")
	}
}

// TestRunCallWaitUpstream: --wait also retries a call answered
// UPSTREAM_UNAVAILABLE, so that a script that starts edge and its upstream
// together can call at once; without --wait the same call fails.
func TestRunCallWaitUpstream(t *testing.T) {
	upAddr := testgw.FreeAddr(t, "127.0.0.1")
	e := startEdge(t, "--listen", "127.0.0.1:0", "--upstream", "engine=tcp://"+upAddr, "--upstream-backoff-max", "100ms")
	_, _, err := cliRun(t, "call", e.ws, "edge/echo")
	var re *client.Error
	if !errors.As(err, &re) || re.DataCode() != "UPSTREAM_UNAVAILABLE" {
		t.Fatalf("call with the upstream down: %v, want UPSTREAM_UNAVAILABLE", err)
	}
	refused := watchRetries(t)
	done := runAsync("call", "--wait", "8s", e.ws, "edge/echo", `{"up":1}`)
	select {
	case err := <-refused:
		t.Logf("retrying: %v", err)
	case <-time.After(cliWait):
		t.Fatal("edge call --wait never retried")
	}
	testgw.Start(t, testgw.Config{Loop: loop.Config{Loops: 1, NDJSONListen: upAddr}, QuietLogs: true})
	select {
	case r := <-done:
		if r.err != nil || r.stdout != `{"up":1}`+"\n" {
			t.Fatalf("edge call --wait: err %v, stdout %q", r.err, r.stdout)
		}
	case <-time.After(edgeWait):
		t.Fatal("edge call --wait did not return")
	}
}
