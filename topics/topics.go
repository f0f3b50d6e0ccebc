// Package topics serves edge/topic and edge/publish across edges over NATS
// (CONTRACT.md section 13): a publish on any edge goes to the NATS subject
// <prefix>.topic.<name>, and every edge holding subscribers of that name
// has one NATS subscription for it (one per topic per edge, created with the
// first local subscriber, removed after the last), whose messages are fanned
// out locally to the subscribers' streams (fanout.go). With JetStream,
// the topics are kept in a stream, the cursor is the stream sequence, and a
// subscription may start from a cursor (jetstream.go).
//
// Nothing runs per subscriber or per call. Forward and Cancel run on the
// event loops and never wait for I/O: they change the tables under mu and
// queue what must reach NATS (subscribe, unsubscribe, publish) for the one
// writer goroutine, which does it and completes the calls: a subscription
// is established once NATS has its subscription, a publish is answered
// once NATS (or JetStream) accepted it. With JetStream an acker goroutine
// waits for the acknowledgements, one deadline per batch, so that the
// writer never does (writer.go). NATS delivers each topic's messages on
// nats.go's goroutine of that topic's subscription, which fans them out to
// a snapshot of the topic's subscribers (fanout.go). Each subscription has
// a typed state with a checked transition table and ends through one
// function, which visits it and its topic only (sub.go): a Cancel costs
// the same whatever the number of subscriptions.
//
// A call's lifecycle follows upstream's call table (upstream/calltable.go)
// without sharing its type: a subscription's state (subState) is checked
// by a transition table, and Topics.endLocked is its one end: it leaves
// the tables and counts (the in-flight of the topics: its topic's
// references, live subscribers and established count), queues NATS's
// cancel where the state calls for it (the topic's unsubscribe after its
// last live subscriber, the replay's consumer stopped), and takes the
// call out to be finished once mu is released, so that a second end
// panics instead of finishing it again. A publish is answered by one
// function, published (the queue's count and bytes given back there), a
// call refused at once by refuse. The upstream table does not fit: its
// entries are keyed by a wire id and wait, past their end, for a late
// answer (expired, orphaned) in a deadline-ordered list, while here
// nothing comes back per call: NATS answers per topic (one subscription
// for all its subscribers), so a subscription's states are a topic's
// (waiting for the topic's NATS subscription, a member of its fan-out)
// and end with it; and no request metric is kept per topic call.
//
// Locks, in the order they may be taken (never the other way round):
//
//	Topics.mu -> fanout.mu     a join or leave of a topic's fan-out, by a
//	                           loop (Forward, Cancel), the writer, an
//	                           expiry timer or nats.go's callbacks
//	Topics.mu -> stream.mu     Stream.Establish (rpc's stream) sends a
//	                           subscription's response under Topics.mu, so
//	                           that it follows its join (joinLocked)
//	fanout.pub -> fanout.mu    a publish takes its snapshot of the members
//	fanout.pub -> stream.mu    Stream.Emit during a fan-out, with neither
//	                           Topics.mu nor fanout.mu held
//
// stream.mu is rpc's: only rpc takes locks under it (budget.mu in
// EmitWait), and the stream releases it before it posts to its loop
// (eventLoop.mu). Topics.mu is never held while calling into nats.go, whose
// callbacks (connection state, errors, messages) take it; the writer and
// the acker call NATS without it. backend.Fanout.mu is the memory
// backend's and is not taken here.
//
// Guarantees: without JetStream, delivery is at most once (a message
// published while an edge is not subscribed, or while its connection is
// down, is not seen there) and there is no replay; the cursor is a
// per-edge, per-topic sequence number. A lost NATS connection ends every
// subscription UPSTREAM_LOST; while NATS is unreachable edge/topic and
// edge/publish answer UPSTREAM_UNAVAILABLE.
package topics

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
	"unicode"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/redact"
	"github.com/openengine/edge/internal/wire"
)

