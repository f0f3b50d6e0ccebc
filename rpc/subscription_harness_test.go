package rpc

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// This file is the script harness of the subscription tests. It follows the
// harness of harness_test.go (the test goroutine plays the event loop, no step
// sleeps, every wait has a watchdog) but drives subscription producers, which
// that harness's backend does not serve:
//
//   - subscribe sends a tracked request naming subMethod and returns once the
//     backend's Subscribe runs on a pool worker, blocked until told what to do;
//   - a producer's establish, emit and exit run Stream calls on the worker
//     goroutine and return once the call returned there, so whatever the call
//     posted to the loop is queued by then (a stream posts itself before
//     Establish or Emit returns);
//   - apply is the loop draining every completion queued so far, in order;
//   - the sink can be made not Writable, as a connection over its soft
//     outbound cap is, and Resume called as the transport would.

// Subscription methods of the harness registry.
const (
	// subMethod runs a producer the test drives step by step.
	subMethod = "test/sub"
	// parkMethod establishes at once and parks until its ctx is cancelled,
	// like the memory backend's watch, counting entries and returns.
	parkMethod = "test/park"
)

// subOpts configures a subscription harness. Zero values mean the defaults.
type subOpts struct {
	maxConnTasks int
	buffer       int // SubscriptionBuffer
	bufferBytes  int // SubscriptionBufferBytes
	cancelReply  CancelReply
	limit        int // the sink's OutboundLimit, the connection budget (0: 1 GiB)
	// deferring gives the session a DeferringSink (deferSink), as the
	// loop's connections are; so does deferAll.
	deferring bool
}

// deferAll makes every harness's sink a deferSink (TestDeferredEvents runs
// the subscription tests with it). Tests that set it are not parallel.
var deferAll bool

// subHarness is one simulated event loop with one session, a real pool and
// the controllable subscription backend.
type subHarness struct {
	t     *testing.T
	limit time.Duration

	pool  *backend.Pool
	srv   *Server
	be    *subBackend
	posts chan Completion // worker side: posted completions
	queue []Completion    // loop side: received, not yet applied, oldest first
	sink  *subSink
	dsink *deferSink // the session's sink when deferring, nil otherwise
	sess  *Session
	prods []*subProducer
	where string // the step running, for failure messages
}

// subSink records what the session sends. Loop-owned like a transport: only
// the test goroutine touches it.
type subSink struct {
	msgs     []string
	read     int
	writable bool
	limit    int // OutboundLimit
	pending  int // OutboundBytes
	// onSend, when set, runs after each Send, as a transport acts on what
	// it was handed (closing at its hard cap, say).
	onSend func()
}

func (s *subSink) Send(msg []byte) {
	s.msgs = append(s.msgs, string(msg))
	if s.onSend != nil {
		s.onSend()
	}
}
func (s *subSink) OutboundBytes() int { return s.pending }
func (s *subSink) OutboundLimit() int { return s.limit }
func (s *subSink) Writable() bool     { return s.writable }

// subPoster queues completions for the simulated loop; Post never blocks.
type subPoster chan Completion

func (p subPoster) Post(c Completion) {
	select {
	case p <- c:
	default:
		panic("rpc test: subPoster queue full")
	}
}

// subBackend serves edge/echo at once (any other unary method answers null)
// and the two subscription methods.
type subBackend struct {
	arrived  chan *subProducer
	quit     chan struct{} // closed at cleanup: every producer returns
	parked   atomic.Int64  // parkMethod calls entered
	returned atomic.Int64  // parkMethod calls returned
}

// subProducer is one Subscribe call of subMethod, driven by the test.
type subProducer struct {
	h      *subHarness
	ctx    context.Context
	s      backend.Stream
	params string
	cmds   chan subCmd
	task   *Task // the establishing request's task
	exited bool  // test-side: Subscribe was told to return
}

// subCmd is one step a producer runs on its worker goroutine.
type subCmd struct {
	run   func() bool
	exit  bool  // return from Subscribe after run
	err   error // what Subscribe returns
	reply chan bool
}

func (b *subBackend) Call(ctx context.Context, method string, params, dst []byte) ([]byte, error) {
	if method == "edge/echo" {
		return append(dst, params...), nil
	}
	return append(dst, "null"...), nil
}

