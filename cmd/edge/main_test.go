package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
)

// Time bounds: every wait is bounded; none is used to wait for an effect.
const (
	readTimeout     = 5 * time.Second
	exitTimeout     = 10 * time.Second
	watchdogTimeout = 45 * time.Second
)

// goldenDir holds the protocol's golden transcripts (request line, response
// line pairs), read in place from the shared seed fixtures beside the
// repository (cmd/edge is one level deeper than test/).
var goldenDir = filepath.Join("..", "..", "..", "shared", "seed-fixtures", "goldens")

// goldenSkip lists the goldens that the memory backend cannot answer, with
// the reason. admission-errors.ndjson exercises apply's admission checks
// (dry-run with an idempotency key, idempotency key reuse), which need a
// backend that implements apply; the memory backend is an empty cluster that
// answers apply -32000 INVALID_PHASE (CONTRACT.md section 8). The same table
// drives the NDJSON-over-TCP and WebSocket runs in test/transport_test.go.
var goldenSkip = map[string]string{
	"admission-errors.ndjson": "apply admission checks need a backend that implements apply",
}

// golden is one golden transcript: request/response line pairs.
type golden struct {
	name  string
	pairs [][2]string
}

// goldens returns every golden in goldenDir that the memory backend can
// answer, sorted by name.
func goldens(t *testing.T) []golden {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	var out []golden
	for _, p := range paths {
		name := filepath.Base(p)
		if _, skip := goldenSkip[name]; skip {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) > 0 {
				lines = append(lines, sc.Text())
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(lines) == 0 || len(lines)%2 != 0 {
			t.Fatalf("%s: %d lines, want request/response pairs", name, len(lines))
		}
		g := golden{name: name}
		for i := 0; i < len(lines); i += 2 {
			g.pairs = append(g.pairs, [2]string{lines[i], lines[i+1]})
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b golden) int { return strings.Compare(a.name, b.name) })
	// The seed fixtures have seven goldens the memory backend answers; fewer
	// means the fixtures moved, not that there is less to check.
	if len(out) < 7 {
		t.Fatalf("found %d goldens in %s, want at least 7", len(out), goldenDir)
	}
	return out
}

// watchdog fails the whole run if t outlives watchdogTimeout (testgw.Watchdog).
func watchdog(t *testing.T) { testgw.Watchdog(t, watchdogTimeout) }

// lineReader turns an output stream into lines on a channel: each line
// without its "\n"; an unterminated tail is reported as such, then the
// channel is closed.
func lineReader(r io.Reader) <-chan string {
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		br := bufio.NewReader(r)
		for {
			s, err := br.ReadString('\n')
			if err != nil {
				if s != "" {
					ch <- "UNTERMINATED " + s
				}
				return
			}
			ch <- s[:len(s)-1]
		}
	}()
	return ch
}

// session is one NDJSON session over a child's stdin and stdout: `edge
// --stdio` run in-process or as a process.
type session struct {
	t     *testing.T
	in    io.WriteCloser
	lines <-chan string
	// signal cancels the ctx run was given, as SIGTERM does (in-process only).
	signal context.CancelFunc
}

func (s *session) send(line string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatalf("write stdin: %v", err)
	}
}

// recv returns the next stdout line; every stdout line must be a complete
// JSON-RPC message ending in a bare "\n" (CONTRACT.md section 1.2: stdout
// carries protocol messages only).
func (s *session) recv() string {
	s.t.Helper()
	select {
	case line, ok := <-s.lines:
		if !ok {
			s.t.Fatalf("stdout closed, want a message")
		}
		checkProtocolLine(s.t, line)
		return line
	case <-time.After(readTimeout):
		s.t.Fatalf("no message on stdout within %s", readTimeout)
	}
	return ""
}

// expectEnd requires stdout to end with nothing more written.
func (s *session) expectEnd() {
	s.t.Helper()
	select {
	case line, ok := <-s.lines:
		if ok {
			s.t.Fatalf("got %q on stdout, want its end", line)
		}
	case <-time.After(exitTimeout):
		s.t.Fatalf("stdout not closed within %s", exitTimeout)
	}
}

