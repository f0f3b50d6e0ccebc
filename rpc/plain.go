package rpc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// Plain JSON-RPC subscriptions (CONTRACT.md section 10, jsonrpc profile): the
// shape Ethereum's eth_subscribe made common. NS_subscribe answers the
// subscription id (a string); the server then sends
// {"jsonrpc":"2.0","method":"NS_subscription","params":{"subscription":ID,"result":R}}
// and NS_unsubscribe(ID) ends it. The session keeps these subscriptions as
// it keeps OECP's (budget, SLOW_CONSUMER, cancellation); only their ids and
// notifications are spelled differently:
//
//   - the id is "0x" and a hex number, unique on the connection, and the
//     establishing request's result is that id, whatever the forwarder
//     established it with;
//   - an event's members ("result":R) follow the "subscription" member;
//   - SLOW_CONSUMER and UPSTREAM_LOST end it with an NS_subscription
//     carrying "error" instead of "result"; an end without a reason the
//     client could act on ("done": the producer returned, or shutdown) sends
//     nothing, as plain servers do not end subscriptions by themselves;
//   - NS_unsubscribe([ID]) is answered by the session: true when ID was a
//     live subscription of NS on this connection (which then ends as a
//     subscription/cancel ends an OECP one: its forwarder cancels it
//     upstream), false otherwise.

// DefaultSubscribeMethods is Config.SubscribeMethods with ProfileJSONRPC.
var DefaultSubscribeMethods = []string{"*_subscribe"}

const (
	subscribeSuffix   = "_subscribe"
	unsubscribeSuffix = "_unsubscribe"
)

// checkSubscribePattern reports what is wrong with a SubscribeMethods
// pattern.
func checkSubscribePattern(p string) error {
	if err := patternProblem(p); err != nil {
		return fmt.Errorf("rpc: subscribe method pattern %w", err)
	}
	return nil
}

// patternProblem is checkSubscribePattern's error without its prefix.
func patternProblem(p string) error {
	rest, _ := strings.CutPrefix(p, "*")
	switch {
	case !strings.HasSuffix(p, subscribeSuffix):
		return fmt.Errorf("%q: want a name ending in %s, or * and such a suffix (*_subscribe)", p, subscribeSuffix)
	case strings.Contains(rest, "*"):
		return fmt.Errorf("%q: * only at the start", p)
	case p == subscribeSuffix:
		return fmt.Errorf("%q: no namespace before %s", p, subscribeSuffix)
	}
	return nil
}

// ParseSubscribeMethods reads a comma-separated list of SubscribeMethods
// patterns (spaces around each are ignored), reporting every bad one; ""
// is the empty list: no plain subscription methods. Safe for concurrent
// use.
func ParseSubscribeMethods(list string) ([]string, error) {
	ps := []string{}
	var errs []error
	for p := range strings.SplitSeq(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" && strings.TrimSpace(list) == "" {
			break
		}
		if err := patternProblem(p); err != nil {
			errs = append(errs, err)
			continue
		}
		ps = append(ps, p)
	}
	return ps, errors.Join(errs...)
}

// plainNamespace returns NS when name is NS_subscribe and matches a
// SubscribeMethods pattern, or "".
func (srv *Server) plainNamespace(name string) string {
	ns, ok := strings.CutSuffix(name, subscribeSuffix)
	if !ok || ns == "" {
		return ""
	}
	for _, p := range srv.cfg.SubscribeMethods {
		if suffix, wild := strings.CutPrefix(p, "*"); wild && strings.HasSuffix(name, suffix) || p == name {
			return ns
		}
	}
	return ""
}

// unsubscribeNamespace returns NS when name is NS_unsubscribe and
// NS_subscribe is a plain subscription method, or "".
func (srv *Server) unsubscribeNamespace(name string) string {
	ns, ok := strings.CutSuffix(name, unsubscribeSuffix)
	if !ok || ns == "" || srv.plainNamespace(ns+subscribeSuffix) == "" {
		return ""
	}
	return ns
}

// plainHead is codec.PlainEventHead(ns), made once per namespace.
func (srv *Server) plainHead(ns string) string {
	srv.adhocs.mu.Lock()
	defer srv.adhocs.mu.Unlock()
	if h, ok := srv.adhocs.heads[ns]; ok {
		return h
	}
	h := codec.PlainEventHead(ns)
	if len(srv.adhocs.heads) < adhocLimit {
		if srv.adhocs.heads == nil {
			srv.adhocs.heads = make(map[string]string)
		}
		srv.adhocs.heads[ns] = h
	}
	return h
}

// plainID is the n-th plain subscription id of a connection: "0x" and n
// in hex.
func plainID(n uint64) string { return "0x" + strconv.FormatUint(n, 16) }

// plainEnd writes the notification that ends a plain subscription for
// reason, if it has one (see above). Must be called on the loop.
func (s *Session) plainEnd(sub *subscription, reason closeReason) {
	var message, dataCode string
	switch reason {
	case reasonSlowConsumer:
		message = "Slow consumer"
	case reasonUpstreamLost:
		message, dataCode = "Upstream lost", "UPSTREAM_LOST"
	default:
		return
	}
	s.buf = codec.AppendPlainError(s.buf[:0], sub.head, sub.idTok, codec.CodeServerError, message, dataCode)
	s.sink.Send(s.buf)
}

// unsubscribe answers NS_unsubscribe (id nil: a notification, no answer):
// params [ID] naming a live subscription of ns on this connection end it and
// answer true; anything else answers false. Must be called on the loop.
func (s *Session) unsubscribe(id, params []byte, ns string) {
	found := false
	n := 0
	codec.EachElement(params, func(e []byte) bool {
		n++
		if n > 1 || len(s.subs) == 0 {
			return false
		}
		name, ok := codec.AppendUnquote(s.name[:0], e)
		if !ok {
			return false
		}
		s.name = name
		if sub := s.subs[string(name)]; sub != nil && sub.ns == ns && sub.state != subEnded {
			found = true
			s.endSubscription(sub, reasonNone)
		}
		return true
	})
	if id == nil {
		return
	}
	result := "false"
	if found {
		result = "true"
	}
	s.buf = codec.AppendResult(s.buf[:0], id, []byte(result))
	s.send(s.buf)
}

// unaryOnly reports whether f carries unary calls only (backend.UnaryOnly).
func unaryOnly(f backend.Forwarder) bool {
	u, ok := f.(backend.UnaryOnly)
	return ok && u.UnaryOnly()
}
