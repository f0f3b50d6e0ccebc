package upstream

import (
	"log/slog"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// Why an upstream message was dropped (CONTRACT.md section 10).
const (
	dropBadJSON     = "not a JSON-RPC message"
	dropUnknownID   = "answer to an unknown id"
	dropRequest     = "request from the upstream"
	dropTooLong     = "message over the size limit"
	dropUnknownNote = "unknown notification"
	dropBadSub      = "subscription result without a subscriptionId"
	dropOrphaned    = "event of a subscription cancelled at establishment"
	dropBadError    = "an error member that is not an object"
)

// handle applies one message from the upstream. Runs where the link reads:
// its event loop (byte-stream links), nats.go's delivery goroutine (NATS);
// msg is valid only during the call. Nothing here blocks: calls are
// finished and events emitted through the gateway's non-blocking hand-offs
// (on the loop of a call's own session, a post to the queue that the loop
// applies at the end of this turn).
func (l *link) handle(msg []byte) {
	env, ok := parseEnvelope(msg)
	if !ok {
		l.drop(dropBadJSON)
		return
	}
	switch {
	case env.Method != nil && env.ID != nil:
		l.refuse(env.ID)
	case env.Method != nil:
		l.notification(env.Method, env.Params)
	case env.ID != nil && (env.Result != nil) != (env.Error != nil):
		l.response(env.ID, env.Result, env.Error)
	default:
		l.drop(dropBadJSON)
	}
}

// parseEnvelope reads the members of a JSON-RPC 2.0 message that handle
// acts on; false when msg is not one.
func parseEnvelope(msg []byte) (codec.Message, bool) { return codec.ParseMessage(msg) }

// refuse answers a request from the upstream with -32601: edge serves no
// methods to its upstreams.
func (l *link) refuse(id []byte) {
	if id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') {
		l.drop(dropBadJSON)
		return
	}
	l.drop(dropRequest)
	if l.nats != nil {
		return // a worker has no business asking edge anything
	}
	msg := codec.AppendError(nil, id, codec.CodeMethodNotFound, "Method not found", "", nil)
	l.lock()
	if l.up_ {
		l.appendLocked(msg)
		l.owedLocked() // an upstream that asks and never reads is closed
	}
	l.unlock()
	l.signal()
}

// response applies the answer to the call with upstream id idTok.
func (l *link) response(idTok, result, errObj []byte) {
	id, ok := codec.ParseUint(idTok)
	if !ok {
		l.drop(dropUnknownID)
		return
	}
	l.answer(id, result, errObj)
}

// answer applies the answer to the call with upstream id id: a unary call
// finishes, a subscription is established (or fails). The answer to a call
// that timed out is counted late; when it establishes a subscription nobody
// wants (timed out, or cancelled while establishing), the subscription is
// cancelled at the upstream (orphaned).
func (l *link) answer(id uint64, result, errObj []byte) {
	var f finish
	orphaned := false // a subscription/cancel was queued: the only output an answer causes
	l.lock()
	e := l.calls.get(id)
	switch {
	case e != nil && (e.state == callUnsubscribing || e.state == callOrphaned) && e.plain() != "":
		// The answer to NS_unsubscribe (subCancelLocked filed the entry
		// under its id): whatever it says, the subscription is gone.
		l.moveLocked(e, callEnded, byAnswer, nil, nil)
		l.unlock()
		return
	case e == nil || e.state == callLive || e.state == callOrphaned:
		l.unlock()
		l.drop(dropUnknownID)
		return
	case e.state == callExpired:
		if sub, ok := l.subKey(e, result); ok && errObj == nil {
			e.upSub = sub
			l.moveLocked(e, callOrphaned, byAnswer, nil, nil)
			orphaned = true
		} else {
			l.moveLocked(e, callEnded, byAnswer, nil, nil)
		}
		l.unlock()
		l.up.late.Add(1) // the answer to a call that timed out: not garbage
		if orphaned {
			l.signal()
		}
		return
	case e.state == callDropped:
		if sub, ok := l.subKey(e, result); ok && errObj == nil {
			// Cancelled while establishing: the upstream's new
			// subscription is not wanted.
			e.upSub = sub
			f = l.moveLocked(e, callOrphaned, byAnswer, nil, nil)
			orphaned = true
		} else {
			f = l.moveLocked(e, callEnded, byAnswer, nil, nil)
		}
	case errObj != nil:
		err := l.answerErrorOf(e, errObj)
		f = l.moveLocked(e, callEnded, byAnswer, nil, err)
		if err == errUpstreamProtocol {
			l.unlock()
			l.drop(dropBadError)
			f.do()
			return
		}
	case e.state == callSent:
		f = l.moveLocked(e, callEnded, byAnswer, result, nil)
	default: // establishing
		// A subscription is established: its id is mapped to edge's own
		// (a plain one's result is the id itself, which the client does
		// not see: it gets edge's).
		sub, ok := l.subKey(e, result)
		if !ok {
			f = l.moveLocked(e, callEnded, byAnswer, nil, errUpstreamProtocol)
			l.unlock()
			l.drop(dropBadSub)
			f.do()
			return
		}
		e.upSub = sub
		st := e.stream
		plain := e.plain() != ""
		l.moveLocked(e, callLive, byAnswer, nil, nil)
		l.unlock()
		if plain {
			st.Establish(result)
		} else {
			st.Establish(rewriteSubscriptionID(result, st.ID()))
		}
		return
	}
	l.unlock()
	if orphaned {
		l.signal()
	}
	f.do()
}