// checkProtocolLine requires line to be one JSON-RPC 2.0 object.
func checkProtocolLine(t *testing.T, line string) {
	t.Helper()
	var m struct {
		JSONRPC string `json:"jsonrpc"`
	}
	if strings.HasSuffix(line, "\r") || json.Unmarshal([]byte(line), &m) != nil || m.JSONRPC != "2.0" {
		t.Fatalf("stdout line %q is not a JSON-RPC 2.0 message", line)
	}
}

// startStdio runs run() with --stdio and args on a goroutine, with stdin and
// stdout as pipes. wait closes nothing; it returns run's result.
func startStdio(t *testing.T, args ...string) (s *session, wait func() error, stderr *testgw.Buffer) {
	t.Helper()
	watchdog(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr = &testgw.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"--stdio"}, args...), inR, outW, stderr)
		outW.Close()
		done <- err
	}()
	var (
		once   sync.Once
		result error
	)
	wait = func() error {
		once.Do(func() {
			select {
			case result = <-done:
			case <-time.After(exitTimeout):
				result = fmt.Errorf("run did not return within %s", exitTimeout)
			}
		})
		return result
	}
	t.Cleanup(func() {
		inW.Close()
		cancel()
		if err := wait(); err != nil {
			t.Errorf("run: %v", err)
		}
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	})
	return &session{t: t, in: inW, lines: lineReader(outR), signal: cancel}, wait, stderr
}

// TestStdioGoldens runs `edge --stdio` in-process (run with pipes) and
// requires every golden response byte for byte, one request at a time;
// after stdin ends, run returns nil and stdout carries nothing else. The
// same goldens run over NDJSON on TCP and over WebSocket in package test.
func TestStdioGoldens(t *testing.T) {
	for _, g := range goldens(t) {
		t.Run(g.name, func(t *testing.T) {
			s, wait, _ := startStdio(t)
			for _, p := range g.pairs {
				s.send(p[0])
				if got := s.recv(); got != p[1] {
					t.Fatalf("request %s\ngot  %s\nwant %s", p[0], got, p[1])
				}
			}
			s.in.Close()
			if err := wait(); err != nil {
				t.Fatalf("run: %v", err)
			}
			s.expectEnd()
		})
	}
}

// echoReq is an edge/echo request with a JSON id, and echoRes its answer.
func echoReq(id, v string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"edge/echo","params":{"v":"` + v + `"}}`
}

func echoRes(id, v string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{"v":"` + v + `"}}`
}

