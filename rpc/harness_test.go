package rpc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// This file is the deterministic script harness of the session tests
// (STYLE.md, "Tests"). The test goroutine plays the event loop: it calls
// HandleMessage, Apply and Close itself, so everything the session writes is in
// the fake sink by the time a step returns. The backend calls run on a real
// backend.Pool, but every hand-off between the loop and a worker is observed
// through a channel:
//
//   - send waits until a dispatched call is blocked in the controllable
//     backend (or, for the instant method, until its completion is posted);
//   - release hands the blocked call its outcome and waits until the worker has
//     posted the task back, so the completion is queued, not applied;
//   - applyNext and applyAll are the loop draining its completion queue.
//
// No step sleeps. Every wait is bounded by a watchdog that fails the test with
// a goroutine dump.

// tb is what the harness needs from *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

// maxWait bounds every wait of the harness; the watchdog fires after it (or
// earlier, before the test binary's own deadline).
const maxWait = 10 * time.Second

// instantMethod is the one method the controllable backend answers at once
// (its result is the params object, like edge/echo); every other call blocks
// until the test releases it.
const instantMethod = "edge/echo"

// opts configures a harness. Zero values mean: MaxConnTasks default (256), a
// global cap of 4096, cancel-reply none, WebSocket.
type opts struct {
	maxConnTasks int
	poolMax      int
	cancelReply  CancelReply
	transport    Transport
}

// harness is one simulated event loop with its server, worker pool and
// controllable backend, and one or more connections on it.
type harness struct {
	t     tb
	limit time.Duration // watchdog timeout of one wait

	pool   *backend.Pool
	srv    *Server
	be     *ctlBackend
	poster *fakePoster
	conns  []*conn
	*conn  // the default connection, which the script steps drive

	stash  map[context.Context]*call // calls that arrived before the harness looked for them
	calls  map[*Task]*call           // every dispatched task's call
	queue  []*Task                   // loop side: posted, not yet applied, oldest first
	posted map[*Task]bool            // every task ever posted (queued or applied)
	labels map[string]*call          // script labels
	last   *call                     // the call dispatched by the last send, until a step claims it
	where  string                    // the script step running, for failure messages
}

// conn is one connection: a session and the sink recording what it sends.
type conn struct {
	h    *harness
	sess *Session
	sink *recSink
}

// recSink is a Sink that records every message. Loop-owned, like the
// transport it stands in for: only the test goroutine touches it, so a worker
// writing to it would be a data race the race detector reports.
type recSink struct {
	msgs     []string // every message sent, in order
	read     int      // msgs[:read] were consumed by expectations
	outbound int      // what OutboundBytes reports
	limit    int      // what OutboundLimit reports (0: 1 GiB)
}

func (s *recSink) Send(msg []byte)    { s.msgs = append(s.msgs, string(msg)) }
func (s *recSink) OutboundBytes() int { return s.outbound }
func (s *recSink) OutboundLimit() int {
	if s.limit == 0 {
		return 1 << 30
	}
	return s.limit
}
func (s *recSink) Writable() bool { return true }

// unread returns the messages no expectation has consumed yet.
func (s *recSink) unread() []string { return s.msgs[s.read:] }

// fakePoster queues completions for the simulated loop without applying them:
// the test decides when the loop runs. Post never blocks (Poster contract); a
// full queue is a harness bug and panics loudly.
type fakePoster struct {
	ch chan Completion
}

func (p *fakePoster) Post(c Completion) {
	select {
	case p.ch <- c:
	default:
		panic("rpc test: fakePoster queue full")
	}
}

// ctlBackend is a backend.Handler whose calls the test controls: each call
// (except instantMethod) announces itself on arrived and blocks until the test
// sends its outcome.
type ctlBackend struct {
	arrived chan *call
}

// outcome is how a blocked call ends.
type outcome struct {
	result   string // appended to dst when err, panicVal and onCancel are zero
	err      error
	panicVal any
	onCancel bool // wait for ctx to be cancelled, then return ctx.Err()
}

// call is one backend call. method, params, ctx and out are set by the worker
// before it announces the call; the rest is test-side (loop-owned).
type call struct {
	method string
	params string
	ctx    context.Context
	out    chan outcome // buffered 1: the test never blocks handing an outcome

	task     *Task
	conn     *conn
	label    string
	released bool // the outcome was handed over (or the call was instant)
}