func (b *subBackend) Subscribe(ctx context.Context, method string, params []byte, s backend.Stream) error {
	if method == parkMethod {
		b.parked.Add(1)
		defer b.returned.Add(1)
		s.Establish([]byte(`{"subscriptionId":"` + s.ID() + `"}`))
		<-ctx.Done()
		return nil
	}
	p := &subProducer{ctx: ctx, s: s, params: string(params), cmds: make(chan subCmd)}
	select {
	case b.arrived <- p:
	case <-b.quit:
		return nil
	}
	for {
		var c subCmd
		select {
		case c = <-p.cmds:
		case <-b.quit:
			return nil
		}
		ok := true
		if c.run != nil {
			ok = c.run()
		}
		c.reply <- ok
		if c.exit {
			return c.err
		}
	}
}

var _ backend.Subscriber = (*subBackend)(nil)

// newSubHarness starts a server whose registry has the two subscription
// methods, on a real pool, and opens one writable session. Everything is torn
// down in t.Cleanup.
func newSubHarness(t *testing.T, o subOpts) *subHarness {
	t.Helper()
	limit := maxWait
	if dl, ok := t.Deadline(); ok {
		if left := time.Until(dl) / 2; left < limit {
			limit = left
		}
	}
	pool := backend.NewPool(4096, time.Minute)
	be := &subBackend{arrived: make(chan *subProducer, 16), quit: make(chan struct{})}
	srv, err := NewServer(Config{
		MaxConnTasks:            o.maxConnTasks,
		CancelReply:             o.cancelReply,
		Registry:                NewRegistry([]string{"get"}, []string{subMethod, parkMethod}),
		Handler:                 be,
		Pool:                    pool,
		SubscriptionBuffer:      o.buffer,
		SubscriptionBufferBytes: o.bufferBytes,
		Logger:                  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	h := &subHarness{
		t:     t,
		limit: limit,
		pool:  pool,
		srv:   srv,
		be:    be,
		posts: make(chan Completion, 1<<16),
		sink:  &subSink{writable: true, limit: cmp.Or(o.limit, 1<<30)},
	}
	if o.deferring || deferAll {
		h.dsink = &deferSink{subSink: h.sink}
		h.sess = srv.NewSession(WebSocket, h.dsink, subPoster(h.posts))
	} else {
		h.sess = srv.NewSession(WebSocket, h.sink, subPoster(h.posts))
	}
	t.Cleanup(h.shutdown)
	return h
}

// step names the script step that follows, for failure messages.
func (h *subHarness) step(format string, args ...any) { h.where = fmt.Sprintf(format, args...) }

func (h *subHarness) fatalf(format string, args ...any) {
	h.t.Helper()
	if h.where != "" {
		format = h.where + ": " + format
	}
	h.t.Fatalf(format, args...)
}

// hang is the watchdog: it fails the test with every goroutine's stack.
func (h *subHarness) hang(what string) {
	h.t.Helper()
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	h.fatalf("watchdog: %s did not happen within %v; goroutines:\n%s", what, h.limit, b.String())
}

// subRecv receives from ch or fires the watchdog.
func subRecv[T any](h *subHarness, ch <-chan T, what string) T {
	h.t.Helper()
	timer := time.NewTimer(h.limit)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		h.hang(what)
		var zero T
		return zero
	}
}

// poll is a bounded poll for an effect no channel reports.
func (h *subHarness) poll(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(h.limit)
	for !cond() {
		if time.Now().After(deadline) {
			h.hang(what)
			return
		}
		runtime.Gosched()
	}
}

// send hands one message to the session as the loop does. If it dispatched
// a unary call (which the backend answers at once), send waits until its
// completion is queued; a subscription call is returned by subscribe instead.
func (h *subHarness) send(msg string) {
	h.t.Helper()
	before := h.sess.active.n
	h.sess.HandleMessage([]byte(msg))
	if h.sess.active.n == before {
		return
	}
	t := h.sess.active.head
	if t.sub != nil {
		h.fatalf("send %s established a subscription; use subscribe", msg)
		return
	}
	h.awaitPosted(t)
}

// subscribe sends a tracked subMethod request with raw id token id and
// returns its producer, blocked in Subscribe before it did anything.
func (h *subHarness) subscribe(id string) *subProducer {
	h.t.Helper()
	return h.subscribeWith(req(id, subMethod, `{}`))
}

func (h *subHarness) subscribeWith(msg string) *subProducer {
	h.t.Helper()
	before := h.sess.active.n
	h.sess.HandleMessage([]byte(msg))
	if h.sess.active.n != before+1 || h.sess.active.head.sub == nil {
		h.fatalf("%s did not dispatch a subscription (slots %d -> %d, output %q)", msg, before, h.sess.active.n, h.sink.unread())
		return nil
	}
	t := h.sess.active.head
	p := subRecv(h, h.be.arrived, "Subscribe of "+msg+" being called")
	if p == nil {
		return nil
	}
	if got := p.s.(*stream).sub.task; got != t {
		h.fatalf("Subscribe called for task %s, want %s", got.id, t.id)
	}
	p.h, p.task = h, t
	h.prods = append(h.prods, p)
	return p
}

// do runs one command on the producer's worker goroutine and returns its result.
func (p *subProducer) do(c subCmd) bool {
	h := p.h
	h.t.Helper()
	if p.exited {
		h.fatalf("subProducer of %s already returned", p.task.id)
		return false
	}
	c.reply = make(chan bool, 1)
	select {
	case p.cmds <- c:
	case <-time.After(h.limit):
		h.hang("subProducer of " + string(p.task.id) + " taking a command")
	}
	p.exited = c.exit
	return subRecv(h, c.reply, "subProducer of "+string(p.task.id)+" running a command")
}

// establish calls Stream.Establish with result on the worker.
func (p *subProducer) establish(result string) {
	p.h.t.Helper()
	p.do(subCmd{run: func() bool { p.s.Establish([]byte(result)); return true }})
}

// emit calls Stream.Emit on the worker and returns what it returned.
func (p *subProducer) emit(cursor, body string) bool {
	p.h.t.Helper()
	var c []byte
	if cursor != "" {
		c = []byte(cursor)
	}
	return p.do(subCmd{run: func() bool { return p.s.Emit(c, []byte(body)) }})
}

// emitWaitAsync starts Stream.EmitWait of tick n on the worker and returns
// the channel its result arrives on, without waiting for it.
func (p *subProducer) emitWaitAsync(n int) <-chan bool {
	h := p.h
	h.t.Helper()
	c := subCmd{reply: make(chan bool, 1), run: func() bool {
		return p.s.EmitWait(p.ctx, []byte(tickCursor(n)), []byte(tickBody(n)))
	}}
	select {
	case p.cmds <- c:
	case <-time.After(h.limit):
		h.hang("subProducer of " + string(p.task.id) + " taking a command")
	}
	return c.reply
}

// tick emits event n with cursor "<n>" and body "cursor":"<n>","seq":<n>, as
// edge/ticks does, and returns what Emit returned.
func (p *subProducer) tick(n int) bool {
	p.h.t.Helper()
	return p.emit(tickCursor(n), tickBody(n))
}

// exit makes Subscribe return err and waits until the worker posted the task.
func (p *subProducer) exit(err error) {
	p.h.t.Helper()
	p.do(subCmd{exit: true, err: err})
	p.h.awaitPosted(p.task)
}

// exitOnCancel waits for the producer's ctx to be cancelled, as a
// well-behaved producer does, returns ctx.Err() and waits for the post.
func (p *subProducer) exitOnCancel() {
	p.h.t.Helper()
	if p.ctx.Err() == nil {
		p.h.fatalf("subProducer of %s: ctx not cancelled", p.task.id)
		return
	}
	p.do(subCmd{exit: true, err: p.ctx.Err()})
	p.h.awaitPosted(p.task)
}

// expectCancelled checks whether the producer's ctx is cancelled (the session
// cancels synchronously on the loop).
func (p *subProducer) expectCancelled(want bool) {
	p.h.t.Helper()
	if got := p.ctx.Err() != nil; got != want {
		p.h.fatalf("subProducer of %s: ctx cancelled %v, want %v", p.task.id, got, want)
	}
}

// pull moves every completion posted so far to the loop's queue.
func (h *subHarness) pull() {
	for {
		select {
		case c := <-h.posts:
			h.queue = append(h.queue, c)
		default:
			return
		}
	}
}

// awaitPosted waits until the worker of t has posted t back.
func (h *subHarness) awaitPosted(t *Task) {
	h.t.Helper()
	h.pull()
	for {
		for _, c := range h.queue {
			if c == Completion(t) {
				return
			}
		}
		c := subRecv(h, h.posts, "task "+string(t.id)+" being posted")
		if c == nil {
			return
		}
		h.queue = append(h.queue, c)
	}
}

// awaitQueued waits until n completions are queued for the loop.
func (h *subHarness) awaitQueued(n int) {
	h.t.Helper()
	h.pull()
	for len(h.queue) < n {
		c := subRecv(h, h.posts, fmt.Sprintf("%d completions being posted (have %d)", n, len(h.queue)))
		if c == nil {
			return
		}
		h.queue = append(h.queue, c)
	}
}

// apply is the loop draining its completion queue: every completion posted
// so far, oldest first.
func (h *subHarness) apply() {
	h.t.Helper()
	h.pull()
	q := h.queue
	h.queue = nil
	for _, c := range q {
		c.Apply()
	}
	h.flush()
}

// flush is the transport's write at the end of the loop's turn: a
// deferSink has the session hand over its deferred events
// (Session.SendEvents). The harness also flushes before it looks at the
// output, standing for the flush that ends every turn of the loop (a test
// calling Session.Resume itself, say).
func (h *subHarness) flush() {
	h.t.Helper()
	if h.dsink == nil {
		return
	}
	for h.dsink.deferred > 0 {
		if h.dsink.deferred > 1 {
			h.fatalf("DeferEvents called %d times before SendEvents, want once", h.dsink.deferred)
			return
		}
		h.dsink.deferred = 0
		h.sess.SendEvents()
	}
}

// expect consumes the next messages the session sent and compares bytes.
func (h *subHarness) expect(want ...string) {
	h.t.Helper()
	h.flush()
	for _, w := range want {
		u := h.sink.unread()
		if len(u) == 0 {
			h.fatalf("want\n  %s\ngot nothing", w)
			return
		}
		h.sink.read++
		if u[0] != w {
			h.fatalf("message\n  got  %s\n  want %s\nnot yet consumed after it: %q", u[0], w, u[1:])
			return
		}
	}
}

// expectNothing checks that the session sent nothing not yet consumed.
func (h *subHarness) expectNothing() {
	h.t.Helper()
	h.flush()
	if u := h.sink.unread(); len(u) > 0 {
		h.fatalf("unexpected output: %q", u)
	}
}

// expectStats compares the session's bookkeeping.
func (h *subHarness) expectStats(inFlightIDs, tasks, subs int) {
	h.t.Helper()
	want := Stats{InFlightIDs: inFlightIDs, Tasks: tasks, Subscriptions: subs}
	if got := h.sess.Stats(); got != want {
		h.fatalf("stats %+v, want %+v", got, want)
	}
}

// shutdown closes the session, makes every producer return (also one no step
// claimed, after a failure), closes the pool, which waits for every worker
// to exit, and applies what they posted.
func (h *subHarness) shutdown() {
	h.where = "cleanup"
	h.sess.Close()
	close(h.be.quit)
	done := make(chan struct{})
	go func() {
		h.pool.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(h.limit):
		h.t.Errorf("cleanup: pool workers did not exit within %v", h.limit)
	}
	h.pull()
	for _, c := range h.queue {
		c.Apply()
	}
}

// unread returns the messages no expectation has consumed yet.
func (s *subSink) unread() []string { return s.msgs[s.read:] }

// Wire helpers for subscriptions (CONTRACT.md sections 5 and 7).

func subCancelMsg(subID string) string {
	return `{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"` + subID + `"}}`
}

func subResult(subID string) string { return `{"subscriptionId":"` + subID + `"}` }

func tickCursor(n int) string { return `"` + strconv.Itoa(n) + `"` }

func tickBody(n int) string {
	return `"cursor":"` + strconv.Itoa(n) + `","seq":` + strconv.Itoa(n)
}

// subEventMsg is the event a producer's tick(n) becomes on the wire.
func subEventMsg(subID string, n int) string {
	return `{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"` + subID + `",` + tickBody(n) + `}}`
}

// subClosedMsg is subscription/closed; cursor is the raw lastDeliveredCursor
// token, "" for none.
func subClosedMsg(subID, reason, cursor string) string {
	s := `{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"` + subID + `","reason":"` + reason + `"`
	if cursor != "" {
		s += `,"lastDeliveredCursor":` + cursor
	}
	return s + `}}`
}
