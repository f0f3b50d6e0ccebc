// Package worker serves a backend over NATS for edge gateways (CONTRACT.md
// section 13): a Go service that runs a Worker takes the calls edge forwards
// to a nats://HOST:PORT/PREFIX upstream. Workers of one PREFIX form the queue
// group PREFIX, so each call goes to one of them and more workers take more
// load. The subjects and headers are package wire's.
//
// A call runs on its own goroutine with its own context, cancelled when the
// edge cancels it; a call to a method Config.NonBlocking names runs at once
// on the goroutine that received it and is answered without an "accepted"
// message first. A subscription streams its response, events and end to
// the subject the edge named in the request's Edge-Stream header. Serve
// drains when its context ends: it takes nothing new, lets the unary calls it
// took finish, and hands its subscriptions back (they end UPSTREAM_LOST, so
// their clients resubscribe from their cursor through another worker).
//
// Neither side of NATS request/reply learns by itself that the other is
// gone, so each probes the other (package wire): a worker holds an alive
// subject that edges probe while it runs their calls, and probes the inbox
// of each edge it runs calls for, cancelling what it runs for an edge whose
// connection is gone.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
	"github.com/openengine/edge/internal/wire"
	"github.com/openengine/edge/rpc"
)

// Config configures a Worker. Zero values mean the defaults.
type Config struct {
	// Conn is the NATS connection (required). The caller owns it: Serve
	// neither drains nor closes it.
	Conn *nats.Conn
	// Prefix is the subject prefix and queue group, the PREFIX of the edge's
	// nats://HOST:PORT/PREFIX (required).
	Prefix string
	// Handler serves unary methods (required).
	Handler backend.Handler
	// Subscriber serves subscription methods [none: they fail -32601].
	Subscriber backend.Subscriber
	// ID names the worker in its "accepted" messages and its cancel subject
	// [a NUID]. It must be one NATS subject token.
	ID string
	// MaxCalls bounds the calls and subscriptions running at once [1024]. A
	// worker at the bound handles no new message until one ends. A call run
	// inline (NonBlocking) holds no place: it ends before the next message.
	MaxCalls int
	// DrainTimeout bounds a drain: the calls still running then are
	// cancelled [30s].
	DrainTimeout time.Duration
	// NonBlocking, when set, names the unary methods whose Handler.Call
	// never blocks (as rpc.Config.NonBlocking: computed from params alone,
	// no I/O, no waiting for ctx or another call). The worker runs a call to
	// such a method at once on the goroutine that received it and publishes
	// only its response: no "accepted" message (there is nothing to cancel
	// by the time the edge could), no goroutine, no per-call context. A
	// method named here that blocks holds up every call behind it. It is
	// asked once per method name. [nil: none]
	NonBlocking func(method string) bool
	// ProbeInterval is how often the worker probes the edges it runs calls
	// and subscriptions for, to end those of an edge that is gone [1s].
	ProbeInterval time.Duration
	// Logger [slog.Default()].
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxCalls      = 1024
	DefaultDrainTimeout  = 30 * time.Second
	DefaultProbeInterval = time.Second
)

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Conn == nil {
		errs = append(errs, ErrNoConn)
	}
	if c.Prefix == "" || strings.ContainsAny(c.Prefix, "*> \t\r\n") || strings.Contains(c.Prefix, "..") ||
		strings.HasPrefix(c.Prefix, ".") || strings.HasSuffix(c.Prefix, ".") {
		errs = append(errs, fmt.Errorf("worker: prefix %q is not a NATS subject without wildcards", c.Prefix))
	}
	if c.Handler == nil {
		errs = append(errs, errors.New("worker: no handler"))
	}
	if c.ID != "" && strings.ContainsAny(c.ID, ".*> \t\r\n") {
		errs = append(errs, fmt.Errorf("worker: id %q is not one NATS subject token", c.ID))
	}
	if c.MaxCalls < 0 || c.DrainTimeout < 0 || c.ProbeInterval < 0 {
		errs = append(errs, errors.New("worker: negative MaxCalls, DrainTimeout or ProbeInterval"))
	}
	return errors.Join(errs...)
}