// Defaults of Config.
const (
	DefaultPrefix    = "edge"
	DefaultTimeout   = 5 * time.Second
	DefaultMaxAge    = 24 * time.Hour
	DefaultMaxBytes  = 1 << 30
	MaxNameBytes     = 256
	defaultBackoff   = 5 * time.Second
	openRetry        = 250 * time.Millisecond
	maxBatch         = 1024
	publishQueueSize = 64 << 20 // bytes of publishes queued or unacknowledged before new ones are refused
	maxPending       = 4096     // JetStream publishes queued or unacknowledged before new ones are refused
)

// Config configures Topics.
type Config struct {
	URL    string // the NATS server, nats://[USER:PASSWORD@]HOST:PORT (required); printed masked (redact.URLs)
	Prefix string // subjects are <Prefix>.topic.<name> (default "edge")
	// JetStream keeps the topics in the stream <Prefix>_topics (dots of
	// the prefix become underscores), created if missing, with the limits
	// below: cursors are stream sequences and fromCursor replays.
	JetStream bool
	MaxAge    time.Duration // JetStream: events older than this are removed (default 24h)
	MaxBytes  int64         // JetStream: the oldest events go beyond this size (default 1 GiB)
	// Timeout bounds each wait on NATS: a publish's flush, a batch of
	// JetStream acknowledgements (one deadline for the batch), a
	// subscription's set-up; an edge/topic not established by then ends
	// UPSTREAM_TIMEOUT (default 5s).
	Timeout    time.Duration
	BackoffMax time.Duration // longest wait between reconnects (default 5s)
	Logger     *slog.Logger
}

// Check reports what is wrong with cfg, nil when nothing is.
func (cfg *Config) Check() error {
	var errs []error
	if cfg.URL == "" {
		errs = append(errs, errors.New("nats: a URL is required"))
	}
	if cfg.Prefix != "" && !ValidName(cfg.Prefix) {
		errs = append(errs, fmt.Errorf("nats-prefix %q: want dot-separated tokens without spaces, '*' or '>'", cfg.Prefix))
	}
	if cfg.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("jetstream-max-age %s must not be negative", cfg.MaxAge))
	}
	if cfg.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("jetstream-max-bytes %d must not be negative", cfg.MaxBytes))
	}
	return errors.Join(errs...)
}

func (cfg *Config) defaults() {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = defaultBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// StreamName is the JetStream stream of the topics under prefix.
func StreamName(prefix string) string { return strings.ReplaceAll(prefix, ".", "_") + "_topics" }

// ValidName reports whether a topic name can follow "<prefix>.topic." in a
// NATS subject: at most MaxNameBytes of UTF-8, dot-separated tokens, none
// empty, none holding a wildcard ('*', '>'), whitespace or a control
// character. Other names are refused with -32602 rather than encoded, so
// that the subject of a topic is its name, readable by any NATS client.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameBytes || !utf8.ValidString(s) {
		return false
	}
	prevDot := true
	for _, r := range s {
		switch {
		case r == '.':
			if prevDot {
				return false
			}
			prevDot = true
			continue
		case r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r):
			return false
		}
		prevDot = false
	}
	return !prevDot
}

// Topics is the NATS side of edge/topic and edge/publish for one edge. It
// implements backend.Forwarder for those two methods. Safe for concurrent
// use.
type Topics struct {
	cfg    Config // immutable after New
	stream string // immutable: JetStream stream name
	shown  string // immutable: cfg.URL for logs and errors, its userinfo masked

	mu      sync.Mutex
	up      bool              // guarded by mu: connected (and the stream exists)
	opens   uint64            // guarded by mu: times up became true
	openErr string            // guarded by mu: why the JetStream stream is unusable, "" once it was usable
	stall   string            // guarded by mu: why the stream does not acknowledge publishes, "" when it does
	nextID  uint64            // guarded by mu: last subscription ticket id
	subs    map[uint64]*sub   // guarded by mu: subscriptions by ticket id
	topics  map[string]*topic // guarded by mu: topics with subscribers here
	ops     opQueue           // guarded by mu: for the writer, in order
	pubs    int               // guarded by mu: publishes accepted and not answered yet
	pubData int               // guarded by mu: their bytes
	visited int               // guarded by mu: subscriptions looked at to end subscriptions (the tests' work counter)

	status  atomic.Pointer[string] // what NotReady says, set by setStatusLocked
	dropped atomic.Int64           // messages on the topics' subjects that were not a JSON value in UTF-8

	wake    chan struct{}  // cap 1: ops or a state change for the writer
	batches chan *pubBatch // cap maxPending: JetStream publishes for the acker, in order
	quit    chan struct{}
	done    chan struct{}       // the writer returned
	ackDone chan struct{}       // the acker returned
	nc      *nats.Conn          // set by Start
	js      jetstream.JetStream // set by Start with JetStream
	used    []op                // writer-owned: the last batch, given back to ops by the next take

	// hookSubscribe, set by tests before the first subscription, is
	// called by the writer before it makes a topic's NATS subscription.
	hookSubscribe func()
}