func (b *ctlBackend) Call(ctx context.Context, method string, params, dst []byte) ([]byte, error) {
	if method == instantMethod {
		return append(dst, params...), nil
	}
	c := &call{method: method, params: string(params), ctx: ctx, out: make(chan outcome, 1)}
	b.arrived <- c
	o := <-c.out
	switch {
	case o.panicVal != nil:
		panic(o.panicVal)
	case o.onCancel:
		<-ctx.Done()
		return dst, ctx.Err()
	case o.err != nil:
		return dst, o.err
	}
	return append(dst, o.result...), nil
}

// newHarness starts a server on a real pool with the controllable backend and
// opens the default connection. Everything is torn down in t.Cleanup.
func newHarness(t tb, o opts) *harness {
	t.Helper()
	if o.poolMax == 0 {
		o.poolMax = 4096
	}
	if o.transport == 0 {
		o.transport = WebSocket
	}
	limit := maxWait
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			if left := time.Until(dl) / 2; left < limit {
				limit = left
			}
		}
	}
	pool := backend.NewPool(o.poolMax, time.Minute)
	be := &ctlBackend{arrived: make(chan *call, 4096)}
	srv, err := NewServer(Config{
		MaxConnTasks: o.maxConnTasks,
		CancelReply:  o.cancelReply,
		Handler:      be,
		Pool:         pool,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	h := &harness{
		t:      t,
		limit:  limit,
		pool:   pool,
		srv:    srv,
		be:     be,
		poster: &fakePoster{ch: make(chan Completion, 4096)},
		stash:  make(map[context.Context]*call),
		calls:  make(map[*Task]*call),
		posted: make(map[*Task]bool),
		labels: make(map[string]*call),
	}
	t.Cleanup(h.shutdown)
	h.conn = h.open(o.transport)
	return h
}

// open adds a connection to the simulated loop.
func (h *harness) open(tr Transport) *conn {
	c := &conn{h: h, sink: &recSink{}}
	c.sess = h.srv.NewSession(tr, c.sink, h.poster)
	h.conns = append(h.conns, c)
	return c
}

// fatalf fails the test, naming the script step that was running.
func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	if h.where != "" {
		format = h.where + ": " + format
	}
	h.t.Fatalf(format, args...)
}

// hang is the watchdog: it fails the test with every goroutine's stack.
func (h *harness) hang(what string) {
	h.t.Helper()
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	h.fatalf("watchdog: %s did not happen within %v; goroutines:\n%s", what, h.limit, b.String())
}

