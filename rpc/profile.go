package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/codec"
)

// Profile is the protocol profile a server speaks (CONTRACT.md section 10).
type Profile uint8

const (
	// ProfileOECP is the OECP v1 binding: named params, no batches, the
	// registry's methods only (the default).
	ProfileOECP Profile = iota
	// ProfileJSONRPC is plain JSON-RPC 2.0 for fronting generic services:
	// positional (array) params and absent params are accepted, a batch is
	// answered with one array, and a method outside the registry is a unary
	// method served by its route's forwarder.
	ProfileJSONRPC
)

// ParseProfile parses the --profile flag value.
func ParseProfile(s string) (Profile, error) {
	switch s {
	case "oecp", "":
		return ProfileOECP, nil
	case "jsonrpc":
		return ProfileJSONRPC, nil
	}
	return 0, fmt.Errorf("rpc: profile %q: want oecp or jsonrpc", s)
}

func (p Profile) String() string {
	if p == ProfileJSONRPC {
		return "jsonrpc"
	}
	return "oecp"
}

// DefaultMaxBatch is the largest batch the jsonrpc profile accepts.
const DefaultMaxBatch = 100

var (
	errBatchTooLarge       = protocolError(codec.CodeInvalidRequest, "BATCH_TOO_LARGE")
	errSubscriptionInBatch = protocolError(codec.CodeInvalidRequest, "SUBSCRIPTION_IN_BATCH")
)

// reqBatch collects the answers to the requests of one batch (jsonrpc
// profile): they are written as one array once every request is answered.
// Loop-owned.
type reqBatch struct {
	buf  []byte // '[' and the answers so far, comma-separated
	n    int    // answers in buf
	owed int    // dispatched requests not yet answered (or cancelled)
}

func (b *reqBatch) add(msg []byte) {
	if b.n > 0 {
		b.buf = append(b.buf, ',')
	}
	b.buf = append(b.buf, msg...)
	b.n++
}

// isBatch reports whether msg, which Classify found to be valid JSON but not
// a request, is an array.
func isBatch(msg []byte) bool { return firstByte(msg) == '[' }

// handleBatch serves a batch (CONTRACT.md section 10, jsonrpc profile): each
// element is admitted like a message of its own, and their answers go out
// as one array once all are done. Notifications add nothing; a batch of only
// notifications gets no reply; an empty array gets one -32600.
func (s *Session) handleBatch(msg []byte) {
	n := 0
	codec.EachElement(msg, func([]byte) bool { n++; return n <= s.srv.maxBatch })
	switch {
	case n == 0:
		s.nullError(errInvalidRequest)
		return
	case n > s.srv.maxBatch:
		s.nullError(errBatchTooLarge)
		return
	}
	b := &reqBatch{buf: []byte{'['}}
	s.collect = b
	codec.EachElement(msg, func(elem []byte) bool {
		env := codec.Classify(elem, s.transport == WebSocket)
		if env.Kind != codec.KindInvalid || !s.notification(elem) {
			s.handle(&env)
		}
		return !s.closed
	})
	s.collect = nil
	s.batchDone(b, 0)
}

// batchDone records that answered of b's dispatched requests are settled
// and writes the array once nothing is owed.
func (s *Session) batchDone(b *reqBatch, answered int) {
	b.owed -= answered
	if b.owed > 0 || s.closed {
		return
	}
	if b.n > 0 {
		s.send(append(b.buf, ']'))
	}
	b.buf = nil
}

// answerInBatch runs answer with t's answers collected into its batch, and
// settles t there. Without a batch it just runs answer.
func (s *Session) answerInBatch(t *Task, answer func()) {
	b := t.batch
	if b == nil {
		answer()
		return
	}
	t.batch = nil
	prev := s.collect
	s.collect = b
	answer()
	s.collect = prev
	s.batchDone(b, 1)
}

// adhocMethods interns the names of methods outside the registry that the
// jsonrpc profile forwards, so that a busy method does not allocate per
// call; past adhocLimit names each call gets its own Method.
type adhocMethods struct {
	mu    sync.Mutex
	names map[string]*Method // guarded by mu
	heads map[string]string  // guarded by mu: plain subscription heads by namespace (plain.go)
}