// Fixed error responses of CONTRACT.md section 7.
const (
	parseError     = `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`
	invalidRequest = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`
)

// runStdio runs `edge --stdio args` in-process on stdin and returns stdout,
// run's error and how long it ran.
func runStdio(t *testing.T, stdin string, args ...string) (stdout string, err error, took time.Duration) {
	t.Helper()
	var out bytes.Buffer
	stderr := &testgw.Buffer{}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- run(context.Background(), append([]string{"--stdio"}, args...), strings.NewReader(stdin), &out, stderr)
	}()
	select {
	case err = <-done:
	case <-time.After(exitTimeout):
		t.Fatalf("run did not return within %s; stderr:\n%s", exitTimeout, stderr.String())
	}
	return out.String(), err, time.Since(start)
}

// TestStdioEOF checks what `edge --stdio` does when stdin ends (EOF): every
// line read is answered, a trailing fragment without "\n" is a message too,
// work in flight finishes and is answered before run returns nil, and live
// subscriptions end with subscription/closed "done". Also the stdio side of
// CONTRACT.md section 1.2: $/cancelRequest gets -32600 id null and cancels
// nothing, an over-long line gets -32700 and the next line is answered.
// Output order is deterministic in every case: at most one backend answer is
// outstanding at a time, and inline answers are written at once.
func TestStdioEOF(t *testing.T) {
	watchdog(t)
	sleep := `{"jsonrpc":"2.0","id":"s","method":"edge/sleep","params":{"ms":100}}`
	slept := `{"jsonrpc":"2.0","id":"s","result":{"sleptMs":100}}`
	long := echoReq("2", strings.Repeat("x", 1024)) // over --max-message-bytes 1024
	tests := []struct {
		name  string
		args  []string
		stdin string
		want  []string
		// accept, if set, replaces want: the stdout lines of any one entry.
		accept [][]string
		// minTook is a lower bound on run's duration: it proves run waited for
		// the work in flight instead of dropping it.
		minTook time.Duration
	}{
		{name: "empty input", stdin: "", want: nil},
		{name: "one line", stdin: echoReq("1", "a") + "\n", want: []string{echoRes("1", "a")}},
		{name: "fragment without newline is a message", stdin: echoReq("1", "frag"), want: []string{echoRes("1", "frag")}},
		{name: "fragment with CR is a message", stdin: echoReq("1", "frag") + "\r", want: []string{echoRes("1", "frag")}},
		{name: "CRLF lines", stdin: echoReq("1", "a") + "\r\n", want: []string{echoRes("1", "a")}},
		{name: "fragment that is not JSON", stdin: `{"jsonrpc":"2.0","id":1,`, want: []string{parseError}},
		{name: "blank line is a parse error", stdin: "\n", want: []string{parseError}},
		{name: "request in flight", stdin: sleep + "\n", want: []string{slept}, minTook: 100 * time.Millisecond},
		{name: "request in flight, fragment", stdin: sleep, want: []string{slept}, minTook: 100 * time.Millisecond},
		{
			name:    "$/cancelRequest is an invalid request",
			stdin:   sleep + "\n" + `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"s"}}` + "\n",
			want:    []string{invalidRequest, slept}, // not cancelled: it still answers
			minTook: 100 * time.Millisecond,
		},
		{
			name:  "over-long line then the next line",
			args:  []string{"--max-message-bytes", "1024"},
			stdin: long + "\n" + echoReq("3", "after") + "\n",
			want:  []string{parseError, echoRes("3", "after")},
		},
		{
			name:  "over-long fragment at EOF",
			args:  []string{"--max-message-bytes", "1024"},
			stdin: long,
			want:  []string{parseError},
		},
		{
			// At EOF ServeStream ends live subscriptions "done" as soon as
			// no request is pending, also a finite one still producing: the
			// subscription delivers some prefix of its events, then closed
			// with the last delivered cursor. Which prefix is a race.
			name:   "ticks subscription at EOF",
			stdin:  `{"jsonrpc":"2.0","id":"t","method":"edge/ticks","params":{"count":3,"intervalMs":0}}` + "\n",
			accept: ticksPrefixes(3),
		},
		{
			name:  "live subscription ends done",
			stdin: `{"jsonrpc":"2.0","id":"w","method":"watch","params":{}}` + "\n",
			want: []string{
				`{"jsonrpc":"2.0","id":"w","result":{"subscriptionId":"s1","runId":null,"atCursor":null}}`,
				`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done"}}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err, took := runStdio(t, tt.stdin, tt.args...)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			accept := tt.accept
			if accept == nil {
				accept = [][]string{tt.want}
			}
			var wants []string
			for _, a := range accept {
				var want string
				for _, w := range a {
					want += w + "\n"
				}
				wants = append(wants, want)
			}
			if !slices.Contains(wants, out) {
				t.Fatalf("stdout:\n%s\nwant one of:\n%s", out, strings.Join(wants, "\n"))
			}
			if took < tt.minTook {
				t.Fatalf("run returned after %s, before the work in flight (%s) could finish", took, tt.minTook)
			}
		})
	}
}

// ticksEvent is event seq of edge/ticks subscription s1.
func ticksEvent(seq int) string {
	n := strconv.Itoa(seq)
	return `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"` + n + `","seq":` + n + `}}`
}

