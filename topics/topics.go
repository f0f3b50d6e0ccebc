// Package topics serves edge/topic and edge/publish across edges over NATS
// (CONTRACT.md section 13): a publish on any edge goes to the NATS subject
// <prefix>.topic.<name>, and every edge holding subscribers of that name
// has one NATS subscription for it (one per topic per edge, created with the
// first local subscriber, removed after the last), whose messages are fanned
// out locally to the subscribers' streams (backend.Fanout). With JetStream,
// the topics are kept in a stream, the cursor is the stream sequence, and a
// subscription may start from a cursor (jetstream.go).
//
// Nothing runs per subscriber or per call. Forward and Cancel run on the
// event loops and never wait for I/O: they change the tables under mu and
// queue what must reach NATS (subscribe, unsubscribe, publish) for the one
// writer goroutine, which does it and completes the calls: a subscription
// is established once NATS has its subscription, a publish is answered
// once NATS (or JetStream) accepted it. NATS delivers each topic's messages
// on nats.go's goroutine of that topic's subscription.
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
	"time"
	"unicode"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// Defaults of Config.
const (
	DefaultPrefix    = "edge"
	DefaultTimeout   = 5 * time.Second
	DefaultMaxAge    = 24 * time.Hour
	DefaultMaxBytes  = 1 << 30
	MaxNameBytes     = 256
	defaultBackoff   = 5 * time.Second
	pingInterval     = time.Second
	maxPingsOut      = 2
	openRetry        = 250 * time.Millisecond
	maxBatch         = 1024
	publishQueueSize = 64 << 20 // bytes of publishes queued before new ones are refused
)

// Config configures Topics.
type Config struct {
	URL    string // the NATS server, nats://HOST:PORT (required)
	Prefix string // subjects are <Prefix>.topic.<name> (default "edge")
	// JetStream keeps the topics in the stream <Prefix>_topics (dots of
	// the prefix become underscores), created if missing, with the limits
	// below: cursors are stream sequences and fromCursor replays.
	JetStream bool
	MaxAge    time.Duration // JetStream: events older than this are removed (default 24h)
	MaxBytes  int64         // JetStream: the oldest events go beyond this size (default 1 GiB)
	// Timeout bounds each wait on NATS: a publish's flush or JetStream
	// acknowledgement, a subscription's set-up (default 5s).
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

	mu      sync.Mutex
	up      bool              // guarded by mu: connected (and the stream exists)
	opens   uint64            // guarded by mu: times up became true
	nextID  uint64            // guarded by mu: last subscription ticket id
	subs    map[uint64]*sub   // guarded by mu: subscriptions by ticket id
	topics  map[string]*topic // guarded by mu: topics with subscribers here
	ops     []op              // guarded by mu: for the writer, in order
	opBytes int               // guarded by mu: publish bytes in ops

	wake chan struct{} // cap 1: ops or a state change for the writer
	quit chan struct{}
	done chan struct{}
	nc   *nats.Conn          // set by Start
	js   jetstream.JetStream // set by Start with JetStream
}

// topic is one name with subscribers on this edge.
type topic struct {
	name    string
	subject string
	fan     backend.Fanout // the established live subscribers
	// Guarded by Topics.mu:
	live    int    // live subscribers (not fromCursor), established or waiting
	waiting []*sub // live subscribers waiting for the NATS subscription
	count   int    // established subscriptions of every kind (edge/publish's delivered)
	ready   bool   // the NATS subscription is in place
	gone    bool   // removed from Topics.topics
	// Writer-owned:
	nsub *nats.Subscription       // core NATS
	cons jetstream.ConsumeContext // JetStream: the topic's live ordered consumer
}

// sub is one edge/topic subscription.
type sub struct {
	id  uint64
	c   backend.Call
	st  backend.Stream
	t   *topic
	est bool // guarded by Topics.mu: established
	// from is the fromCursor (JetStream): the subscription has its own
	// ordered consumer from from+1. Immutable.
	from   uint64
	replay bool
	ctx    context.Context           // replay: cancelled when it ends
	cancel context.CancelFunc        // replay
	iter   jetstream.MessagesContext // writer-owned: the replay's iterator
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
	return &Topics{cfg: cfg, stream: StreamName(cfg.Prefix),
		subs: make(map[uint64]*sub), topics: make(map[string]*topic),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}, nil
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
		return "nats topics " + t.cfg.URL + " (JetStream stream " + t.stream + ")"
	}
	return "nats topics " + t.cfg.URL
}