const adhocLimit = 4096

func (a *adhocMethods) get(name []byte, kind MethodKind, plain string) *Method {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.names[string(name)]; m != nil {
		return m
	}
	m := &Method{Name: string(name), Kind: kind, plain: plain}
	if len(a.names) < adhocLimit {
		if a.names == nil {
			a.names = make(map[string]*Method)
		}
		a.names[m.Name] = m
	}
	return m
}

// adhoc returns the forwarder and method of a name outside the registry,
// for the jsonrpc profile, or nils. A plain subscription method
// (Config.SubscribeMethods) is a Subscription; its NS_unsubscribe is
// answered by the session (Local, no forwarder).
func (srv *Server) adhoc(name []byte) (*Method, backend.Forwarder) {
	if srv.cfg.Profile != ProfileJSONRPC || name == nil {
		return nil, nil
	}
	if ns := srv.unsubscribeNamespace(string(name)); ns != "" {
		return srv.adhocs.get(name, Local, ns), nil
	}
	if srv.cfg.Forward == nil {
		return nil, nil
	}
	f := srv.cfg.Forward(string(name))
	if f == nil {
		return nil, nil
	}
	if ns := srv.plainNamespace(string(name)); ns != "" && !unaryOnly(f) {
		return srv.adhocs.get(name, Subscription, ns), f
	}
	return srv.adhocs.get(name, Unary, ""), f
}

// logNotFound says at debug level why a request got -32601: an operator
// whose own method is refused by edge itself sees why in the log. The name is
// the client's: quoted, and cut at 128 bytes.
func (srv *Server) logNotFound(name []byte, m *Method, tracked bool) {
	if !srv.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	var why string
	switch {
	case m == nil && srv.cfg.Profile != ProfileJSONRPC:
		why = "not in the registry: the oecp profile serves the registry's methods only (--registry), --profile jsonrpc forwards any method to its --route or the first --upstream"
	case m == nil && srv.cfg.Forward == nil:
		why = "not in the registry, and no --upstream to forward it to"
	case m == nil:
		why = "not in the registry, and no --route matches it"
	case !tracked:
		why = "a subscription method needs an id: it cannot be a notification"
	default:
		why = "a subscription method, and nothing serves subscriptions"
	}
	if len(name) > 128 {
		name = name[:128]
	}
	srv.cfg.Logger.Debug("method not found", "method", strconv.Quote(string(name)), "why", why)
}

// paramsOK reports whether params are acceptable before the backend sees
// them: an object, or with the jsonrpc profile also an array or absent.
func (srv *Server) paramsOK(p []byte) bool {
	if isObject(p) {
		return true
	}
	if srv.cfg.Profile != ProfileJSONRPC {
		return false
	}
	return p == nil || isBatch(p)
}

// notification serves msg if it is a JSON-RPC 2.0 notification (jsonrpc
// profile): a valid request without an id. A forwarded method's forwarder
// passes it on if it can (backend.Notifier); nothing is ever sent back, and
// the embedded backend runs no notification. It reports whether msg was one.
func (s *Session) notification(msg []byte) bool {
	var method, params []byte
	v20, id := false, false
	ok := codec.EachMember(msg, func(k, v []byte) bool {
		switch {
		case codec.KeyIs(k, "jsonrpc"):
			v20 = len(v) > 0 && v[0] == '"' && codec.KeyIs(v, "2.0")
		case codec.KeyIs(k, "id"):
			id = true
		case codec.KeyIs(k, "method"):
			method = v
		case codec.KeyIs(k, "params"):
			params = v
		}
		return true
	})
	if !ok || !v20 || id || len(method) == 0 || method[0] != '"' || !(params == nil || s.srv.paramsOK(params)) {
		return false
	}
	name, ok := codec.AppendUnquote(s.name[:0], method)
	if !ok {
		return false
	}
	s.name = name
	f := s.srv.forward[s.srv.cfg.Registry.Lookup(name)]
	if f == nil {
		_, f = s.srv.adhoc(name)
	}
	if n, ok := f.(backend.Notifier); ok {
		n.Notify(string(name), params)
	}
	return true
}
