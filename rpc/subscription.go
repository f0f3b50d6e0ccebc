package rpc

import (
	"context"
	"strconv"
	"sync"

	"github.com/openengine/edge/codec"
)

// subState is the lifecycle of a subscription. Legal transitions:
//
//	establishing -> live     the success response is written
//	establishing -> ended    establishment failed, subscription/cancel, or the connection closed
//	live         -> ended    done (producer returned, every event delivered), SLOW_CONSUMER,
//	                         subscription/cancel, shutdown, or the connection closed
//
// ended is final. Every change goes through subscription.to, which checks it.
type subState uint8

const (
	subEstablishing subState = iota
	subLive
	subEnded
)

func (st subState) String() string {
	switch st {
	case subEstablishing:
		return "establishing"
	case subLive:
		return "live"
	case subEnded:
		return "ended"
	}
	return "subState(" + strconv.Itoa(int(st)) + ")"
}

// canGo reports whether the table above allows from -> to.
func (from subState) canGo(to subState) bool {
	switch from {
	case subEstablishing:
		return to == subLive || to == subEnded
	case subLive:
		return to == subEnded
	}
	return false
}

// to moves sub to state next. A transition the table of subState does not
// allow is a bug in the session, which can no longer tell what it owes the
// client: it panics, as x/tools' jsonrpc2 does when its in-flight state
// breaks an invariant. Must be called on the loop.
func (sub *subscription) to(next subState) {
	if !sub.state.canGo(next) {
		panic("rpc: subscription " + sub.id + ": illegal transition " + sub.state.String() + " -> " + next.String())
	}
	sub.state = next
	if next == subEnded {
		sub.task.sess.ctr.Subscriptions--
	}
}

// Close reasons of subscription/closed (CONTRACT.md section 5).
type closeReason uint8

const (
	reasonNone         closeReason = iota // no notification (client cancel, connection closed)
	reasonDone                            // "done"
	reasonSlowConsumer                    // "SLOW_CONSUMER"
	reasonUpstreamLost                    // "UPSTREAM_LOST"
)

func (r closeReason) String() string {
	switch r {
	case reasonDone:
		return "done"
	case reasonSlowConsumer:
		return "SLOW_CONSUMER"
	case reasonUpstreamLost:
		return "UPSTREAM_LOST"
	}
	return ""
}

// subscription is one subscription of a session. The stream is shared with the
// producer; everything else is loop-owned.
type subscription struct {
	id    string // immutable: unique per connection
	idTok []byte // immutable: id as a JSON string token
	ns    string // immutable: a plain JSON-RPC subscription's namespace, "" for OECP (plain.go)
	head  string // immutable: with ns, its notifications' beginning (codec.PlainEventHead)
	task  *Task  // immutable: runs the producer and holds the slot
	st    stream

	state        subState    // loop-owned: changed only by to
	answered     bool        // loop-owned: the establishing request got its response
	producerDone bool        // loop-owned: the producer returned (its task completed)
	blocked      bool        // loop-owned: in Session.blocked, waiting for the socket
	ready        bool        // loop-owned: in Session.ready, its events wait for the transport's write (deferred.go)
	endReason    closeReason // loop-owned: notification owed once the establishing request is answered
	lastCursor   []byte      // loop-owned: cursor of the last event handed to the socket
}

// slot is one buffered event. Its buffers are reused for the next event in
// the slot unless they grew past maxSlotKeep, or are an event shared with
// other streams (EmitShared), which the slot only references.
type slot struct {
	cursor, body []byte
	shared       bool
}

// maxSlotKeep is the largest event body buffer a slot keeps once its event
// was delivered: small events (a fan-out's) reuse their buffers, large ones
// do not hold memory the connection's budget no longer counts.
const maxSlotKeep = 1 << 10

// trim releases the ring of a stream that holds no event and took none since
// the last trim. A subscriber never speaks, so its connection looks idle to
// the transport's sweep however many events it receives: releasing the ring
// of a live fan-out member at every sweep made the next events allocate it
// and its slots' buffers again. Must be called on the loop.
func (st *stream) trim() {
	st.mu.Lock()
	if st.n == 0 && !st.used {
		st.ring, st.head = nil, 0
	}
	st.used = false
	st.mu.Unlock()
}