// ticksPrefixes returns the outputs of an edge/ticks subscription s1 with id
// "t" of count events that is ended after k = 0..count delivered events.
func ticksPrefixes(count int) [][]string {
	var out [][]string
	for k := 0; k <= count; k++ {
		o := []string{`{"jsonrpc":"2.0","id":"t","result":{"subscriptionId":"s1"}}`}
		for seq := 1; seq <= k; seq++ {
			o = append(o, ticksEvent(seq))
		}
		closed := `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done"}}`
		if k > 0 {
			closed = `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"` + strconv.Itoa(k) + `"}}`
		}
		out = append(out, append(o, closed))
	}
	return out
}

// TestStdioSession runs an interactive `edge --stdio` session in-process: an
// edge/ticks subscription runs to its end, a watch subscription is cancelled
// with subscription/cancel (no answer, no subscription/closed), and
// $/cancelRequest gets -32600 id null without cancelling the request it
// names (CONTRACT.md section 1.2). Once stdin ends, run returns nil.
func TestStdioSession(t *testing.T) {
	s, wait, _ := startStdio(t)
	expect := func(want ...string) {
		t.Helper()
		for _, w := range want {
			if got := s.recv(); got != w {
				t.Fatalf("got  %s\nwant %s", got, w)
			}
		}
	}
	s.send(`{"jsonrpc":"2.0","id":"t","method":"edge/ticks","params":{"count":3,"intervalMs":0}}`)
	expect(`{"jsonrpc":"2.0","id":"t","result":{"subscriptionId":"s1"}}`,
		ticksEvent(1), ticksEvent(2), ticksEvent(3),
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"3"}}`)

	s.send(`{"jsonrpc":"2.0","id":"w","method":"watch","params":{}}`)
	expect(`{"jsonrpc":"2.0","id":"w","result":{"subscriptionId":"s2","runId":null,"atCursor":null}}`)
	s.send(`{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"s2"}}`)
	// Poll edge/stats until the watch worker has returned; nothing else may
	// arrive meanwhile (no subscription/closed after a client cancel).
	poll.Until(t, readTimeout, "the watch to end", func() (bool, string) {
		s.send(`{"jsonrpc":"2.0","id":"st","method":"edge/stats","params":{}}`)
		got := s.recv()
		if !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":"st","result":`) {
			t.Fatalf("waiting for the watch to end: got %s", got)
		}
		return got == `{"jsonrpc":"2.0","id":"st","result":{"inFlightIds":0,"tasks":0,"subscriptions":0,"outboundBytes":0}}`, got
	})

	// One write, so both lines are handled in one turn: the inline -32600
	// comes first whatever the scheduling.
	s.send(`{"jsonrpc":"2.0","id":"g","method":"edge/sleep","params":{"ms":50}}` + "\n" +
		`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"g"}}`)
	expect(invalidRequest, `{"jsonrpc":"2.0","id":"g","result":{"sleptMs":50}}`)

	s.in.Close()
	if err := wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	s.expectEnd()
}

// TestStdioBinary builds the edge command once and pipes the goldens through
// the real process (`edge --stdio`), one request at a time, then a 100 ms
// edge/sleep immediately followed by the end of stdin: the sleep is still
// answered, the process exits with status 0 after it, and stdout carries the
// protocol messages and nothing else (logs would go to stderr).
func TestStdioBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdge(t) // before the watchdog: a cold build can take longer than its bound
	watchdog(t)
	gs := goldens(t)

	cmd := exec.Command(bin, "--stdio")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testgw.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := lineReader(stdout)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	})
	s := &session{t: t, in: stdin, lines: lines}
	for _, g := range gs {
		for _, p := range g.pairs {
			s.send(p[0])
			if got := s.recv(); got != p[1] {
				t.Fatalf("%s: request %s\ngot  %s\nwant %s", g.name, p[0], got, p[1])
			}
		}
	}
	s.send(`{"jsonrpc":"2.0","id":"last","method":"edge/sleep","params":{"ms":100}}`)
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := s.recv(), `{"jsonrpc":"2.0","id":"last","result":{"sleptMs":100}}`; got != want {
		t.Fatalf("after EOF: got %s, want %s", got, want)
	}
	s.expectEnd() // stdout fully read before Wait closes the pipe
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("edge --stdio exited with %v, want status 0", err)
		}
	case <-time.After(exitTimeout):
		t.Fatalf("edge --stdio still running %s after its stdin ended", exitTimeout)
	}
}