// Worker serves one backend over NATS. Create it with New, run it with Serve.
type Worker struct {
	cfg     Config             // immutable after New
	inbox   string             // immutable after New: root of the reply subjects of the worker's probes
	cancels string             // immutable after New: PREFIX.$cancel., the start of every worker's cancel subject
	nc      *nats.Conn         // immutable after New
	sem     chan struct{}      // a slot per running job
	hard    context.Context    // immutable after New: the parent of every job's context
	stop    context.CancelFunc // cancels hard: drain timed out, or the connection closed
	jobs    sync.WaitGroup     // running jobs
	taken   atomic.Int64       // calls and subscriptions taken
	taking  atomic.Bool        // the queue subscription is open
	mu      sync.Mutex
	closing bool            // guarded by mu: no job starts any more (jobs.Wait may run)
	calls   map[string]*job // guarded by mu: running jobs by reply subject
	subs    map[string]*job // guarded by mu: subscriptions by their id
	nextID  uint64          // guarded by mu: last subscription id

	// Owned by take (the queue subscription's one delivery goroutine).
	methods map[string]method // method names seen, interned, and whether they run inline
	name    []byte            // scratch: a method name unquoted
	res     []byte            // scratch: an inline call's result
	out     []byte            // scratch: an inline call's response
}

// method is what take knows of a method name.
type method struct {
	name   string
	inline bool // Config.NonBlocking names it
}

// maxMethods bounds Worker.methods: names past it (an edge may forward any
// name) are looked up each time.
const maxMethods = 1024

// maxScratch is the largest scratch buffer take keeps between calls.
const maxScratch = 64 << 10

// New returns a worker for cfg.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		cfg.ID = nats.NewInbox()[len(nats.InboxPrefix):]
	}
	if cfg.MaxCalls == 0 {
		cfg.MaxCalls = DefaultMaxCalls
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Worker{cfg: cfg, nc: cfg.Conn, inbox: nats.NewInbox(), cancels: cfg.Prefix + "." + wire.CancelToken + ".", sem: make(chan struct{}, cfg.MaxCalls),
		calls: make(map[string]*job), subs: make(map[string]*job), methods: make(map[string]method)}
	w.hard, w.stop = context.WithCancel(context.Background())
	return w, nil
}

// ID is the worker's id. Safe for concurrent use.
func (w *Worker) ID() string { return w.cfg.ID }

// Taking reports whether the worker takes new calls: Serve has subscribed
// to its queue, the NATS server has the subscription (when connected), and
// it has not drained it yet. Safe for concurrent use.
func (w *Worker) Taking() bool { return w.taking.Load() }

// Running reports how many calls and subscriptions run now. Safe for
// concurrent use.
func (w *Worker) Running() int { return len(w.sem) }

// Taken reports how many calls and subscriptions the worker has taken. Safe
// for concurrent use.
func (w *Worker) Taken() int64 { return w.taken.Load() }

// logServing says "worker serving" once the worker can take calls: at
// once when the connection is up, else when it first connects (a worker
// started while its NATS server is unreachable says so instead, and retries).
// The goroutine that waits ends with Serve.
func (w *Worker) logServing() {
	up := w.nc.StatusChanged(nats.CONNECTED)
	if w.nc.IsConnected() {
		w.nc.RemoveStatusListener(up)
		w.cfg.Logger.Info("worker serving", "prefix", w.cfg.Prefix, "id", w.cfg.ID)
		return
	}
	w.cfg.Logger.Warn("worker not serving: the NATS server is unreachable, connecting", "prefix", w.cfg.Prefix, "id", w.cfg.ID)
	go func() {
		defer w.nc.RemoveStatusListener(up)
		select {
		case <-up:
			if w.nc.IsConnected() {
				w.cfg.Logger.Info("worker serving", "prefix", w.cfg.Prefix, "id", w.cfg.ID)
			}
		case <-w.hard.Done(): // Serve returned
		}
	}()
}