// topic is one name with subscribers on this edge.
type topic struct {
	name    string // immutable
	subject string // immutable
	fan     fanout // the live subscribers, established
	// Guarded by Topics.mu:
	refs    int    // subscriptions of every kind, not ended: the topic goes with the last
	live    int    // live subscribers (not fromCursor), established or waiting
	waiting []*sub // live subscribers waiting for the NATS subscription (sub.slot indexes it)
	count   int    // established subscriptions of every kind (edge/publish's delivered)
	ready   bool   // the NATS subscription is in place
	gone    bool   // removed from Topics.topics
	// expiry ends the waiting subscribers UPSTREAM_TIMEOUT if the NATS
	// subscription is not in place Timeout after it was asked for.
	expiry *time.Timer
	// want numbers the subscribe operations queued: only the result of
	// the last may make the topic ready (an earlier one's subscription is
	// removed by the unsubscribe queued after it).
	want uint64
	// Writer-owned:
	nsub *nats.Subscription       // core NATS
	cons jetstream.ConsumeContext // JetStream: the topic's live ordered consumer
}

// op is one thing for the writer to do.
type op struct {
	kind    opKind
	t       *topic
	s       *sub         // opReplay
	c       backend.Call // opPublish
	name    string       // opPublish
	subject string       // opPublish
	data    []byte       // opPublish
	want    uint64       // opSubscribe: topic.want when queued
}

type opKind uint8

const (
	opSubscribe   opKind = iota // the topic's NATS subscription (or live consumer)
	opUnsubscribe               // remove it
	opReplay                    // a fromCursor subscription's ordered consumer
	opStopReplay                // stop it
	opPublish
)

// New returns the topics of cfg, not started.
func New(cfg Config) (*Topics, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	cfg.defaults()
	t := &Topics{cfg: cfg, stream: StreamName(cfg.Prefix), shown: redact.URLs(cfg.URL),
		subs: make(map[uint64]*sub), topics: make(map[string]*topic),
		wake: make(chan struct{}, 1), batches: make(chan *pubBatch, maxPending),
		quit: make(chan struct{}), done: make(chan struct{}), ackDone: make(chan struct{})}
	down := "not connected"
	t.status.Store(&down)
	return t, nil
}

// Subject is the NATS subject of topic name.
func (t *Topics) Subject(name string) string { return t.cfg.Prefix + ".topic." + name }

// Ready reports whether NATS is connected (with JetStream: and the stream
// is there): edge/topic and edge/publish are served.
func (t *Topics) Ready() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.up
}

// NotReady says why edge/topic and edge/publish are not served as they
// should be, "" when they are: NATS is not connected, the JetStream stream
// is unusable, or it does not acknowledge publishes (which then answer
// UPSTREAM_UNAVAILABLE). For /readyz. Safe for concurrent use.
func (t *Topics) NotReady() string { return *t.status.Load() }

// setStatusLocked sets what NotReady says from up, openErr and stall.
// Called with mu held, after a change of one of them.
func (t *Topics) setStatusLocked() {
	why := ""
	switch {
	case !t.up && t.openErr != "":
		why = "JetStream stream " + t.stream + " unusable: " + t.openErr
	case !t.up:
		why = "not connected"
	case t.stall != "":
		why = "JetStream stream " + t.stream + ": " + t.stall
	}
	if why != *t.status.Load() {
		t.status.Store(&why)
	}
}

// Dropped is how many messages on the topics' subjects were dropped because
// they are not one JSON value in valid UTF-8 (published by something other
// than an edge). Safe for concurrent use.
func (t *Topics) Dropped() int64 { return t.dropped.Load() }