// TestStdioReadsAfterSignal is the regression test for `edge --stdio`
// ignoring its input once SIGTERM arrived: ServeStream stopped reading stdin
// when its ctx was cancelled, so a request written after the signal was never
// read or answered while the in-flight work still ran. CONTRACT.md section 9:
// on stdio, input read after the signal is answered like new requests on
// other transports, -32000 SERVER_SHUTTING_DOWN, and in-flight work still
// gets its response. The test polls edge/stats until it is answered
// SERVER_SHUTTING_DOWN (the signal has been handled: the select in ServeStream
// may see the signal and a line in either order), then sends one more request,
// while an edge/sleep request is in flight throughout.
func TestStdioReadsAfterSignal(t *testing.T) {
	s, wait, _ := startStdio(t)
	const (
		sleepReq = `{"jsonrpc":"2.0","id":"s","method":"edge/sleep","params":{"ms":400}}`
		sleepRes = `{"jsonrpc":"2.0","id":"s","result":{"sleptMs":400}}`
		stats    = `{"jsonrpc":"2.0","id":"st","method":"edge/stats","params":{}}`
		shutSt   = `{"jsonrpc":"2.0","id":"st","error":{"code":-32000,"message":"Server shutting down","data":{"code":"SERVER_SHUTTING_DOWN"}}}`
		lateReq  = `{"jsonrpc":"2.0","id":"late","method":"edge/echo","params":{}}`
		lateRes  = `{"jsonrpc":"2.0","id":"late","error":{"code":-32000,"message":"Server shutting down","data":{"code":"SERVER_SHUTTING_DOWN"}}}`
	)
	s.send(sleepReq)
	s.send(stats) // handled after the sleep was admitted: it is in flight
	if line := s.recv(); line != `{"jsonrpc":"2.0","id":"st","result":{"inFlightIds":1,"tasks":1,"subscriptions":0,"outboundBytes":0}}` {
		t.Fatalf("got %s, want stats with the sleep in flight", line)
	}
	s.signal()
	// Once the signal is handled, stdin may not be read any more (the bug):
	// writes go from a goroutine, so the test fails by timing out in recv
	// rather than hanging in a write to the pipe (the cleanup closes it).
	post := func(line string) {
		go func() { _, _ = io.WriteString(s.in, line+"\n") }()
	}
	// next returns the next line other than the sleep's answer, which may
	// come at any point.
	slept := false
	next := func() string {
		t.Helper()
		for {
			if line := s.recv(); line != sleepRes {
				return line
			}
			slept = true
		}
	}
	poll.Until(t, readTimeout, "the signal to be handled", func() (bool, string) {
		post(stats)
		line := next()
		if line != shutSt && !strings.HasPrefix(line, `{"jsonrpc":"2.0","id":"st","result":`) {
			t.Fatalf("waiting for the signal to be handled: got %s", line)
		}
		return line == shutSt, line
	})
	post(lateReq)
	if line := next(); line != lateRes {
		t.Fatalf("got %s, want %s", line, lateRes)
	}
	if !slept {
		if line := s.recv(); line != sleepRes {
			t.Fatalf("got %s, want the in-flight request's answer %s", line, sleepRes)
		}
	}
	// With nothing left in flight the shutdown ends: run returns without
	// waiting for stdin's EOF.
	if err := wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	s.expectEnd()
}

// buildEdge builds the edge command into a temporary directory and returns
// the binary's path. Call it before watchdog: on a cold build cache, beside
// `go test ./...` compiling other packages, the build alone took over
// watchdogTimeout (45 s); the go command is bounded by the test's -timeout.
func buildEdge(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edge")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