func (t *Topics) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// queueLocked adds o for the writer. Called with mu held.
func (t *Topics) queueLocked(o op) {
	t.ops = append(t.ops, o)
	t.opBytes += len(o.data)
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
		c.Finish(nil, err)
		return backend.Ticket{}
	}
	if c.Stream() == nil {
		t.publish(c, *p.Name, p.Data)
		return backend.Ticket{}
	}
	s := &sub{c: c, st: c.Stream()}
	if p.FromCursor != nil {
		if !t.cfg.JetStream {
			c.Finish(nil, invalid("Invalid params: fromCursor needs --jetstream (plain NATS topics keep no history)"))
			return backend.Ticket{}
		}
		from, err := strconv.ParseUint(*p.FromCursor, 10, 64)
		if err != nil {
			c.Finish(nil, invalid("Invalid params: fromCursor is a cursor of an edge/topic event (a stream sequence number)"))
			return backend.Ticket{}
		}
		s.from, s.replay = from, true
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	t.mu.Lock()
	if !t.up {
		t.mu.Unlock()
		c.Finish(nil, backend.ErrUpstreamUnavailable)
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
	switch {
	case s.replay:
		t.queueLocked(op{kind: opReplay, t: tp, s: s})
	case tp.ready:
		tp.live++
		t.joinLocked(s)
	default:
		tp.live++
		tp.waiting = append(tp.waiting, s)
		if tp.live == 1 {
			t.queueLocked(op{kind: opSubscribe, t: tp})
		}
	}
	t.mu.Unlock()
	t.signal()
	return backend.NewTicket(t, s.id)
}

// joinLocked makes s, a live subscription, one of its topic's subscribers
// and then sends its success response: the other way round, an event
// published by the client right after the response (and delivered by NATS
// before the join) was lost. Called with mu held.
func (t *Topics) joinLocked(s *sub) {
	s.t.fan.Join(s.st)
	t.establishLocked(s)
}

// establishLocked sends s's success response. Called with mu held.
func (t *Topics) establishLocked(s *sub) {
	s.est = true
	s.t.count++
	res := append(make([]byte, 0, 32), `{"subscriptionId":`...)
	res = codec.AppendQuote(res, s.st.ID())
	s.st.Establish(append(res, '}'))
}

// Cancel implements backend.Canceller: the subscription ended on the
// gateway's side (cancelled, its connection closed, SLOW_CONSUMER). Runs on
// a loop.
func (t *Topics) Cancel(id uint64) {
	t.mu.Lock()
	s := t.subs[id]
	if s == nil {
		t.mu.Unlock()
		return
	}
	t.removeLocked(s)
	t.mu.Unlock()
	t.signal()
	s.c.Finish(nil, nil)
}

// removeLocked takes s out of the tables, queueing what NATS must be told.
// Called with mu held.
func (t *Topics) removeLocked(s *sub) {
	delete(t.subs, s.id)
	tp := s.t
	if s.est {
		tp.count--
	}
	if s.replay {
		s.cancel()
		t.queueLocked(op{kind: opStopReplay, s: s})
	} else {
		tp.live--
		if s.est {
			tp.fan.Leave(s.st)
		} else {
			for i, w := range tp.waiting {
				if w == s {
					tp.waiting = append(tp.waiting[:i], tp.waiting[i+1:]...)
					break
				}
			}
		}
		if tp.live == 0 {
			tp.ready = false
			t.queueLocked(op{kind: opUnsubscribe, t: tp})
		}
	}
	if tp.live == 0 && tp.count == 0 && !hasReplay(t.subs, tp) && !tp.gone {
		tp.gone = true
		delete(t.topics, tp.name)
	}
}

// hasReplay reports whether a replay subscription of tp waits to be
// established. Called with mu held; replays are few.
func hasReplay(subs map[uint64]*sub, tp *topic) bool {
	for _, s := range subs {
		if s.t == tp && s.replay && !s.est {
			return true
		}
	}
	return false
}

// publish queues an edge/publish. Runs on a loop.
func (t *Topics) publish(c backend.Call, name string, data []byte) {
	if len(data) == 0 {
		data = []byte("null")
	}
	t.mu.Lock()
	if !t.up || t.opBytes+len(data) > publishQueueSize {
		t.mu.Unlock()
		c.Finish(nil, backend.ErrUpstreamUnavailable)
		return
	}
	t.queueLocked(op{kind: opPublish, c: c, name: name, subject: t.Subject(name), data: data})
	t.mu.Unlock()
	t.signal()
}

// delivered is the number of this edge's established subscriptions of name.
func (t *Topics) delivered(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tp := t.topics[name]; tp != nil {
		return tp.count
	}
	return 0
}

// fail marks NATS down and ends everything (CONTRACT.md section 13):
// established subscriptions end UPSTREAM_LOST (with their last delivered
// cursor, which the gateway adds), the others and queued publishes get
// UPSTREAM_UNAVAILABLE. The NATS subscriptions are removed: nats.go would
// otherwise renew them on reconnect, for subscriptions that have ended.
func (t *Topics) fail() {
	t.mu.Lock()
	if !t.up {
		t.mu.Unlock()
		return
	}
	t.up = false
	subs, topics, ops := t.subs, t.topics, t.ops
	t.subs, t.topics, t.ops, t.opBytes = make(map[uint64]*sub), make(map[string]*topic), nil, 0
	for _, o := range ops {
		switch o.kind {
		case opUnsubscribe, opStopReplay:
			t.queueLocked(o)
		}
	}
	for _, tp := range topics {
		tp.gone, tp.ready, tp.waiting = true, false, nil
		t.queueLocked(op{kind: opUnsubscribe, t: tp})
	}
	for _, s := range subs {
		if s.replay {
			s.cancel()
			t.queueLocked(op{kind: opStopReplay, s: s})
		}
	}
	t.mu.Unlock()
	t.signal()
	for _, o := range ops {
		if o.kind == opPublish {
			o.c.Finish(nil, backend.ErrUpstreamUnavailable)
		}
	}
	for _, s := range subs {
		if s.est {
			s.c.Finish(nil, backend.ErrUpstreamLost)
		} else {
			s.c.Finish(nil, backend.ErrUpstreamUnavailable)
		}
	}
}

// Start connects to NATS (nats.go keeps reconnecting) and starts the
// writer. Close stops it.
func (t *Topics) Start() error {
	log := t.cfg.Logger.With("nats", t.cfg.URL)
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
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
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
		return fmt.Errorf("nats %s: %w", t.cfg.URL, err)
	}
	t.nc = nc
	if t.cfg.JetStream {
		if t.js, err = jetstream.New(nc); err != nil {
			nc.Close()
			return fmt.Errorf("nats %s: %w", t.cfg.URL, err)
		}
	}
	if nc.IsConnected() {
		up(nc)
	}
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
	var ended []*sub
	if tp != nil {
		for _, s := range t.subs {
			if s.t == tp && !s.replay {
				ended = append(ended, s)
				t.removeLocked(s)
			}
		}
	}
	t.mu.Unlock()
	t.signal()
	for _, s := range ended {
		if s.est {
			s.c.Finish(nil, backend.ErrUpstreamLost)
		} else {
			s.c.Finish(nil, backend.ErrUpstreamUnavailable)
		}
	}
}