// stream is the hand-off between a subscription's producer (a worker) and its
// loop: a bounded ring of undelivered events plus the establishment result.
// The producer never touches session state; it posts the stream to the loop,
// which drains it in Apply. Safe for concurrent use.
type stream struct {
	sub      *subscription // immutable
	post     Poster        // immutable
	max      int           // immutable: capacity in events
	maxBytes int           // immutable: capacity in body bytes
	// paced is what EmitWait lets the buffer hold: a producer paced by its
	// consumer only needs to stay ahead of the socket.
	paced  int     // immutable
	budget *budget // immutable: the connection's, shared by its subscriptions

	mu        sync.Mutex
	ring      []slot        // guarded by mu; grows to max
	head, n   int           // guarded by mu
	bytes     int           // guarded by mu: body bytes buffered
	result    []byte        // guarded by mu: establishment result, until taken
	overflow  bool          // guarded by mu: the buffer overflowed
	closed    bool          // guarded by mu: no more events are accepted
	scheduled bool          // guarded by mu: the stream is queued on the loop
	used      bool          // guarded by mu: an event was pushed since the last trim
	room      chan struct{} // signalled (cap 1) when the loop frees room
}

// ID implements backend.Stream.
func (st *stream) ID() string { return st.sub.id }

// Namespace implements backend.Stream.
func (st *stream) Namespace() string { return st.sub.ns }

// Establish implements backend.Stream.
func (st *stream) Establish(result []byte) {
	st.mu.Lock()
	st.result = append(make([]byte, 0, len(result)), result...)
	post := st.schedule()
	st.mu.Unlock()
	if post {
		st.post.Post(st)
	}
}

// schedule marks the stream queued and reports whether the caller must post
// it. Called with mu held.
func (st *stream) schedule() bool {
	if st.scheduled {
		return false
	}
	st.scheduled = true
	return true
}

// Emit implements backend.Stream: an event that does not fit the
// subscription's buffer or the connection's budget ends the subscription
// SLOW_CONSUMER (CONTRACT.md sections 5 and 6).
func (st *stream) Emit(cursor, body []byte) bool { return st.emit(cursor, body, false) }

// EmitShared implements backend.SharedEmitter: Emit, keeping the caller's
// cursor and body instead of copying them. The budget counts the body as if
// it were copied.
func (st *stream) EmitShared(cursor, body []byte) bool { return st.emit(cursor, body, true) }

func (st *stream) emit(cursor, body []byte, shared bool) bool {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return false
	}
	ok := st.n < st.max && st.bytes+len(body) <= st.maxBytes && st.budget.take(len(body))
	if ok {
		st.push(cursor, body, shared)
	} else {
		st.overflow = true
		st.closed = true
	}
	post := st.schedule()
	st.mu.Unlock()
	if post {
		st.post.Post(st)
	}
	return ok
}

// EmitWait implements backend.Stream: it waits while the subscription holds
// its paced window or the connection's budget has no room, parked on a
// channel the loop signals when it frees room. An event larger than the whole
// budget can never be buffered and ends the subscription SLOW_CONSUMER.
func (st *stream) EmitWait(ctx context.Context, cursor, body []byte) bool {
	for {
		st.mu.Lock()
		if st.closed {
			st.mu.Unlock()
			return false
		}
		if !st.budget.fits(len(body)) {
			st.mu.Unlock()
			return st.Emit(cursor, body)
		}
		if st.n < st.max && (st.n == 0 || st.bytes+len(body) <= st.paced) {
			ok := st.budget.take(len(body))
			if !ok {
				// The connection is short: wait for room anywhere on it.
				st.budget.wait(st)
				ok = st.budget.take(len(body))
			}
			if ok {
				st.push(cursor, body, false)
				post := st.schedule()
				st.mu.Unlock()
				if post {
					st.post.Post(st)
				}
				return true
			}
		}
		st.mu.Unlock()
		select {
		case <-st.room:
		case <-ctx.Done():
			return false
		}
	}
}