// errUpstreamProtocol answers a call whose upstream answer breaks JSON-RPC
// in a way the client would see, or a subscription request whose result has
// no usable subscriptionId: -32603 UPSTREAM_PROTOCOL.
var errUpstreamProtocol = &backend.Error{Code: backend.CodeInternal, Message: "Internal error", DataCode: "UPSTREAM_PROTOCOL"}

// answerError is the error a call is answered with for its upstream
// answer's error member errObj (raw JSON), for every transport: the object,
// passed through byte for byte (a *backend.RawError that holds errObj
// itself); anything else (null, 5, a string) is no JSON-RPC error
// (JSON-RPC 2.0 section 5.1) and would reach the client as its error, so
// the call is answered errUpstreamProtocol instead.
func answerError(errObj []byte) error {
	if len(errObj) == 0 || errObj[0] != '{' {
		return errUpstreamProtocol
	}
	return &backend.RawError{Object: errObj}
}

// answerErrorOf is answerError for the answer of entry e: the error object
// is copied, as the call's Finish keeps it until its loop applies it, but
// for a unary call finished on the loop as the answer is read
// (backend.LoopCall), which writes it out and keeps nothing: that one
// refers to the read buffer, through the reader's scratch error.
func (l *link) answerErrorOf(e *entry, errObj []byte) error {
	if !e.here || e.stream != nil || len(errObj) == 0 || errObj[0] != '{' {
		return answerError(append([]byte(nil), errObj...))
	}
	l.rawErr.Object = errObj
	return &l.rawErr
}

// notification applies an event or a subscription/closed.
func (l *link) notification(method, params []byte) {
	switch {
	case codec.KeyIs(method, "event"):
		l.event(params)
	case codec.KeyIs(method, "subscription/closed"):
		l.closed(params)
	case !l.plainEvent(method, params):
		l.drop(dropUnknownNote)
	}
}

// event passes an event on to its subscription: the subscriptionId is
// edge's, every other member of params goes through byte for byte.
func (l *link) event(params []byte) {
	sub, cursor, body, ok := l.parseEvent(params)
	if !ok {
		l.drop(dropBadJSON)
		return
	}
	l.lock()
	l.emitLocked(l.calls.subs[string(sub)], cursor, body)
}

// emitLocked passes an event on to the subscription of entry e (nil: none)
// and releases mu. An event of an orphaned subscription is dropped and
// counted; one of no subscription is ignored: cancelled a moment ago, at
// most one event may still arrive (CONTRACT.md section 2.3).
func (l *link) emitLocked(e *entry, cursor, body []byte) {
	var st backend.Stream
	orphaned := false
	if e != nil {
		switch e.state {
		case callLive:
			st = e.stream
		case callOrphaned:
			orphaned = true
		}
	}
	l.unlock()
	switch {
	case st != nil:
		st.Emit(cursor, body)
	case orphaned:
		l.drop(dropOrphaned)
	}
}

// parseEvent reads an event's params: the upstream's subscription id
// (unquoted), the cursor and the other members (in reader-owned scratch).
func (l *link) parseEvent(params []byte) (sub, cursor, body []byte, ok bool) {
	var subTok []byte
	body = l.body[:0]
	ok = codec.EachMember(params, func(k, v []byte) bool {
		if codec.KeyIs(k, "subscriptionId") {
			// The last one wins (as for every member, CONTRACT.md section
			// 2.4), and none reaches the client: the id it sees is edge's.
			subTok = v
			return true
		}
		if codec.KeyIs(k, "cursor") {
			cursor = v
		}
		if len(body) > 0 {
			body = append(body, ',')
		}
		body = append(append(append(body, k...), ':'), v...)
		return true
	})
	l.body = body
	if !ok || subTok == nil || subTok[0] != '"' {
		return nil, nil, nil, false
	}
	sub, _ = codec.AppendUnquote(l.name[:0], subTok)
	l.name = sub
	return sub, cursor, body, true
}