// Serve takes calls until ctx ends, then drains (see the package doc) and
// returns nil; or until the connection closes, when it cancels what runs and
// returns ErrConnClosed once it has returned. Call it once.
func (w *Worker) Serve(ctx context.Context) error {
	defer w.stop()
	closed := w.nc.StatusChanged(nats.CLOSED)
	defer w.nc.RemoveStatusListener(closed)
	cancels, err := w.nc.Subscribe(wire.CancelSubject(w.cfg.Prefix, w.cfg.ID), w.cancel)
	if err != nil {
		return err
	}
	defer cancels.Unsubscribe()
	// Subscribed before the queue, so that it is in place at the server
	// before any call reaches this worker; it goes when Serve returns.
	alive, err := w.nc.Subscribe(wire.AliveSubject(w.cfg.Prefix, w.cfg.ID), func(*nats.Msg) {})
	if err != nil {
		return err
	}
	defer alive.Unsubscribe()
	// Probes of the edges: their no-responders answers come back here.
	probes, err := w.nc.Subscribe(w.inbox+".>", w.edgeGone)
	if err != nil {
		return err
	}
	defer probes.Unsubscribe()
	stopProbing := make(chan struct{})
	probing := make(chan struct{})
	go w.probeEdges(stopProbing, probing)
	defer func() { close(stopProbing); <-probing }()
	queue, err := w.nc.QueueSubscribe(w.cfg.Prefix+".>", w.cfg.Prefix, w.take)
	if err != nil {
		return err
	}
	drained := make(chan struct{})
	queue.SetClosedHandler(func(string) { w.taking.Store(false); close(drained) })
	// The server has the subscriptions once Flush returns. While the
	// connection is down they are sent when it comes up: no Flush, which
	// would wait its whole timeout.
	if w.nc.IsConnected() {
		if err := w.nc.Flush(); err != nil && !w.nc.IsClosed() {
			w.cfg.Logger.Warn("worker: flush", "err", err)
		}
	}
	w.taking.Store(true)
	if w.nc.IsClosed() {
		return w.abort()
	}
	w.logServing()
	select {
	case <-closed:
		return w.abort()
	case <-ctx.Done():
	}
	// Drain: take nothing new; what the subscription holds already is still
	// taken, then it closes. DrainTimeout bounds the whole of it. While the
	// server is unreachable nothing more can arrive: the subscription just
	// goes.
	w.cfg.Logger.Info("worker draining", "id", w.cfg.ID)
	deadline := time.NewTimer(w.cfg.DrainTimeout)
	defer deadline.Stop()
	if !w.nc.IsConnected() || queue.Drain() != nil {
		_ = queue.Unsubscribe()
	} else {
		select {
		case <-drained:
		case <-closed:
			return w.abort()
		case <-deadline.C:
			w.cfg.Logger.Warn("worker drain timed out: cancelling what runs", "id", w.cfg.ID)
			_ = queue.Unsubscribe()
			w.stop()
		}
	}
	w.taking.Store(false)
	w.mu.Lock()
	w.closing = true // take returns at once from here on
	w.mu.Unlock()
	w.endSubscriptions()
	done := make(chan struct{})
	go func() { w.jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-deadline.C:
		w.cfg.Logger.Warn("worker drain timed out: cancelling what runs", "id", w.cfg.ID)
		w.stop()
		<-done
	case <-closed:
		w.stop()
		<-done
		return ErrConnClosed
	}
	if w.nc.IsConnected() {
		_ = w.nc.FlushTimeout(time.Second) // the last answers leave before the caller closes
	}
	w.cfg.Logger.Info("worker drained", "id", w.cfg.ID)
	return nil
}

// abort cancels every job and waits for them: the connection is gone, so
// nothing can be answered.
func (w *Worker) abort() error {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.stop()
	w.jobs.Wait()
	return ErrConnClosed
}

// endSubscriptions ends every subscription for the drain: each closes
// UPSTREAM_LOST.
func (w *Worker) endSubscriptions() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.subs {
		j.lost.Store(true)
		j.cancel()
	}
}

// probeEdges publishes, every ProbeInterval, an empty probe to the inbox of
// each edge the worker runs something for (package wire), with a reply
// subject under w.inbox; edgeGone takes the NATS server's no-responders
// answers. It returns when stop is closed.
func (w *Worker) probeEdges(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(w.cfg.ProbeInterval)
	defer t.Stop()
	edges := make(map[string]bool)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		clear(edges)
		w.mu.Lock()
		for reply := range w.calls {
			if i := strings.LastIndexByte(reply, '.'); i > 0 {
				edges[reply[:i]] = true // _INBOX.<nuid> of _INBOX.<nuid>.<id>
			}
		}
		w.mu.Unlock()
		for inbox := range edges {
			w.publish(&nats.Msg{Subject: inbox + "." + wire.EdgeAliveToken, Reply: w.inbox + "." + inbox})
		}
	}
}