// await receives from ch, or fires the watchdog.
func await[T any](h *harness, ch <-chan T, what string) T {
	h.t.Helper()
	select {
	case v := <-ch:
		return v
	default:
	}
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

// pollUntil is a bounded poll for an effect no channel reports (the pool's
// global counter, released by the worker just after it posts).
func (h *harness) pollUntil(what string, cond func() bool) {
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

// send hands msg to the connection's session as its loop would. If the
// session dispatched a backend call, send waits until that call is blocked in
// the backend (for instantMethod: until its completion is posted) and returns
// it; otherwise it returns nil.
func (c *conn) send(msg string) *call {
	h := c.h
	h.t.Helper()
	before, head := c.sess.active.n, c.sess.active.head
	c.sess.HandleMessage([]byte(msg))
	h.checkInvariants()
	switch n := c.sess.active.n; {
	case n == before:
		return nil
	case n != before+1 || c.sess.active.head == head:
		h.fatalf("send %s: slots went from %d to %d", msg, before, n)
		return nil
	}
	t := c.sess.active.head
	if h.calls[t] != nil {
		// A Task may be reused only once its completion has been applied: a
		// task still running or still queued for the loop must never be
		// handed to a newer request.
		h.fatalf("send %s: the session reused the *Task of a request not yet completed", msg)
		return nil
	}
	var cl *call
	if t.method.Name == instantMethod {
		cl = &call{method: instantMethod, params: string(t.params), ctx: t.ctx, released: true}
		cl.task, cl.conn = t, c
		h.calls[t] = cl
		h.awaitPosted(t)
		return cl
	}
	cl = h.awaitCall(t)
	cl.task, cl.conn = t, c
	h.calls[t] = cl
	return cl
}

// awaitCall waits until the backend call of t has arrived in the backend.
func (h *harness) awaitCall(t *Task) *call {
	h.t.Helper()
	key := context.Context(t.ctx)
	for {
		if cl, ok := h.stash[key]; ok {
			delete(h.stash, key)
			return cl
		}
		cl := await(h, h.be.arrived, "backend call of "+string(t.id)+" arriving")
		if cl == nil {
			return nil
		}
		h.stash[cl.ctx] = cl
	}
}

// awaitPosted waits until the worker has posted t back to the loop.
func (h *harness) awaitPosted(t *Task) {
	h.t.Helper()
	for !h.posted[t] {
		c := await(h, h.poster.ch, "completion of "+string(t.id)+" being posted")
		if c == nil {
			return
		}
		pt, ok := c.(*Task)
		if !ok {
			h.fatalf("posted %T, want *Task", c)
			return
		}
		h.queue = append(h.queue, pt)
		h.posted[pt] = true
	}
}

// release hands a blocked call its outcome and waits until the worker has
// posted the task back. The completion is queued, not applied.
func (h *harness) release(cl *call, o outcome) {
	h.t.Helper()
	h.arm(cl, o)
	h.awaitPosted(cl.task)
}

// arm hands a blocked call its outcome without waiting for the worker (for an
// onCancel outcome whose ctx is cancelled by a later step); awaitPosted then
// waits for it.
func (h *harness) arm(cl *call, o outcome) {
	h.t.Helper()
	if cl.released {
		h.fatalf("call %s (%s) already released", cl.name(), cl.method)
		return
	}
	cl.released = true
	cl.out <- o
}

// returnOnCancel lets a call whose ctx is already cancelled return ctx.Err(),
// as a well-behaved backend does, and waits for its completion to be posted.
func (h *harness) returnOnCancel(cl *call) {
	h.t.Helper()
	if cl.ctx.Err() == nil {
		h.fatalf("call %s: ctx not cancelled", cl.name())
		return
	}
	h.release(cl, outcome{onCancel: true})
}

func (cl *call) name() string {
	if cl.label != "" {
		return cl.label
	}
	return string(cl.task.id)
}

// applyNext is the loop applying the oldest posted completion; it returns the
// applied task.
func (h *harness) applyNext() *Task {
	h.t.Helper()
	if len(h.queue) == 0 {
		h.fatalf("applyNext: no completion posted")
		return nil
	}
	t := h.queue[0]
	h.queue = h.queue[1:]
	unary := t.sub == nil
	t.Apply()
	if unary {
		// The session may now reuse t for a newer request, so the harness
		// forgets it; reuse before this point is what send rejects.
		delete(h.calls, t)
		delete(h.posted, t)
	}
	h.checkInvariants()
	return t
}

// applyAll is the loop draining its completion queue.
func (h *harness) applyAll() {
	h.t.Helper()
	for len(h.queue) > 0 {
		h.applyNext()
	}
}

// expectReply consumes the next message the connection sent and compares it
// byte for byte.
func (c *conn) expectReply(want string) {
	c.h.t.Helper()
	u := c.sink.unread()
	if len(u) == 0 {
		c.h.fatalf("want reply\n  %s\ngot nothing", want)
		return
	}
	c.sink.read++
	if u[0] != want {
		c.h.fatalf("reply\n  got  %s\n  want %s\nnot yet consumed after it: %q", u[0], want, u[1:])
	}
}

// expectNothing checks that the connection has sent nothing that no
// expectation consumed. Meaningful at any point: the loop is simulated
// synchronously, so nothing can still be on its way.
func (c *conn) expectNothing() {
	c.h.t.Helper()
	if u := c.sink.unread(); len(u) > 0 {
		c.h.fatalf("unexpected output: %q", u)
	}
}

// cancel sends $/cancelRequest for the raw id token. It must not dispatch.
func (c *conn) cancel(id string) {
	c.h.t.Helper()
	if cl := c.send(cancelMsg(id)); cl != nil {
		c.h.fatalf("cancel %s dispatched a backend call", id)
	}
}

// expectStats compares the session's bookkeeping.
func (c *conn) expectStats(inFlightIDs, tasks int) {
	c.h.t.Helper()
	st := c.sess.Stats()
	if st.InFlightIDs != inFlightIDs || st.Tasks != tasks {
		c.h.fatalf("stats inFlightIds %d tasks %d, want %d %d", st.InFlightIDs, st.Tasks, inFlightIDs, tasks)
	}
}

// close closes the connection's session as the loop does on a socket close.
func (c *conn) close() {
	c.h.t.Helper()
	c.sess.Close()
	c.h.checkInvariants()
}

// checkInvariants checks the white-box bookkeeping of every session after
// every loop action: the slot list is consistent and counted, every in-flight
// id belongs to a live task that holds a slot (bookkeeping bounded by active
// work), and nothing exceeds MaxConnTasks.
func (h *harness) checkInvariants() {
	h.t.Helper()
	maxTasks := h.srv.cfg.MaxConnTasks
	for ci, c := range h.conns {
		s := c.sess
		inList := make(map[*Task]bool)
		var prev *Task
		for t := s.active.head; t != nil; t = t.next {
			if inList[t] {
				h.fatalf("conn %d: task %s twice in the slot list", ci, t.id)
				return
			}
			if t.prev != prev {
				h.fatalf("conn %d: task %s has a broken prev link", ci, t.id)
				return
			}
			inList[t] = true
			prev = t
		}
		if len(inList) != s.active.n {
			h.fatalf("conn %d: slot list holds %d tasks, counter says %d", ci, len(inList), s.active.n)
		}
		s.inflight.each(func(k idKey, t *Task) {
			switch {
			case t.key != k:
				h.fatalf("conn %d: in-flight entry %+v holds a task keyed %+v", ci, k, t.key)
			case !inList[t]:
				h.fatalf("conn %d: in-flight id %s has no slot (its worker already returned)", ci, t.id)
			case t.cancelled:
				h.fatalf("conn %d: in-flight id %s belongs to a cancelled task", ci, t.id)
			}
		})
		if s.closed && s.inflight.len() > 0 {
			h.fatalf("conn %d: closed session keeps %d in-flight ids", ci, s.inflight.len())
		}
		if s.inflight.len() > s.active.n || s.active.n > maxTasks {
			h.fatalf("conn %d: inFlightIds %d, tasks %d, MaxConnTasks %d", ci, s.inflight.len(), s.active.n, maxTasks)
		}
	}
}

// shutdown lets every blocked call return, waits for the workers to post and
// closes the pool, which waits for every worker goroutine to exit (no leak).
// It finds the work from the sessions' slot lists as well as from the calls
// the harness saw, so a test that failed half-way through a send does not leave
// a worker blocked.
func (h *harness) shutdown() {
	h.where = "cleanup"
	tasks := make(map[*Task]bool)
	for t := range h.calls {
		tasks[t] = true
	}
	for _, c := range h.conns {
		for t := c.sess.active.head; t != nil; t = t.next {
			tasks[t] = true
		}
	}
	for t := range tasks {
		cl := h.calls[t]
		if cl == nil {
			if t.method.Name == instantMethod {
				continue
			}
			cl = h.awaitCall(t)
			if cl == nil {
				return
			}
			cl.task = t
			h.calls[t] = cl
		}
		if !cl.released {
			cl.released = true
			cl.out <- outcome{result: "null"}
		}
	}
	for t := range tasks {
		h.awaitPosted(t)
	}
	done := make(chan struct{})
	go func() {
		h.pool.Close()
		close(done)
	}()
	await(h, done, "pool close (every worker exiting)")
}

// The script layer: a test is a list of steps run in order against one
// harness; failures name the step.

// step is one action or expectation of a script.
type step struct {
	desc string
	do   func(h *harness)
}

// runScript runs steps against a new harness and checks at the end that no
// output and no completion were left unchecked.
func runScript(t *testing.T, o opts, steps ...step) *harness {
	t.Helper()
	h := newHarness(t, o)
	h.run(steps...)
	return h
}

func (h *harness) run(steps ...step) {
	h.t.Helper()
	for i, s := range steps {
		h.where = fmt.Sprintf("step %d (%s)", i+1, s.desc)
		s.do(h)
	}
	h.where = "end of script"
	if h.last != nil {
		h.fatalf("the last send dispatched a backend call (%s) that no step claimed", h.last.name())
	}
	for _, c := range h.conns {
		c.expectNothing()
	}
	h.where = ""
}

// claim takes the call dispatched by the last send.
func (h *harness) claim(label string) *call {
	h.t.Helper()
	cl := h.last
	if cl == nil {
		h.fatalf("no backend call was dispatched by the last send")
		return nil
	}
	h.last = nil
	cl.label = label
	h.labels[label] = cl
	return cl
}

func (h *harness) labelled(label string) *call {
	h.t.Helper()
	cl, ok := h.labels[label]
	if !ok {
		h.fatalf("no call labelled %q", label)
	}
	return cl
}

// send: the loop hands msg to the session. A backend call it dispatches must
// be claimed by the next step (backendBlock or backendReturned).
func send(msg string) step {
	return step{"send " + msg, func(h *harness) {
		h.t.Helper()
		if h.last != nil {
			h.fatalf("the previous send dispatched a backend call that no step claimed")
		}
		h.last = h.send(msg)
	}}
}

// sendTo sends on another connection of the harness (index into h.conns).
func sendTo(ci int, msg string) step {
	return step{fmt.Sprintf("send on conn %d %s", ci, msg), func(h *harness) {
		h.t.Helper()
		if h.last != nil {
			h.fatalf("the previous send dispatched a backend call that no step claimed")
		}
		h.last = h.conns[ci].send(msg)
	}}
}

// backendBlock: the last send dispatched a backend call, which is now blocked
// in the backend; it is called label from here on.
func backendBlock(label string) step {
	return step{"backendBlock " + label, func(h *harness) {
		h.t.Helper()
		if cl := h.claim(label); cl != nil && cl.released {
			h.fatalf("call %s returned at once, want it blocked", label)
		}
	}}
}

// backendReturned: the last send dispatched a call that returned at once
// (instantMethod); its completion is posted, not applied.
func backendReturned(label string) step {
	return step{"backendReturned " + label, func(h *harness) {
		h.t.Helper()
		if cl := h.claim(label); cl != nil && !cl.released {
			h.fatalf("call %s is blocked, want it returned", label)
		}
	}}
}

// backendRelease: the blocked call returns result; its completion is posted.
func backendRelease(label, result string) step {
	return step{"backendRelease " + label + " " + result, func(h *harness) {
		h.t.Helper()
		h.release(h.labelled(label), outcome{result: result})
	}}
}

// backendFail: the blocked call returns err.
func backendFail(label string, err error) step {
	return step{"backendFail " + label, func(h *harness) {
		h.t.Helper()
		h.release(h.labelled(label), outcome{err: err})
	}}
}

// backendPanic: the blocked call panics.
func backendPanic(label string) step {
	return step{"backendPanic " + label, func(h *harness) {
		h.t.Helper()
		h.release(h.labelled(label), outcome{panicVal: "boom"})
	}}
}

// backendReturnOnCancel: the call, whose ctx must already be cancelled,
// returns ctx.Err() as a well-behaved backend does.
func backendReturnOnCancel(label string) step {
	return step{"backendReturnOnCancel " + label, func(h *harness) {
		h.t.Helper()
		h.returnOnCancel(h.labelled(label))
	}}
}

// expectCtxCancelled checks whether the call's context is cancelled (the
// session cancels synchronously on the loop, so no waiting is needed).
func expectCtxCancelled(label string, want bool) step {
	return step{fmt.Sprintf("expectCtxCancelled %s %v", label, want), func(h *harness) {
		h.t.Helper()
		cl := h.labelled(label)
		got := cl.ctx.Err() != nil
		if got != want {
			h.fatalf("call %s: ctx cancelled %v, want %v", label, got, want)
		}
		select {
		case <-cl.ctx.Done():
			if !want {
				h.fatalf("call %s: Done closed but Err is nil", label)
			}
		default:
			if want {
				h.fatalf("call %s: Err set but Done not closed", label)
			}
		}
	}}
}

// expectBackend checks the method and params the backend saw for a call.
func expectBackend(label, method, params string) step {
	return step{"expectBackend " + label, func(h *harness) {
		h.t.Helper()
		cl := h.labelled(label)
		if cl.method != method || cl.params != params {
			h.fatalf("call %s: backend saw %s %s, want %s %s", label, cl.method, cl.params, method, params)
		}
	}}
}

// applyNext: the loop applies the oldest posted completion.
func applyNext() step {
	return step{"applyNext", func(h *harness) { h.t.Helper(); h.applyNext() }}
}

// applyCompletions: the loop applies every posted completion.
func applyCompletions() step {
	return step{"applyCompletions", func(h *harness) { h.t.Helper(); h.applyAll() }}
}

// expectQueued checks how many completions are posted and not applied.
func expectQueued(n int) step {
	return step{fmt.Sprintf("expectQueued %d", n), func(h *harness) {
		h.t.Helper()
		if len(h.queue) != n {
			h.fatalf("%d completions queued, want %d", len(h.queue), n)
		}
	}}
}

// cancel: the loop handles $/cancelRequest for the raw id token.
func cancel(id string) step {
	return step{"cancel " + id, func(h *harness) { h.t.Helper(); h.cancel(id) }}
}

func expectReply(want string) step {
	return step{"expectReply " + want, func(h *harness) { h.t.Helper(); h.expectReply(want) }}
}

func expectReplyOn(ci int, want string) step {
	return step{fmt.Sprintf("expectReply on conn %d %s", ci, want), func(h *harness) {
		h.t.Helper()
		h.conns[ci].expectReply(want)
	}}
}

func expectNothing() step {
	return step{"expectNothing", func(h *harness) {
		h.t.Helper()
		for _, c := range h.conns {
			c.expectNothing()
		}
	}}
}

func expectStats(inFlightIDs, tasks int) step {
	return step{fmt.Sprintf("expectStats %d/%d", inFlightIDs, tasks), func(h *harness) {
		h.t.Helper()
		h.expectStats(inFlightIDs, tasks)
	}}
}

func expectStatsOn(ci, inFlightIDs, tasks int) step {
	return step{fmt.Sprintf("expectStats on conn %d %d/%d", ci, inFlightIDs, tasks), func(h *harness) {
		h.t.Helper()
		h.conns[ci].expectStats(inFlightIDs, tasks)
	}}
}

// closeSession: the connection closes.
func closeSession() step {
	return step{"close", func(h *harness) { h.t.Helper(); h.close() }}
}

// openConn adds a connection to the harness (it becomes h.conns[len-1]).
func openConn(tr Transport) step {
	return step{"open connection", func(h *harness) { h.t.Helper(); h.open(tr) }}
}

// awaitGlobalRunning waits until the pool's global counter is n: a worker
// releases its global slot just after posting, which no channel reports.
func awaitGlobalRunning(n int) step {
	return step{fmt.Sprintf("awaitGlobalRunning %d", n), func(h *harness) {
		h.t.Helper()
		h.pollUntil(fmt.Sprintf("pool running == %d", n), func() bool { return h.pool.Running() == n })
	}}
}

// Wire helpers. Replies are compared as bytes; these spell the contract's byte
// shapes (CONTRACT.md section 7), pinned literally in TestReplyBytes.

func req(id, method, params string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":` + params + `}`
}

func get(id string) string { return req(id, "get", `{}`) }

func cancelMsg(id string) string {
	return `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":` + id + `}}`
}

func resultReply(id, result string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":` + result + `}`
}

func errorReply(id string, code int, message, dataCode string) string {
	s := `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":` + fmt.Sprint(code) + `,"message":"` + message + `"`
	if dataCode != "" {
		s += `,"data":{"code":"` + dataCode + `"}`
	}
	return s + `}}`
}

func duplicateReply(id string) string {
	return errorReply(id, -32600, "Invalid Request", "DUPLICATE_REQUEST_ID")
}

func busyReply(id string) string { return errorReply(id, -32000, "Server busy", "SERVER_BUSY") }

func cancelledReply(id string) string { return errorReply(id, -32800, "Request cancelled", "") }

const (
	invalidNull = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`
	parseNull   = `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`
)

func statsReply(id string, inFlight, tasks, outbound int) string {
	return resultReply(id, fmt.Sprintf(`{"inFlightIds":%d,"tasks":%d,"subscriptions":0,"outboundBytes":%d}`, inFlight, tasks, outbound))
}

// fill returns steps that dispatch n blocked get requests with ids
// prefix0..prefix(n-1) (string ids), labelled the same.
func fill(prefix string, n int) []step {
	var steps []step
	for i := 0; i < n; i++ {
		id := fmt.Sprintf(`"%s%d"`, prefix, i)
		steps = append(steps, send(get(id)), backendBlock(strings.Trim(id, `"`)))
	}
	return steps
}

// cat concatenates step lists.
func cat(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