// Opens is how many times the topics became usable: once at start, once
// more after each loss of NATS. Who restarts NATS waits for it to grow
// (Ready alone may still report the connection from before the loss when
// nats.go has not yet told this edge it was lost).
func (t *Topics) Opens() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.opens
}

// Describe names the NATS side for logs and /readyz.
func (t *Topics) Describe() string {
	if t.cfg.JetStream {
		return "nats topics " + t.shown + " (JetStream stream " + t.stream + ")"
	}
	return "nats topics " + t.shown
}

func (t *Topics) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// queueLocked adds o for the writer. Called with mu held.
func (t *Topics) queueLocked(o op) { t.ops.push(o) }

// opQueue is the writer's queue: chunks of up to maxBatch operations, so
// that adding one never copies the queue (a hold of Topics.mu stays short
// however long the queue grows while the writer is busy).
type opQueue struct {
	chunks [][]op
	spare  []op // a chunk the writer is done with, for the next push to reuse
}

func (q *opQueue) push(o op) {
	n := len(q.chunks)
	if n == 0 || len(q.chunks[n-1]) >= maxBatch {
		c := q.spare
		q.spare = nil
		switch {
		case c != nil:
		case n > 0: // a long queue: a full chunk at once
			c = make([]op, 0, maxBatch)
		default:
			c = make([]op, 0, 16)
		}
		q.chunks = append(q.chunks, c)
		n++
	}
	q.chunks[n-1] = append(q.chunks[n-1], o)
}

// pop takes the oldest chunk, and done, the chunk of the writer's last
// batch, for reuse; more says whether other chunks follow.
func (q *opQueue) pop(done []op) (ops []op, more bool) {
	if cap(done) > 0 && q.spare == nil {
		clear(done)
		q.spare = done[:0]
	}
	if len(q.chunks) == 0 {
		return nil, false
	}
	ops = q.chunks[0]
	n := copy(q.chunks, q.chunks[1:])
	q.chunks[n] = nil
	q.chunks = q.chunks[:n]
	return ops, n > 0
}

type params struct {
	Name       *string         `json:"name"`
	Data       json.RawMessage `json:"data"`
	FromCursor *string         `json:"fromCursor"`
}

// invalid is the -32602 error of bad edge/topic or edge/publish params.
func invalid(msg string) error {
	return &backend.Error{Code: backend.CodeInvalidParams, Message: msg, DataCode: "SCHEMA_VIOLATION"}
}

func (t *Topics) parse(c backend.Call) (params, error) {
	var p params
	if err := json.Unmarshal(c.Params(), &p); err != nil || p.Name == nil {
		return p, backend.SchemaViolation(nil)
	}
	if !ValidName(*p.Name) {
		return p, invalid("Invalid params: a topic name is 1 to 256 bytes of dot-separated tokens without spaces, control characters, '*' or '>'")
	}
	return p, nil
}