// edgeGone takes the answers to the worker's probes: the NATS server's
// no-responders status says the edge inbox named after w.inbox is gone, so
// everything the worker runs for it is cancelled, and nothing more is sent
// there. Runs on nats.go's delivery goroutine of the probes' subscription.
func (w *Worker) edgeGone(m *nats.Msg) {
	if m.Header == nil || m.Header.Get(wire.Status) != wire.NoResponders {
		return
	}
	inbox, ok := strings.CutPrefix(m.Subject, w.inbox+".")
	if !ok {
		return
	}
	var gone []*job
	w.mu.Lock()
	for reply, j := range w.calls {
		if strings.HasPrefix(reply, inbox+".") {
			gone = append(gone, j)
		}
	}
	w.mu.Unlock()
	if len(gone) > 0 {
		w.cfg.Logger.Warn("worker: edge gone, its calls cancelled", "inbox", inbox, "calls", len(gone))
	}
	for _, j := range gone {
		j.byEdge.Store(true)
		j.cancel()
	}
}

// job is one call or subscription the worker took.
type job struct {
	reply  string // the call's reply subject: its key, unique across edges
	stream string // the Edge-Stream subject of a subscription, "" for a call
	id     []byte // the request's raw id (edge's)
	method string
	params []byte
	subID  string // a subscription's id (the worker's)
	ctx    context.Context
	cancel context.CancelFunc

	byEdge      atomic.Bool // the edge cancelled it: a live subscription sends nothing more
	lost        atomic.Bool // ended by the worker's drain: closes UPSTREAM_LOST
	established atomic.Bool
}

// request is what take reads of a request.
type request struct {
	id, method, params []byte
}

func parseRequest(data []byte) (request, bool) {
	var r request
	ok := codec.EachMember(data, func(k, v []byte) bool {
		switch {
		case codec.KeyIs(k, "id"):
			r.id = v
		case codec.KeyIs(k, "method"):
			r.method = v
		case codec.KeyIs(k, "params"):
			r.params = v
		}
		return true
	})
	return r, ok && len(r.method) > 1 && r.method[0] == '"'
}

// take handles a message of the queue subscription: a call or a
// subscription request (or a notification, with no reply subject). Runs on
// nats.go's delivery goroutine of the queue subscription.
func (w *Worker) take(m *nats.Msg) {
	if strings.HasPrefix(m.Subject, w.cancels) {
		return // another worker's cancel: the queue's wildcard covers it too
	}
	req, ok := parseRequest(m.Data)
	if !ok {
		w.cfg.Logger.Warn("worker: not a JSON-RPC request", "subject", m.Subject)
		return
	}
	if w.name, ok = codec.AppendUnquote(w.name[:0], req.method); !ok {
		return
	}
	meth := w.method(w.name)
	if meth.inline && m.Reply != "" && req.id != nil && (m.Header == nil || m.Header.Get(wire.Stream) == "") {
		w.inline(m.Reply, req, meth.name)
		return
	}
	select {
	case w.sem <- struct{}{}:
	case <-w.hard.Done():
		return
	}
	j := &job{reply: m.Reply, id: req.id, method: meth.name, params: req.params}
	if j.params == nil {
		j.params = []byte("{}")
	}
	if m.Header != nil {
		j.stream = m.Header.Get(wire.Stream)
	}
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		<-w.sem
		return
	}
	j.ctx, j.cancel = context.WithCancel(w.hard)
	w.jobs.Add(1)
	w.taken.Add(1)
	if m.Reply == "" || req.id == nil {
		w.mu.Unlock()
		go w.run(j) // a notification: nothing is answered
		return
	}
	w.calls[j.reply] = j
	if j.stream != "" {
		w.nextID++
		j.subID = strconv.FormatUint(w.nextID, 10)
		w.subs[j.subID] = j
	}
	w.mu.Unlock()
	// Accepted: the edge learns whom to send a cancel to.
	w.publish(&nats.Msg{Subject: m.Reply, Header: nats.Header{wire.Worker: []string{w.cfg.ID}}})
	go w.run(j)
}