// push appends one event to the ring, reusing slot buffers, or referencing
// cursor and body when they are shared. Called with mu held.
func (st *stream) push(cursor, body []byte, shared bool) {
	if st.n == len(st.ring) {
		st.grow()
	}
	i := (st.head + st.n) % len(st.ring)
	s := &st.ring[i]
	if shared {
		s.cursor, s.body, s.shared = cursor, body, true
	} else {
		if s.shared {
			// Another event's memory: never appended to.
			s.cursor, s.body, s.shared = nil, nil, false
		}
		s.cursor = append(s.cursor[:0], cursor...)
		s.body = append(s.body[:0], body...)
	}
	st.n++
	st.bytes += len(body)
	st.used = true
}

func (st *stream) grow() {
	size := max(8, 2*len(st.ring))
	size = min(size, st.max)
	ring := make([]slot, size)
	for i := 0; i < st.n; i++ {
		ring[i] = st.ring[(st.head+i)%len(st.ring)]
	}
	st.ring, st.head = ring, 0
}

// close stops the stream: no more events are accepted and buffered ones are
// dropped, their bytes given back to the connection's budget. Must be called
// on the loop.
func (st *stream) close() {
	st.mu.Lock()
	st.closed = true
	freed := st.bytes
	st.budget.give(freed)
	st.ring, st.head, st.n, st.bytes = nil, 0, 0, 0
	st.mu.Unlock()
	st.signalRoom()
	if freed > 0 {
		st.budget.wake()
	}
}

func (st *stream) signalRoom() {
	select {
	case st.room <- struct{}{}:
	default:
	}
}

// Apply drains the stream into the session. Must be called on the loop.
func (st *stream) Apply() { st.sub.task.sess.deliver(st.sub) }

// deliver applies what the producer handed over: the establishment result,
// then as many events as the connection can take (CONTRACT.md section 5).
// Must be called on the loop.
func (s *Session) deliver(sub *subscription) {
	st := &sub.st
	st.mu.Lock()
	st.scheduled = false
	result := st.result
	st.result = nil
	overflow := st.overflow
	st.mu.Unlock()
	if result != nil && !sub.answered {
		s.established(sub, result)
	}
	if s.closed || sub.state != subLive {
		return
	}
	if overflow {
		s.endSubscription(sub, reasonSlowConsumer)
		return
	}
	s.drainEvents(sub)
}

// established answers the establishing request with its result. The request's
// id is released now; the subscription becomes live unless it already ended
// (a subscription/cancel that raced establishment), in which case the request
// still gets its answer but no event follows.
func (s *Session) established(sub *subscription, result []byte) {
	s.answered(sub, OutcomeOK)
	t := sub.task
	if s.closed {
		return
	}
	s.releaseID(t)
	if sub.state == subEstablishing {
		sub.to(subLive)
	}
	if sub.ns != "" {
		result = sub.idTok // the client's id, not the upstream's (plain.go)
	}
	s.buf = codec.AppendResult(s.buf[:0], t.id, result)
	s.send(s.buf)
	if sub.endReason != reasonNone {
		// Ended while establishing (shutdown): the close follows the response.
		s.closedNotice(sub, sub.endReason, nil)
	}
}

// releaseID frees the id of t if t still owns it (same id, same generation)
// and reports whether it did; an untracked request owns no id and always does.
func (s *Session) releaseID(t *Task) bool {
	if !t.key.tracked() {
		return true
	}
	if cur, ok := s.inflight.get(t.key); ok && cur.gen == t.gen {
		s.inflight.del(t.key)
		return true
	}
	return false
}

// drainEvents writes buffered events while the connection is writable. A
// DeferringSink takes them at its write instead (SendEvents). Must be called
// on the loop.
func (s *Session) drainEvents(sub *subscription) {
	if ds, ok := s.sink.(DeferringSink); ok {
		s.deferEvents(ds, sub)
		return
	}
	st := &sub.st
	st.mu.Lock()
	delivered := 0
	for st.n > 0 && s.sink.Writable() {
		e := &st.ring[st.head]
		// The event's bytes move from the buffer to the transport: given
		// back first, so that the budget never counts them twice.
		st.bytes -= len(e.body)
		st.budget.give(len(e.body))
		if sub.ns == "" {
			s.buf = codec.AppendEvent(s.buf[:0], sub.idTok, e.body)
		} else {
			s.buf = codec.AppendEventWith(s.buf[:0], sub.head, sub.idTok, e.body)
		}
		sub.lastCursor = append(sub.lastCursor[:0], e.cursor...)
		switch {
		case e.shared:
			// Let the event go once every member wrote it.
			e.cursor, e.body, e.shared = nil, nil, false
		case cap(e.body) > maxSlotKeep:
			e.body = nil // the budget counts buffered events, not spare capacity
		}
		st.head = (st.head + 1) % len(st.ring)
		st.n--
		// Not under the lock: the transport may end the session from
		// inside Send (its hard cap), and Close takes the lock.
		st.mu.Unlock()
		s.sink.Send(s.buf)
		delivered++
		st.mu.Lock()
	}
	remaining := st.n
	st.mu.Unlock()
	s.ctr.EventsDelivered += uint64(delivered)
	if s.closed {
		return
	}
	if delivered > 0 {
		st.budget.observe(s.sink.OutboundBytes())
		st.signalRoom()
		st.budget.wake()
	}
	s.settle(sub, remaining)
}