// Forward implements backend.Forwarder for edge/topic and edge/publish.
// Runs on a loop; never waits.
func (t *Topics) Forward(c backend.Call, _ backend.Origin) backend.Ticket {
	p, err := t.parse(c)
	if err != nil {
		refuse(c, err)
		return backend.Ticket{}
	}
	if c.Stream() == nil {
		t.publish(c, *p.Name, p.Data)
		return backend.Ticket{}
	}
	s := &sub{c: c, st: c.Stream()}
	if p.FromCursor != nil {
		if !t.cfg.JetStream {
			refuse(c, invalid("Invalid params: fromCursor needs --jetstream (plain NATS topics keep no history)"))
			return backend.Ticket{}
		}
		from, err := strconv.ParseUint(*p.FromCursor, 10, 64)
		if err != nil {
			refuse(c, invalid("Invalid params: fromCursor is a cursor of an edge/topic event (a stream sequence number)"))
			return backend.Ticket{}
		}
		s.from, s.replay = from, true
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	t.mu.Lock()
	if !t.up {
		t.mu.Unlock()
		refuse(c, backend.ErrUpstreamUnavailable)
		return backend.Ticket{}
	}
	t.nextID++
	s.id = t.nextID
	t.subs[s.id] = s
	tp := t.topics[*p.Name]
	if tp == nil {
		tp = &topic{name: *p.Name, subject: t.Subject(*p.Name)}
		t.topics[*p.Name] = tp
	}
	s.t = tp
	tp.refs++
	switch {
	case s.replay:
		s.state = subOpening
		t.queueLocked(op{kind: opReplay, t: tp, s: s})
		s.expiry = time.AfterFunc(t.cfg.Timeout, func() { t.expireOpening(s) })
	case tp.ready:
		tp.live++
		t.joinLocked(s)
	default:
		tp.live++
		waitLocked(s)
		if tp.live == 1 {
			tp.want++
			want := tp.want
			t.queueLocked(op{kind: opSubscribe, t: tp, want: want})
			tp.expiry = time.AfterFunc(t.cfg.Timeout, func() { t.expireWaiting(tp, want) })
		}
	}
	t.mu.Unlock()
	t.signal()
	return backend.NewTicket(t, s.id)
}

// Cancel implements backend.Canceller: the subscription ended on the
// gateway's side (cancelled, its connection closed, SLOW_CONSUMER). Runs on
// a loop; O(1): it visits the subscription and its topic only.
func (t *Topics) Cancel(id uint64) {
	var one [1]subEnd
	t.mu.Lock()
	s := t.subs[id]
	if s == nil {
		t.mu.Unlock()
		return
	}
	ends := t.endLocked(one[:0], s, nil)
	t.mu.Unlock()
	t.finish(ends...)
}

// publish queues an edge/publish. Runs on a loop.
func (t *Topics) publish(c backend.Call, name string, data []byte) {
	if len(data) == 0 {
		data = []byte("null")
	}
	t.mu.Lock()
	// While the stream does not acknowledge, one publish at a time goes
	// out to find out whether it does again; the others are refused at
	// once rather than each waiting out the timeout.
	if !t.up || t.pubData+len(data) > publishQueueSize || t.cfg.JetStream && t.pubs >= maxPending || t.stall != "" && t.pubs > 0 {
		t.mu.Unlock()
		refuse(c, backend.ErrUpstreamUnavailable)
		return
	}
	t.pubs++
	t.pubData += len(data)
	t.queueLocked(op{kind: opPublish, c: c, name: name, subject: t.Subject(name), data: data})
	t.mu.Unlock()
	t.signal()
}

// published answers the publish o: with err UPSTREAM_UNAVAILABLE, else
// {"delivered":n}, n the number of this edge's established subscriptions
// of its topic. Every accepted publish is answered here, once.
func (t *Topics) published(o op, err error) {
	t.mu.Lock()
	t.pubs--
	t.pubData -= len(o.data)
	n := 0
	if tp := t.topics[o.name]; tp != nil {
		n = tp.count
	}
	t.mu.Unlock()
	if err != nil {
		o.c.Finish(nil, backend.ErrUpstreamUnavailable)
		return
	}
	o.c.Finish(backend.AppendDelivered(nil, n), nil)
}

// fail marks NATS down and ends everything (CONTRACT.md section 13):
// established subscriptions end UPSTREAM_LOST (with their last delivered
// cursor, which the gateway adds), the others and queued publishes get
// UPSTREAM_UNAVAILABLE. The NATS subscriptions are removed: nats.go would
// otherwise renew them on reconnect, for subscriptions that have ended.
func (t *Topics) fail() {
	t.mu.Lock()
	t.openErr = "" // not connected says it all
	if !t.up {
		t.setStatusLocked()
		t.mu.Unlock()
		return
	}
	t.up, t.stall = false, ""
	t.setStatusLocked()
	queued := t.ops
	t.ops = opQueue{}
	var pubs []op
	for _, ops := range queued.chunks {
		for _, o := range ops {
			switch o.kind {
			case opUnsubscribe, opStopReplay:
				t.queueLocked(o)
			case opPublish:
				pubs = append(pubs, o)
			}
		}
	}
	ends := make([]subEnd, 0, len(t.subs))
	for _, s := range t.subs {
		ends = t.endLocked(ends, s, lossErr(s))
	}
	t.mu.Unlock()
	for _, o := range pubs {
		t.published(o, nats.ErrConnectionClosed)
	}
	t.finish(ends...)
}

// Start connects to NATS (nats.go keeps reconnecting) and starts the
// writer. Close stops it.
func (t *Topics) Start() error {
	log := t.cfg.Logger.With("nats", t.shown)
	ready := make(chan struct{}, 1)
	up := func(*nats.Conn) {
		select {
		case ready <- struct{}{}:
		default:
		}
	}
	nc, err := nats.Connect(t.cfg.URL,
		nats.Name("edge topics"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			return min(100*time.Millisecond<<min(attempts, 10), t.cfg.BackoffMax)
		}),
		nats.ReconnectBufSize(-1), // nothing queues while down
		nats.PingInterval(wire.PingInterval),
		nats.MaxPingsOutstanding(wire.MaxPingsOut),
		nats.Timeout(t.cfg.Timeout),
		nats.ConnectHandler(up),
		nats.ReconnectHandler(up),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if t.Ready() {
				log.Warn("nats topics: connection lost", "err", err)
			}
			t.fail()
		}),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			log.Warn("nats topics: error", "err", err)
			if errors.Is(err, nats.ErrSlowConsumer) && s != nil {
				// Messages of a topic were dropped: its subscribers end
				// as if the connection was lost, rather than see a gap.
				t.lost(s.Subject)
			}
		}),
	)
	if err != nil {
		return fmt.Errorf("nats %s: %w", t.shown, err)
	}
	t.nc = nc
	if t.cfg.JetStream {
		// nats.go forgets a publish not acknowledged in Timeout (it
		// would otherwise keep it, and a stalled stream would fill its
		// table); it never holds more than the topics let out, so that
		// PublishAsync never waits for room.
		if t.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(t.cfg.Timeout),
			jetstream.WithPublishAsyncMaxPending(2*maxPending)); err != nil {
			nc.Close()
			return fmt.Errorf("nats %s: %w", t.shown, err)
		}
	}
	if nc.IsConnected() {
		up(nc)
	}
	go t.acker(log)
	go t.run(log, ready, func() {
		// Try again later: JetStream may not be ready just after the
		// server (re)started.
		time.AfterFunc(openRetry, func() { up(nil) })
	})
	return nil
}