// method returns what take knows of the method named name, interning it.
func (w *Worker) method(name []byte) method {
	if m, ok := w.methods[string(name)]; ok {
		return m
	}
	m := method{name: string(name)}
	m.inline = w.cfg.NonBlocking != nil && w.cfg.NonBlocking(m.name)
	if len(w.methods) < maxMethods {
		w.methods[m.name] = m
	}
	return m
}

// inline runs a call to a non-blocking method (Config.NonBlocking) on the
// queue subscription's delivery goroutine and publishes its response on
// reply, with no "accepted" before it: the edge that gets an answer first
// has no cancel to send. It holds no MaxCalls slot (nothing else is taken
// while it runs) and is not a job of the drain (it ends before take
// returns).
func (w *Worker) inline(reply string, req request, method string) {
	w.taken.Add(1)
	params := req.params
	if params == nil {
		params = []byte("{}")
	}
	res, err := w.call(w.hard, method, params, w.res[:0])
	if err != nil && w.hard.Err() != nil {
		err = backend.ErrUpstreamUnavailable // cut short by the worker going away
	}
	var out []byte
	if err != nil {
		out = rpc.AppendErrorResponse(w.out[:0], req.id, err)
	} else {
		out = codec.AppendResult(w.out[:0], req.id, res)
	}
	// nats.go copies the message before Publish returns, so the scratch
	// buffers serve the next call.
	if err := w.nc.Publish(reply, out); err != nil && !w.nc.IsClosed() {
		w.cfg.Logger.Warn("worker: publish", "subject", reply, "err", err)
	}
	w.res, w.out = keep(res), keep(out)
}

// keep returns b emptied for reuse, or nil when it is too large to hold on
// to.
func keep(b []byte) []byte {
	if cap(b) > maxScratch {
		return nil
	}
	return b[:0]
}

// run runs one job on its own goroutine.
func (w *Worker) run(j *job) {
	defer func() {
		w.mu.Lock()
		if w.calls[j.reply] == j {
			delete(w.calls, j.reply)
		}
		if j.subID != "" {
			delete(w.subs, j.subID)
		}
		w.mu.Unlock()
		j.cancel()
		<-w.sem
		w.jobs.Done()
	}()
	if j.stream != "" {
		w.subscribe(j)
		return
	}
	res, err := w.call(j.ctx, j.method, j.params, nil)
	if j.reply == "" || j.id == nil {
		return
	}
	if err != nil && w.hard.Err() != nil && j.ctx.Err() != nil && !j.byEdge.Load() {
		// Cut short by the worker going away, not by the edge.
		err = backend.ErrUpstreamUnavailable
	}
	var out []byte
	if err != nil {
		out = rpc.AppendErrorResponse(nil, j.id, err)
	} else {
		out = codec.AppendResult(nil, j.id, res)
	}
	w.publish(&nats.Msg{Subject: j.reply, Data: out})
}

// errPanic is what the edge's client sees when a handler panics, as with an
// in-process backend.
var errPanic = &backend.Error{Code: backend.CodeInternal, Message: "Internal error", DataCode: "BACKEND_PANIC"}

func (w *Worker) call(ctx context.Context, method string, params, dst []byte) (res []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			w.cfg.Logger.Error("worker: handler panic", "method", method, "panic", r)
			res, err = nil, errPanic
		}
	}()
	return w.cfg.Handler.Call(ctx, method, params, dst)
}

// errNotEstablished fails a subscription whose backend returned without
// establishing it or failing it.
var errNotEstablished = &backend.Error{Code: backend.CodeInternal, Message: "Internal error", DataCode: "NOT_ESTABLISHED"}