// Close stops the writer and closes the NATS connection; every
// subscription ends UPSTREAM_LOST. Call it after the gateway has drained.
func (t *Topics) Close() {
	if t.nc == nil {
		return
	}
	close(t.quit)
	<-t.done
	t.fail()
	t.nc.Close()
}

// run is the writer: it marks the topics up once NATS is (JetStream: once
// the stream exists) and does the queued operations.
func (t *Topics) run(log *slog.Logger, ready <-chan struct{}, retry func()) {
	defer close(t.done)
	for {
		select {
		case <-t.quit:
			return
		case <-ready:
			if !t.nc.IsConnected() {
				continue
			}
			switch opened, err := t.open(); {
			case err != nil:
				log.Warn("nats topics: JetStream stream unusable", "stream", t.stream, "err", err)
				retry()
			case opened:
				log.Info("nats topics: connected", "prefix", t.cfg.Prefix)
			}
		case <-t.wake:
			t.flushOps(log)
		}
	}
}

// open marks the topics up, with JetStream once the stream is there, and
// reports whether they were down; an error says the stream is not usable
// (yet).
func (t *Topics) open() (bool, error) {
	if t.cfg.JetStream {
		if err := t.ensureStream(); err != nil {
			return false, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.up {
		return false, nil
	}
	t.up = true
	t.opens++
	return true, nil
}

// take hands the writer up to maxBatch queued operations.
func (t *Topics) take() ([]op, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := min(len(t.ops), maxBatch)
	ops := make([]op, n)
	copy(ops, t.ops)
	rest := copy(t.ops, t.ops[n:])
	clear(t.ops[rest:])
	t.ops = t.ops[:rest]
	for _, o := range ops {
		t.opBytes -= len(o.data)
	}
	return ops, rest > 0
}

// flushOps does the queued operations, in batches: every publish and
// subscription of a batch, then one round trip to NATS (a flush; with
// JetStream the acknowledgements) before the calls are completed.
func (t *Topics) flushOps(log *slog.Logger) {
	for {
		ops, more := t.take()
		if len(ops) == 0 {
			return
		}
		t.apply(log, ops)
		if !more {
			return
		}
	}
}

func (t *Topics) apply(log *slog.Logger, ops []op) {
	var subscribed []*topic
	var pubs []op
	var acks []jetstream.PubAckFuture
	for _, o := range ops {
		switch o.kind {
		case opSubscribe:
			if t.subscribe(log, o.t) {
				subscribed = append(subscribed, o.t)
			}
		case opUnsubscribe:
			t.unsubscribe(o.t)
		case opReplay:
			t.startReplay(log, o.s)
		case opStopReplay:
			if o.s.iter != nil {
				o.s.iter.Stop()
				o.s.iter = nil
			}
		case opPublish:
			if t.js != nil {
				f, err := t.js.PublishAsync(o.subject, o.data)
				if err != nil {
					log.Debug("nats topics: publish refused", "subject", o.subject, "err", err)
					o.c.Finish(nil, backend.ErrUpstreamUnavailable)
					continue
				}
				acks = append(acks, f)
			} else if err := t.nc.Publish(o.subject, o.data); err != nil {
				log.Debug("nats topics: publish refused", "subject", o.subject, "err", err)
				o.c.Finish(nil, backend.ErrUpstreamUnavailable)
				continue
			}
			pubs = append(pubs, o)
		}
	}
	var err error
	switch {
	case t.js != nil || len(pubs)+len(subscribed) == 0:
		// JetStream: each publish has its acknowledgement, and a
		// consumer exists once created.
	case !t.nc.IsConnected():
		// A flush would wait out its timeout; the connection's loss ends
		// the rest (fail).
		err = nats.ErrConnectionClosed
	default:
		err = t.nc.FlushTimeout(t.cfg.Timeout)
	}
	for i, o := range pubs {
		perr := err
		if t.js != nil {
			perr = waitAck(acks[i], t.cfg.Timeout)
		}
		if perr != nil {
			log.Debug("nats topics: publish failed", "subject", o.subject, "err", perr)
			o.c.Finish(nil, backend.ErrUpstreamUnavailable)
			continue
		}
		o.c.Finish(backend.AppendDelivered(nil, t.delivered(o.name)), nil)
	}
	var failed []*sub
	t.mu.Lock()
	for _, tp := range subscribed {
		if tp.gone || tp.live == 0 {
			continue
		}
		if err != nil {
			// NATS may not have the subscription: nothing is promised.
			waiting := tp.waiting
			tp.waiting = nil
			failed = append(failed, waiting...)
			for _, s := range waiting {
				t.removeLocked(s)
			}
			continue
		}
		tp.ready = true
		for _, s := range tp.waiting {
			t.joinLocked(s)
		}
		tp.waiting = nil
	}
	t.mu.Unlock()
	if len(failed) > 0 {
		t.signal()
	}
	for _, s := range failed {
		s.c.Finish(nil, backend.ErrUpstreamUnavailable)
	}
}

// subscribe creates tp's NATS subscription (JetStream: its live ordered
// consumer) and reports whether it did. A topic already ended is skipped;
// a failure ends its waiting subscribers UPSTREAM_UNAVAILABLE.
func (t *Topics) subscribe(log *slog.Logger, tp *topic) bool {
	t.mu.Lock()
	skip := tp.gone || tp.live == 0
	t.mu.Unlock()
	if skip {
		return false
	}
	var err error
	if t.js != nil {
		err = t.consumeLive(tp)
	} else {
		tp.nsub, err = t.nc.Subscribe(tp.subject, func(m *nats.Msg) { t.deliver(tp, m.Data) })
	}
	if err == nil {
		return true
	}
	log.Warn("nats topics: subscribe failed", "topic", tp.name, "err", err)
	t.mu.Lock()
	waiting := tp.waiting
	tp.waiting = nil
	for _, s := range waiting {
		t.removeLocked(s)
	}
	t.mu.Unlock()
	for _, s := range waiting {
		s.c.Finish(nil, backend.ErrUpstreamUnavailable)
	}
	return false
}

// unsubscribe removes tp's NATS subscription or consumer.
func (t *Topics) unsubscribe(tp *topic) {
	if tp.nsub != nil {
		_ = tp.nsub.Unsubscribe()
		tp.nsub = nil
	}
	if tp.cons != nil {
		tp.cons.Stop()
		tp.cons = nil
	}
}

// deliver fans one message of a plain NATS topic out to its subscribers.
// Runs on nats.go's goroutine of the topic's subscription. What is not a
// JSON value (published by something other than an edge) is dropped.
func (t *Topics) deliver(tp *topic, data []byte) {
	if jsonValid(data) {
		tp.fan.Publish(data)
	}
}

// jsonValid reports whether data is one JSON value.
func jsonValid(data []byte) bool { return json.Valid(data) }

// waitAck waits for a JetStream publish acknowledgement.
func waitAck(f jetstream.PubAckFuture, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-tm.C:
		return errors.New("nats topics: no JetStream acknowledgement in time")
	}
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