// closed ends a subscription the upstream ended: "done" ends it "done" once
// its buffered events are delivered; any other reason ends it UPSTREAM_LOST,
// so the client resubscribes from its lastDeliveredCursor.
func (l *link) closed(params []byte) {
	sub, reason, ok := l.parseClosed(params)
	if !ok {
		l.drop(dropBadJSON)
		return
	}
	l.lock()
	l.endLocked(l.calls.subs[string(sub)], reason)
}

// parseClosed reads subscription/closed params: the upstream's subscription
// id (unquoted, reader-owned scratch) and the raw reason.
func (l *link) parseClosed(params []byte) (sub, reason []byte, ok bool) {
	var subTok []byte
	ok = codec.EachMember(params, func(k, v []byte) bool {
		switch {
		case codec.KeyIs(k, "subscriptionId"):
			subTok = v
		case codec.KeyIs(k, "reason"):
			reason = v
		}
		return true
	})
	if !ok || subTok == nil || subTok[0] != '"' {
		return nil, nil, false
	}
	sub, _ = codec.AppendUnquote(l.name[:0], subTok)
	l.name = sub
	return sub, reason, true
}

// endLocked ends the subscription of entry e (nil: none) as the upstream
// ended it with reason (raw JSON), and releases mu: a live one is finished,
// an orphaned one forgotten.
func (l *link) endLocked(e *entry, reason []byte) {
	var f finish
	if e != nil && (e.state == callLive || e.state == callOrphaned) {
		var err error
		if string(reason) != `"done"` {
			err = backend.ErrUpstreamLost
		}
		f = l.moveLocked(e, callEnded, byUpstream, nil, err)
	}
	l.unlock()
	f.do()
}

// subKey returns the key under which the subscription that call e's
// answer result establishes is filed (callTable.subs): the subscriptionId,
// or for a plain subscription plainKey. It is not ok when result names no
// usable id, or (byte-stream links) one the upstream already gave another
// subscription on this link: a link's ids are unique at the upstream, and
// filing a second one would take the first one's events (or cancel it). A
// NATS link finds its subscriptions by the stream subject instead: workers'
// ids are not unique across workers. Called with mu held.
func (l *link) subKey(e *entry, result []byte) (string, bool) {
	var key string
	var ok bool
	switch ns := e.plain(); {
	case e.stream == nil:
		return "", false
	case ns != "" && l.nats == nil:
		key, ok = plainKey(result, ns)
	default:
		key, ok = subscriptionID(result)
	}
	if !ok || (l.nats == nil && l.calls.subs[key] != nil) {
		return "", false
	}
	return key, true
}

// subscriptionID returns the string subscriptionId member of a result (the
// last one, as event and closed read it).
func subscriptionID(result []byte) (string, bool) {
	var tok []byte
	codec.EachMember(result, func(k, v []byte) bool {
		if codec.KeyIs(k, "subscriptionId") {
			tok = v
		}
		return true
	})
	if len(tok) == 0 || tok[0] != '"' {
		return "", false
	}
	s, ok := codec.AppendUnquote(nil, tok)
	return string(s), ok && len(s) > 0
}

// rewriteSubscriptionID returns result with its subscriptionId replaced by
// edge's id; every other member is copied byte for byte, in order.
func rewriteSubscriptionID(result []byte, id string) []byte {
	out := make([]byte, 0, len(result)+len(id))
	out = append(out, '{')
	first := true
	codec.EachMember(result, func(k, v []byte) bool {
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(append(out, k...), ':')
		if codec.KeyIs(k, "subscriptionId") {
			out = codec.AppendQuote(out, id)
		} else {
			out = append(out, v...)
		}
		return true
	})
	return append(out, '}')
}

// burst counts dropped messages and logs them once per burst: the first
// drop after a quiet second is logged at once, the rest are counted and
// reported with the next log line.
type burst struct {
	last       time.Time
	suppressed int
	total      int
}

// add counts one more at now and reports whether to log it: the first
// after a quiet second. The caller logs suppressed and then zeroes it.
func (b *burst) add(now time.Time) bool {
	b.total++
	if now.Sub(b.last) < time.Second {
		b.suppressed++
		return false
	}
	b.last = now
	return true
}

// drop counts one dropped upstream message. Reader only (see handle).
func (l *link) drop(why string) {
	l.up.dropped.Add(1)
	b := &l.garbage
	if !b.add(time.Now()) {
		return
	}
	l.up.log.Warn("upstream message dropped", slog.String("upstream", l.up.name),
		slog.String("conn", l.desc), slog.String("why", why),
		slog.Int("droppedSinceLastLog", b.suppressed), slog.Int("droppedTotal", b.total))
	b.suppressed = 0
}
