package rpc

import (
	"strconv"
	"unicode/utf8"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// Transport is the binding a session serves (CONTRACT.md section 1).
type Transport uint8

const (
	// WebSocket is the cloud data plane binding: $/cancelRequest is honoured.
	WebSocket Transport = iota + 1
	// NDJSON is the stdio and TCP binding: $/cancelRequest is an ordinary envelope.
	NDJSON
)

// Sink is where a session writes its outbound messages. Implemented by the
// transport; called only on the session's loop.
type Sink interface {
	// Send queues one complete JSON-RPC message for the peer; the transport frames
	// it. msg is valid only during the call.
	Send(msg []byte)
	// OutboundBytes reports the bytes queued for the peer and not yet written.
	OutboundBytes() int
	// Writable reports whether the connection is below its soft outbound cap,
	// i.e. whether subscription events may be written now. When it becomes
	// writable again the transport calls Session.Resume.
	Writable() bool
	// OutboundLimit is the most the connection may hold for output, pending
	// bytes and buffered subscription events together (the hard cap,
	// CONTRACT.md section 6). It must not change.
	OutboundLimit() int
}

// Completion is work that a worker hands back to a session's event loop: a
// finished task, later also subscription events. The loop calls Apply.
type Completion interface {
	// Apply applies the completion to its session. Must be called on the loop
	// that owns the session.
	Apply()
}

// Poster hands completions back to the event loop that owns the session.
// Implementations must be safe for concurrent use and must not block.
type Poster interface {
	Post(c Completion)
}

// Session is the protocol state of one connection: the in-flight id table, the
// task slots, generations, and cancellation (CONTRACT.md sections 2-4).
//
// A Session is owned by one event loop. Every method must be called on that
// loop, except where documented otherwise.
type Session struct {
	srv       *Server   // immutable after NewSession
	transport Transport // immutable after NewSession
	sink      Sink      // immutable after NewSession
	post      Poster    // immutable after NewSession
	turn      *Turn     // immutable after NewSession: the loop's (TurnPoster), or nil
	// loops and loop are the event loop post is, if it is one
	// (backend.Homed), for the forwarders (backend.Origin). Immutable
	// after NewSession.
	loops any
	loop  int
	// ctr is where the session counts its requests: the loop's Counters
	// (CountingPoster), or its own. The pointer is immutable after
	// NewSession; the Counters are loop-owned.
	ctr *Counters

	inflight idTable  // loop-owned: tracked requests holding their id
	active   taskList // loop-owned: dispatched tasks holding a slot, until their worker returns
	gen      uint64   // loop-owned: generation of the last dispatched task
	closed   bool     // loop-owned

	subs    map[string]*subscription // loop-owned: subscriptions not ended, by id; lazily made
	nextSub uint64                   // loop-owned: last subscription number
	blocked []*subscription          // loop-owned: live subscriptions with events held back
	// ready are the live subscriptions whose events wait for the
	// transport's next write (DeferringSink, deferred.go). Loop-owned.
	ready []*subscription

	// budget is the connection's output budget, made with its first
	// subscription. The pointer is loop-owned; see budget for its fields.
	budget *budget

	lastMethod *Method           // loop-owned: the method of the last admitted request
	lastNB     bool              // loop-owned: lastMethod is non-blocking (Server.nonBlocking)
	lastFwd    backend.Forwarder // loop-owned: lastMethod's forwarder (Server.forward)
	lastLend   bool              // loop-owned: lastFwd is a backend.Borrower
	free       []*Task           // loop-owned: unary tasks ready for reuse, see newTask
	freeBytes  int               // loop-owned: buffer bytes the tasks in free keep

	// collect, while set, takes the session's answers instead of the sink:
	// the batch being handled, or whose request is being answered.
	collect *reqBatch // loop-owned

	buf  []byte // loop-owned scratch: encoded message
	key  []byte // loop-owned scratch: id identity key
	name []byte // loop-owned scratch: unescaped method name
}

// NewSession returns the session of a new connection. Must be called on the
// connection's event loop.
func (srv *Server) NewSession(t Transport, sink Sink, post Poster) *Session {
	s := &Session{srv: srv, transport: t, sink: sink, post: post}
	if h, ok := post.(backend.Homed); ok {
		s.loops, s.loop = h.Home()
	}
	if tp, ok := post.(TurnPoster); ok {
		s.turn = tp.Turn()
	}
	if cp, ok := post.(CountingPoster); ok {
		s.ctr = cp.Counters()
	}
	if s.ctr == nil {
		s.ctr = srv.NewCounters()
	}
	return s
}

// Stats is a snapshot of a session's bookkeeping.
type Stats struct {
	InFlightIDs int // tracked requests whose id is reserved
	Tasks       int // slots held (running backend calls, including cancelled ones not yet returned)
	// Subscriptions counts subscriptions that have not ended.
	Subscriptions int
}

// Stats returns the session's bookkeeping counts. Must be called on the loop.
func (s *Session) Stats() Stats {
	return Stats{InFlightIDs: s.inflight.len(), Tasks: s.active.n, Subscriptions: len(s.subs)}
}

// Busy reports whether the session has work other than live subscriptions:
// unary calls running or requests not yet answered. Must be called on the loop.
func (s *Session) Busy() bool {
	for t := s.active.head; t != nil; t = t.next {
		if t.sub == nil || !t.sub.answered {
			return true
		}
	}
	return false
}

// HandleMessage classifies one inbound message and acts on it (CONTRACT.md
// sections 2-4). msg is valid only during the call. Must be called on the loop.
func (s *Session) HandleMessage(msg []byte) {
	if s.closed {
		return
	}
	// The envelope is passed on by pointer: copying its 160 bytes into
	// each call was 5% of the proxied path (BenchmarkProxyPipelined).
	env := codec.Classify(msg, s.transport == WebSocket)
	s.handleEnvelope(msg, &env)
}

// handleEnvelope handles a message Classify classified as env; a batch is
// only taken apart with the jsonrpc profile (CONTRACT.md section 10).
func (s *Session) handleEnvelope(msg []byte, env *codec.Envelope) {
	if env.Kind == codec.KindInvalid && s.srv.cfg.Profile == ProfileJSONRPC {
		if isBatch(msg) {
			s.handleBatch(msg)
			return
		}
		if s.notification(msg) {
			return
		}
	}
	s.handle(env)
}

// HandleUnchecked is HandleMessage for a message whose UTF-8 validity the
// transport left unchecked (codec.Reader.DeferUTF8). Classify validates UTF-8
// as part of JSON, so only a message it rejects needs a second look: when msg
// is not valid UTF-8, HandleUnchecked does nothing and returns false, and the
// transport must fail the connection (1007) instead of answering -32700.
// Must be called on the loop.
func (s *Session) HandleUnchecked(msg []byte) bool {
	if s.closed {
		return true
	}
	env := codec.Classify(msg, s.transport == WebSocket)
	if env.Kind == codec.KindParseError && !utf8.Valid(msg) {
		return false
	}
	s.handleEnvelope(msg, &env)
	return true
}

func (s *Session) handle(env *codec.Envelope) {
	switch env.Kind {
	case codec.KindParseError:
		s.nullError(errParse)
	case codec.KindInvalid:
		s.nullError(errInvalidRequest)
	case codec.KindCancel:
		s.cancel(env.IDKind, env.CancelID)
	case codec.KindSubCancel:
		s.cancelSubscription(env.SubscriptionID)
	case codec.KindTracked:
		s.request(env, true)
	case codec.KindUntracked:
		s.request(env, false)
	}
}

// slotsFull reports whether every task slot of the connection is taken.
func (s *Session) slotsFull() bool { return s.active.n >= s.srv.cfg.MaxConnTasks }

// nullError answers with an id-less error, or drops the message silently while
// every slot is busy (CONTRACT.md section 3.2).
func (s *Session) nullError(err error) {
	if s.slotsFull() {
		return
	}
	s.sendError(nil, err)
}

// request admits and dispatches a tracked or untracked request (CONTRACT.md
// sections 2.5 and 3).
func (s *Session) request(env *codec.Envelope, tracked bool) {
	var key idKey
	if tracked {
		var holder *Task
		if key, holder = s.inflight.find(env.IDKind, env.ID, &s.key); holder != nil {
			s.refuse(env, env.ID, errDuplicateID)
			return
		}
	}
	if s.slotsFull() {
		s.refuse(env, env.ID, errBusy)
		return
	}
	if tracked && !env.JSONRPCIs20() {
		s.refuse(env, nil, errInvalidRequest)
		return
	}
	// From here the request owes an answer: admission and the drain flag are
	// one atomic step (Server.admit), so graceful shutdown either sees it as
	// owing or it was refused.
	if !s.admit() {
		s.refuse(env, env.ID, errShuttingDown)
		return
	}
	if err := s.route(env, key, tracked); err != nil {
		s.settled(1)
		s.refuse(env, env.ID, err)
	}
}

// admit is Server.admit, from the loop's Turn when the session has one.
func (s *Session) admit() bool {
	if s.turn != nil {
		return s.turn.admit()
	}
	return s.srv.admit()
}

// settled is Server.settled for requests settled on the loop: into the
// loop's Turn when the session has one.
func (s *Session) settled(n int) {
	if s.turn != nil {
		s.turn.settle(n)
		return
	}
	s.srv.settled(n)
}

// refuse answers a request that is not dispatched with err (to id; nil:
// null) and counts it. Refusals are not the hot path: the method is looked
// up again for its label.
func (s *Session) refuse(env *codec.Envelope, id []byte, err error) {
	var m *Method
	if name := env.MethodName(s.name); name != nil {
		if m = s.lastMethod; m == nil || m.Name != string(name) {
			m = s.srv.cfg.Registry.Lookup(name)
		}
	}
	s.count(m, outcomeOf(err))
	s.sendError(id, err)
}

// route finds the admitted request's method and dispatches it, or answers
// it at once (edge/stats), or returns the error that refuses it.
func (s *Session) route(env *codec.Envelope, key idKey, tracked bool) error {
	var m *Method
	var fwd backend.Forwarder
	lend := false // fwd is a backend.Borrower
	if name := env.MethodName(s.name); name != nil {
		// Clients tend to call the same method again: one comparison
		// instead of map lookups.
		if m = s.lastMethod; m == nil || m.Name != string(name) {
			m = s.srv.cfg.Registry.Lookup(name)
			if m != nil {
				s.lastMethod, s.lastNB, s.lastFwd = m, s.srv.nonBlocking[m], s.srv.forward[m]
				_, s.lastLend = s.lastFwd.(backend.Borrower)
			}
		}
		if m != nil {
			fwd, lend = s.lastFwd, s.lastLend
			if m.Kind == Subscription && s.srv.unaryTwin != nil && s.srv.unaryTwin[m] != nil {
				m = s.srv.unaryTwin[m] // jsonrpc: an http upstream answers it itself (plain.go)
			}
		} else {
			m, fwd = s.srv.adhoc(name)
		}
	}
	if m == nil || (m.Kind == Subscription && (!tracked || (s.srv.subscriber == nil && fwd == nil))) {
		s.srv.logNotFound(env.MethodName(s.name), m, tracked)
		return errMethodNotFound
	}
	if !s.srv.paramsOK(env.Params) {
		return errInvalidParams
	}
	if m.Kind == Subscription && s.collect != nil {
		return errSubscriptionInBatch
	}
	if m.Kind == Local {
		// Like every admitted request it needs a free slot (CONTRACT.md
		// section 3.2), but it is answered at once, so it never holds one.
		switch {
		case m.plain != "":
			s.unsubscribe(env.ID, env.Params, m.plain)
		case m.Name == "edge/whoami":
			s.whoami(env.ID)
		default:
			s.stats(env.ID)
		}
		s.settled(1)
		mc := &s.ctr.Methods[m.countSlot()]
		mc.Outcomes[OutcomeOK]++
		mc.Duration.Observe(0)
		return nil
	}
	if fwd != nil {
		s.dispatch(env, m, key, fwd, lend)
		return nil
	}
	if !s.srv.cfg.Pool.TryAcquire() {
		return errBusy
	}
	s.dispatch(env, m, key, nil, false)
	return nil
}

// dispatch hands an admitted request to a worker, or to fwd when the method
// is forwarded. For a worker the caller holds a global slot; the task takes a
// connection slot and, if tracked (key from idTable.find), its id. lend: fwd
// is a backend.Borrower, lent the params.
func (s *Session) dispatch(env *codec.Envelope, m *Method, key idKey, fwd backend.Forwarder, lend bool) {
	s.gen++
	t := s.newTask()
	t.sess, t.gen, t.method, t.start = s, s.gen, m, s.ctr.Now
	t.nonBlocking = s.lastNB && s.lastMethod == m
	if b := s.collect; b != nil {
		t.batch = b
		b.owed++
	}
	// The params of a call forwarded to a Borrower (lend) are lent to it,
	// not copied: a byte-stream link on this loop writes them out at once.
	n := len(env.ID)
	if lend {
		t.buf = append(t.buf[:0], env.ID...)
		t.id, t.params, t.lent = t.buf[:n:n], env.Params, true
	} else {
		t.buf = append(append(t.buf[:0], env.ID...), env.Params...)
		t.id, t.params = t.buf[:n:n], t.buf[n:]
	}
	if key.tracked() {
		t.key = own(key, s.key)
		s.inflight.put(t.key, t)
	}
	if m.Kind == Subscription {
		s.newSubscription(t)
	}
	s.active.push(t)
	if fwd != nil {
		t.ticket = fwd.Forward(t, t.origin())
		if t.lent {
			t.params, t.lent = nil, false // the client's message is not kept
		}
		return
	}
	if s.turn != nil {
		s.turn.add(t)
		return
	}
	s.srv.cfg.Pool.Submit(t)
}

// Complete applies a finished task that a worker posted back. The task's slot
// is freed now that its worker has returned. Its result is written only if the
// request is still the live owner of its id: a cancelled request, or one whose
// id has been taken by a newer request (another generation), is dropped and can
// neither answer, release nor cancel anything else (CONTRACT.md section 4).
// Must be called on the loop, once per dispatched task, also after Close.
func (s *Session) Complete(t *Task) {
	if t.sub != nil {
		s.completeSubscription(t)
		return
	}
	s.active.remove(t)
	if s.closed || t.cancelled {
		s.freeTask(t)
		return
	}
	// The id is released just before the response is written, so a client
	// that sees the response may reuse it at once (CONTRACT.md section 3.3).
	if !s.releaseID(t) {
		s.freeTask(t)
		return // stale: the id belongs to a newer request now
	}
	if t.batch != nil {
		s.answerInBatch(t, func() { s.answer(t) })
	} else {
		s.answer(t)
	}
	s.freeTask(t)
}

// answer writes the response of a completed unary task.
func (s *Session) answer(t *Task) {
	s.countTask(t, outcomeOf(t.err))
	if t.err != nil {
		s.sendError(t.id, t.err)
	} else {
		s.sendResult(t.id, t.result)
	}
}

// cancel handles $/cancelRequest (CONTRACT.md section 4): the request's id is
// freed at once and its backend context cancelled; its slot stays taken until
// the worker returns. Unknown ids are a silent no-op.
func (s *Session) cancel(kind codec.IDKind, id []byte) {
	_, t := s.inflight.find(kind, id, &s.key)
	if t == nil || t.sub != nil {
		return // unknown, completed, or establishing a subscription: no-op
	}
	s.inflight.del(t.key)
	s.countTask(t, OutcomeCancelled)
	t.cancelled = true
	t.abort()
	s.answerInBatch(t, func() {
		if s.srv.cfg.CancelReply == CancelReplyError {
			s.sendError(t.id, errCancelled)
		}
	})
}

// Close ends the session: every running backend call is cancelled and every id
// released. Tasks still running free their slots when they complete; their
// results are dropped. Must be called on the loop.
func (s *Session) Close() {
	if s.closed {
		return
	}
	s.closed = true
	for t := s.active.head; t != nil; t = t.next {
		if t.sub == nil && !t.cancelled {
			s.countTask(t, OutcomeCancelled) // never answered
		}
		t.cancelled = true
		t.abort()
		if t.sub != nil {
			if t.sub.state != subEnded {
				t.sub.to(subEnded)
				t.sub.st.close()
			}
			s.answered(t.sub, OutcomeCancelled)
		}
	}
	s.releaseFree()
	s.inflight, s.subs, s.blocked, s.ready = idTable{}, nil, nil, nil
	s.buf, s.key, s.name = nil, nil, nil
}

// Trim releases memory the session keeps for the next burst of requests: the
// id table when no id is in flight, the rings of subscriptions holding no
// event, and scratch buffers grown by a large message. The transport calls it once the connection has been quiet for a
// while, so idle connections hold only what they need. Must be called on the loop.
func (s *Session) Trim() {
	s.releaseFree()
	for _, sub := range s.subs {
		sub.st.trim()
	}
	s.inflight.ints.trim()
	if len(s.inflight.strs) == 0 {
		s.inflight.strs = nil
	}
	const keep = 4 << 10
	if cap(s.buf) > keep {
		s.buf = nil
	}
	if cap(s.key) > keep {
		s.key = nil
	}
	if cap(s.name) > keep {
		s.name = nil
	}
}

// stats answers edge/stats inline with this connection's bookkeeping, not
// counting the stats request itself (CONTRACT.md section 8).
func (s *Session) stats(id []byte) {
	st := s.Stats()
	b := append(s.buf[:0], `{"inFlightIds":`...)
	b = strconv.AppendInt(b, int64(st.InFlightIDs), 10)
	b = append(b, `,"tasks":`...)
	b = strconv.AppendInt(b, int64(st.Tasks), 10)
	b = append(b, `,"subscriptions":`...)
	b = strconv.AppendInt(b, int64(st.Subscriptions), 10)
	b = append(b, `,"outboundBytes":`...)
	b = strconv.AppendInt(b, int64(s.sink.OutboundBytes()), 10)
	b = append(b, '}')
	// Encode the response after the result bytes, then send that part.
	n := len(b)
	b = codec.AppendResult(b, id, b[:n])
	s.buf = b
	s.send(b[n:])
}

// sendError answers id (nil: null) with err as a JSON-RPC error object.
func (s *Session) sendError(id []byte, err error) {
	s.buf = AppendErrorResponse(s.buf[:0], id, err)
	s.send(s.buf)
}

// send writes an answer. On a connection with subscriptions the answer and
// everything held for output must fit the connection's budget: if they do
// not, the subscriptions holding the most buffered events end SLOW_CONSUMER
// first (see budget). What still does not fit is the transport's to refuse
// (its hard cap). msg may alias s.buf.
func (s *Session) send(msg []byte) {
	if s.collect != nil {
		s.collect.add(msg)
		return
	}
	if len(s.ready) > 0 {
		s.sendReady() // events delivered before the answer go first (deferred.go)
	}
	b := s.budget
	if b == nil {
		s.sink.Send(msg)
		return
	}
	if over := int64(s.sink.OutboundBytes()+len(msg)) + b.held.Load() - b.limit; over > 0 {
		msg = append([]byte(nil), msg...) // ending subscriptions writes through s.buf
		s.shed(over)
	}
	s.sink.Send(msg)
	b.observe(s.sink.OutboundBytes())
}

// shed ends live subscriptions with SLOW_CONSUMER, the one holding the most
// buffered event bytes first, until over bytes are freed or none holds any.
func (s *Session) shed(over int64) {
	for over > 0 {
		var victim *subscription
		most := 0
		for _, sub := range s.subs {
			if sub.state != subLive {
				continue
			}
			sub.st.mu.Lock()
			n := sub.st.bytes
			sub.st.mu.Unlock()
			if n > most {
				victim, most = sub, n
			}
		}
		if victim == nil {
			return
		}
		s.endSubscription(victim, reasonSlowConsumer)
		over -= int64(most)
	}
}

// isObject reports whether a raw JSON value is an object. The classifier has
// already validated it, so the first byte decides.
func isObject(v []byte) bool { return firstByte(v) == '{' }

// firstByte returns the first byte of v that is not JSON whitespace, or 0.
func firstByte(v []byte) byte {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// HandleParseError answers input that could not be framed as a message, such
// as an over-long NDJSON line, with -32700 Parse error, id null (CONTRACT.md
// section 1.2). Must be called on the loop.
func (s *Session) HandleParseError() {
	if !s.closed {
		s.nullError(errParse)
	}
}

// HandleRateLimited answers a message the transport's rate limit refused
// (CONTRACT.md section 11.4): a request (it has an id) gets -32000 Rate
// limited {"code":"RATE_LIMITED"} and reaches no backend; anything else is
// dropped. Must be called on the loop.
func (s *Session) HandleRateLimited(msg []byte) {
	if s.closed {
		return
	}
	env := codec.Classify(msg, s.transport == WebSocket)
	if (env.Kind == codec.KindTracked || env.Kind == codec.KindUntracked) && env.ID != nil {
		s.refuse(&env, env.ID, errRateLimited)
	}
}
