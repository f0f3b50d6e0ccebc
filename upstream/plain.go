package upstream

import (
	"bytes"

	"github.com/openengine/edge/codec"
)

// This file is the upstream side of plain JSON-RPC subscriptions
// (CONTRACT.md section 10, jsonrpc profile; backend.Stream.Namespace): the
// shape Ethereum's eth_subscribe made common, over the byte-stream links
// (exec, tcp, ws). The request is NS_subscribe with the client's params; the
// upstream answers its subscription id as the result, a scalar (a string
// usually); its notifications are
//
//	{"jsonrpc":"2.0","method":"NS_subscription","params":{"subscription":ID,"result":R}}
//
// and NS_unsubscribe [ID] ends it, a request with an id of edge's whose
// answer edge consumes. The call table keeps such a subscription as an OECP
// one (calltable.go); it is filed under plainKey, and the session gets the
// `"result":R` member byte for byte as the event's body (the client sees
// edge's own id, never the upstream's). NATS links do not carry this shape:
// their workers speak section 13's subscriptions, so a plain subscription
// forwarded to one gets the worker's error, or UPSTREAM_PROTOCOL for a
// result that is not an OECP subscription's.

const (
	plainEventSuffix = "_subscription"
	plainUnsubSuffix = "_unsubscribe"
)

// plain returns the namespace of e's plain subscription, or "" (a unary
// call, an OECP subscription). Called with the link's mu held.
func (e *entry) plain() string {
	if e.stream == nil {
		return ""
	}
	return e.stream.Namespace()
}

// plainKey returns the key of the plain subscription of namespace ns that
// the upstream established with id tok, the raw JSON result: tok as sent,
// a NUL (no raw JSON value holds one) and ns, so that NS_subscription
// notifications find it by their subscription member byte for byte, and a
// notification of another namespace does not. It is not ok when tok is no
// usable id: an object, an array, null, or "".
func plainKey(tok []byte, ns string) (string, bool) {
	if !plainID(tok) {
		return "", false
	}
	return string(tok) + "\x00" + ns, true
}

// plainID reports whether tok, a raw JSON value, can be a subscription id:
// a non-empty string, a number, true or false.
func plainID(tok []byte) bool {
	switch {
	case len(tok) == 0, tok[0] == '{', tok[0] == '[', tok[0] == 'n':
		return false
	case tok[0] == '"':
		return len(tok) > 2
	}
	return true
}

// plainTok returns the raw JSON id of a plain subscription's key.
func plainTok(key, ns string) string { return key[:len(key)-len(ns)-1] }

// appendUnsubscribe appends request id NS_unsubscribe [ID] for the plain
// subscription of namespace ns filed under key.
func appendUnsubscribe(dst []byte, id uint64, ns, key string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = codec.AppendUint(dst, id)
	dst = append(dst, `,"method":`...)
	dst = codec.AppendQuote(dst, ns+plainUnsubSuffix)
	dst = append(dst, `,"params":[`...)
	dst = append(dst, plainTok(key, ns)...)
	return append(dst, "]}"...)
}

// plainEvent passes an NS_subscription notification on to the plain
// subscription it names, with its "result" member as the event's body, and
// reports whether method is NS_subscription (false: the caller drops it as
// unknown). A notification without a subscription or a result is dropped
// and counted; one of no subscription is ignored, as an OECP event of none
// is (event). Reader only (see handle).
func (l *link) plainEvent(method, params []byte) bool {
	name, ok := codec.AppendUnquote(l.name[:0], method)
	if !ok {
		return false
	}
	l.name = name
	ns, ok := bytes.CutSuffix(name, []byte(plainEventSuffix))
	if !ok || len(ns) == 0 || l.nats != nil {
		return false
	}
	var sub, result []byte
	ok = codec.EachMember(params, func(k, v []byte) bool {
		switch {
		case codec.KeyIs(k, "subscription"):
			sub = v
		case codec.KeyIs(k, "result"):
			result = v
		}
		return true
	})
	if !ok || !plainID(sub) || result == nil {
		l.drop(dropBadJSON)
		return true
	}
	l.key = append(append(append(l.key[:0], sub...), 0), ns...)
	l.body = append(append(l.body[:0], `"result":`...), result...)
	l.lock()
	l.emitLocked(l.calls.subs[string(l.key)], nil, l.body)
	return true
}