// subscribe runs a subscription: the backend's producer emits through a
// stream that publishes to the Edge-Stream subject.
func (w *Worker) subscribe(j *job) {
	st := &stream{w: w, j: j, quoted: codec.AppendQuote(nil, j.subID)}
	var err error
	if w.cfg.Subscriber == nil {
		err = backend.ErrUnknownMethod
	} else {
		err = w.produce(j, st)
	}
	switch {
	case !j.established.Load():
		switch {
		case err == nil:
			err = errNotEstablished
		case (j.lost.Load() || w.hard.Err() != nil) && !j.byEdge.Load():
			err = backend.ErrUpstreamUnavailable // the worker is going away
		}
		w.publish(&nats.Msg{Subject: j.stream, Data: rpc.AppendErrorResponse(nil, j.id, err)})
	case j.byEdge.Load():
		// The edge ended it: nothing follows subscription/cancel.
	default:
		reason := "done"
		if j.lost.Load() || w.hard.Err() != nil || errors.Is(err, backend.ErrUpstreamLost) {
			reason = "UPSTREAM_LOST"
		}
		w.publish(&nats.Msg{Subject: j.stream, Data: codec.AppendSubscriptionClosed(nil, st.quoted, reason, nil)})
	}
}

func (w *Worker) produce(j *job, st *stream) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.cfg.Logger.Error("worker: subscriber panic", "method", j.method, "panic", r)
			err = errPanic
		}
	}()
	return w.cfg.Subscriber.Subscribe(j.ctx, j.method, j.params, st)
}

// cancel handles a message on the worker's cancel subject: {"id":N} with
// header Edge-Reply for a call (or a subscription not yet established), or
// {"subscriptionId":S}. Runs on nats.go's delivery goroutine of that
// subscription.
func (w *Worker) cancel(m *nats.Msg) {
	var id, sub []byte
	codec.EachMember(m.Data, func(k, v []byte) bool {
		switch {
		case codec.KeyIs(k, "id"):
			id = v
		case codec.KeyIs(k, "subscriptionId"):
			sub = v
		}
		return true
	})
	var j *job
	w.mu.Lock()
	switch {
	case sub != nil:
		if s, ok := codec.AppendUnquote(nil, sub); ok {
			j = w.subs[string(s)]
		}
	case id != nil && m.Header != nil:
		j = w.calls[m.Header.Get(wire.Reply)]
		if j != nil && string(j.id) != string(id) {
			j = nil
		}
	}
	w.mu.Unlock()
	if j != nil {
		j.byEdge.Store(true)
		j.cancel()
	}
}

// publish sends m; a failure means the connection is going away, which
// Serve sees.
func (w *Worker) publish(m *nats.Msg) {
	if err := w.nc.PublishMsg(m); err != nil && !w.nc.IsClosed() {
		w.cfg.Logger.Warn("worker: publish", "subject", m.Subject, "err", err)
	}
}

// stream is a subscription's backend.Stream: it publishes the establishment
// response, then each event, to the edge's Edge-Stream subject. Publishing
// does not wait for the edge, so Emit does not block; the edge's own
// per-subscription buffer bounds what a client may fall behind
// (SLOW_CONSUMER), and its subscription/cancel then stops the producer.
type stream struct {
	w      *Worker
	j      *job
	quoted []byte // the subscription id as a JSON string; immutable
}

// ID implements backend.Stream.
func (s *stream) ID() string { return s.j.subID }

// Namespace implements backend.Stream: a worker serves OECP subscriptions.
func (s *stream) Namespace() string { return "" }

// Establish implements backend.Stream.
func (s *stream) Establish(result []byte) {
	if s.j.established.Swap(true) {
		return
	}
	s.w.publish(&nats.Msg{Subject: s.j.stream, Data: codec.AppendResult(nil, s.j.id, result)})
}

// Emit implements backend.Stream.
func (s *stream) Emit(cursor, body []byte) bool {
	if s.j.ctx.Err() != nil || !s.j.established.Load() {
		return false
	}
	s.w.publish(&nats.Msg{Subject: s.j.stream, Data: codec.AppendEvent(nil, s.quoted, body)})
	return true
}

// EmitWait implements backend.Stream. Nothing paces a NATS subject from the
// far end, so it is Emit that also stops when ctx is done.
func (s *stream) EmitWait(ctx context.Context, cursor, body []byte) bool {
	if ctx.Err() != nil {
		return false
	}
	return s.Emit(cursor, body)
}