// settle follows a delivery to sub: with remaining events held back it
// waits for Resume (blocked), and with none left and its producer done it
// ends. Must be called on the loop.
func (s *Session) settle(sub *subscription, remaining int) {
	if remaining > 0 {
		if !sub.blocked {
			sub.blocked = true
			s.blocked = append(s.blocked, sub)
		}
		return
	}
	if sub.producerDone {
		s.endSubscription(sub, producerReason(sub.task.err))
	}
}

// Resume delivers events held back while the connection was over its soft
// outbound cap. The transport calls it once the connection is writable again.
// Must be called on the loop.
func (s *Session) Resume() {
	if s.closed {
		return
	}
	if s.budget != nil {
		s.budget.observe(s.sink.OutboundBytes())
	}
	if len(s.blocked) == 0 {
		return
	}
	blocked := s.blocked
	s.blocked = nil
	for i, sub := range blocked {
		blocked[i] = nil
		sub.blocked = false
		if sub.state == subLive {
			s.drainEvents(sub)
		}
	}
}

// endSubscription ends sub: the producer is cancelled, buffered events are
// dropped, and unless reason is reasonNone the client gets subscription/closed
// with the cursor of the last event handed to the socket. The slot is freed
// once the producer has returned too. Must be called on the loop.
func (s *Session) endSubscription(sub *subscription, reason closeReason) {
	if sub.state == subEnded {
		return
	}
	establishing := sub.state == subEstablishing
	if sub.ready && !establishing {
		// Events delivered before the end go out, as they would have
		// without a DeferringSink.
		s.writeEvents(s.sink.(DeferringSink), sub)
	}
	sub.to(subEnded)
	if reason == reasonSlowConsumer {
		s.ctr.SlowSubscriptions++
	}
	sub.st.close()
	sub.task.abort()
	delete(s.subs, sub.id)
	if establishing {
		// The notification may not precede the response: it is owed until then.
		sub.endReason = reason
	} else if reason != reasonNone && !s.closed {
		s.closedNotice(sub, reason, sub.lastCursor)
	}
	if sub.producerDone {
		s.active.remove(sub.task)
	}
}

// closedNotice tells the client that the server ended sub for reason:
// subscription/closed, or a plain subscription's error notification
// (plain.go). Must be called on the loop.
func (s *Session) closedNotice(sub *subscription, reason closeReason, cursor []byte) {
	if len(s.ready) > 0 {
		s.sendReady() // the events delivered before it go first
	}
	if sub.ns != "" {
		s.plainEnd(sub, reason)
		return
	}
	s.buf = codec.AppendSubscriptionClosed(s.buf[:0], sub.idTok, reason.String(), cursor)
	s.sink.Send(s.buf)
}