// lost ends the subscriptions of the topic whose subject is subject
// UPSTREAM_LOST.
func (t *Topics) lost(subject string) {
	name, ok := strings.CutPrefix(subject, t.cfg.Prefix+".topic.")
	if !ok {
		return
	}
	t.mu.Lock()
	tp := t.topics[name]
	var ends []subEnd
	if tp != nil {
		// One pass over the topic's live subscribers, from the end: each
		// removal takes the last index, so nothing moves.
		ends = make([]subEnd, 0, tp.live)
		for i := len(tp.waiting) - 1; i >= 0; i-- {
			s := tp.waiting[i]
			ends = t.endLocked(ends, s, lossErr(s))
		}
		for i := len(tp.fan.members) - 1; i >= 0; i-- {
			s := tp.fan.members[i]
			ends = t.endLocked(ends, s, lossErr(s))
		}
	}
	t.mu.Unlock()
	t.finish(ends...)
}

// Close stops the writer and closes the NATS connection; every
// subscription ends UPSTREAM_LOST. Call it after the gateway has drained.
func (t *Topics) Close() {
	if t.nc == nil {
		return
	}
	close(t.quit)
	<-t.done
	<-t.ackDone
	t.fail()
	for len(t.batches) > 0 { // the writer and the acker have returned
		for _, o := range (<-t.batches).pubs {
			t.published(o, nats.ErrConnectionClosed)
		}
	}
	t.nc.Close()
}

// Route returns the forwarder choice of the gateway with the topics: edge
// itself serves edge/topic and edge/publish over NATS whatever the routes
// say (CONTRACT.md section 10); every other method goes where next sends it
// (next may be nil: the memory backend).
func (t *Topics) Route(next func(string) backend.Forwarder) func(string) backend.Forwarder {
	return func(method string) backend.Forwarder {
		if method == "edge/topic" || method == "edge/publish" {
			return t
		}
		if next == nil {
			return nil
		}
		return next(method)
	}
}