// completeSubscription applies the return of a subscription's producer.
func (s *Session) completeSubscription(t *Task) {
	sub := t.sub
	sub.producerDone = true
	if s.closed || sub.state == subEnded {
		if sub.answered || s.closed {
			s.active.remove(t)
			return
		}
	}
	if !sub.answered {
		// The producer returned without establishing: the request fails, or,
		// if the subscription was cancelled meanwhile, it is a cancelled
		// request (CONTRACT.md section 4: nothing, or one -32800); if
		// shutdown ended it, the request is refused as shutdown refuses new ones.
		err := t.err
		if err == nil {
			err = errNotEstablished
		}
		switch {
		case sub.state != subEnded:
			s.answered(sub, outcomeOf(err))
		case sub.endReason != reasonNone:
			s.answered(sub, OutcomeError)
		default:
			s.answered(sub, OutcomeCancelled)
		}
		if s.releaseID(t) {
			switch {
			case sub.state != subEnded:
				s.sendError(t.id, err)
			case sub.endReason != reasonNone:
				s.sendError(t.id, errShuttingDown)
			case s.srv.cfg.CancelReply == CancelReplyError:
				s.sendError(t.id, errCancelled)
			}
		}
		if sub.state != subEnded {
			sub.to(subEnded)
			sub.st.close()
			delete(s.subs, sub.id)
		}
		s.active.remove(t)
		return
	}
	// Established and still live: "done" once every buffered event is out.
	s.drainEvents(sub)
}

// cancelSubscription handles subscription/cancel (CONTRACT.md section 2.3):
// inline, no reply, no subscription/closed; unknown ids are a no-op.
func (s *Session) cancelSubscription(tok []byte) {
	if len(s.subs) == 0 {
		return
	}
	name, ok := codec.AppendUnquote(s.name[:0], tok)
	if !ok {
		return
	}
	s.name = name
	if sub := s.subs[string(name)]; sub != nil {
		s.endSubscription(sub, reasonNone)
	}
}

// EndSubscriptions ends every live subscription with subscription/closed
// "done" (graceful shutdown, CONTRACT.md section 9); one still establishing
// gets its answer first. Must be called on the loop.
func (s *Session) EndSubscriptions() {
	for _, sub := range s.subs {
		s.endSubscription(sub, reasonDone)
	}
}

// GoAway settles everything the session still owes before graceful shutdown
// closes the connection (CONTRACT.md section 9): every request still running
// is cancelled and answered SERVER_SHUTTING_DOWN, a subscription still
// establishing is refused the same way, and live subscriptions end with
// subscription/closed "done". Nothing accepted is left without its answer.
// Must be called on the loop.
func (s *Session) GoAway() {
	if s.closed {
		return
	}
	for t, next := s.active.head, (*Task)(nil); t != nil; t = next {
		next = t.next
		switch {
		case t.cancelled:
		case t.sub == nil:
			s.countTask(t, OutcomeError) // SERVER_SHUTTING_DOWN
			t.cancelled = true
			t.abort()
			s.answerInBatch(t, func() {
				if s.releaseID(t) {
					s.sendError(t.id, errShuttingDown)
				}
			})
		case !t.sub.answered:
			s.answered(t.sub, OutcomeError) // SERVER_SHUTTING_DOWN
			s.endSubscription(t.sub, reasonNone)
			if s.releaseID(t) {
				s.sendError(t.id, errShuttingDown)
			}
		}
	}
	s.EndSubscriptions()
}

// answered records that sub's establishing request got (or will never get)
// its answer, and counts it with outcome o.
func (s *Session) answered(sub *subscription, o Outcome) {
	if !sub.answered {
		sub.answered = true
		s.srv.settled(1)
		s.countTask(sub.task, o)
	}
}

// newSubscription registers a subscription for task t; it is live (cancellable)
// from now on, before its establishment runs.
func (s *Session) newSubscription(t *Task) *subscription {
	s.nextSub++
	id := "s" + strconv.FormatUint(s.nextSub, 10)
	ns := t.method.plain
	if ns != "" {
		id = plainID(s.nextSub)
	}
	if s.budget == nil {
		s.budget = &budget{limit: int64(s.sink.OutboundLimit())}
	}
	sub := &subscription{id: id, idTok: []byte(`"` + id + `"`), ns: ns, task: t}
	if ns != "" {
		sub.head = s.srv.plainHead(ns)
	}
	maxBytes := s.srv.cfg.SubscriptionBufferBytes
	sub.st = stream{sub: sub, post: s.post, max: s.srv.cfg.SubscriptionBuffer,
		maxBytes: maxBytes, paced: min(maxBytes, pacedWindow), budget: s.budget,
		room: make(chan struct{}, 1)}
	if s.subs == nil {
		s.subs = make(map[string]*subscription)
	}
	s.subs[id] = sub
	t.sub = sub
	s.ctr.Subscriptions++
	return sub
}
