package rpc

import (
	"fmt"
	"io"
	"slices"

	json "github.com/goccy/go-json"
)

// MethodKind says how the session serves a method.
type MethodKind uint8

const (
	// Unary methods run on a backend worker and get exactly one response.
	Unary MethodKind = iota + 1
	// Subscription methods establish a stream of events (CONTRACT.md section 5).
	Subscription
	// Local methods are answered by the session itself on the loop (edge/stats).
	Local
)

// Method is a registry entry. Name is interned so that dispatch does not
// allocate a string per request.
type Method struct {
	Name string
	Kind MethodKind
	// slot is the method's entry in Counters.Methods: 1 + its position in
	// the registry's names; 0 outside the registry (Counters' "other").
	slot int
	// plain is the namespace NS of a plain JSON-RPC subscription method
	// NS_subscribe (Kind Subscription), or of NS_unsubscribe (Kind Local,
	// answered by the session); "" otherwise (plain.go).
	plain string
}

// Registry says which method names exist and which establish subscriptions
// (CONTRACT.md section 8). Immutable after construction; safe for concurrent use.
type Registry struct {
	methods map[string]*Method
	names   []string // the methods' names, sorted: Method.slot - 1 indexes it
}

// oecpUnary and oecpSubscriptions are the OECP v1 methods (seed openrpc.json).
var (
	oecpUnary = []string{"initialize", "plan", "apply", "update", "stop", "retry", "resubmit",
		"delete", "get", "run/submit", "run/list", "run/status", "run/force"}
	oecpSubscriptions = []string{"watch", "logs", "agent/attach", "run/watch", "run/logs", "run/attach"}
	edgeUnary         = []string{"edge/echo", "edge/sleep", "edge/gate", "edge/open", "edge/publish"}
	edgeSubscriptions = []string{"edge/ticks", "edge/topic"}
)

// NewRegistry returns a registry with the given unary and subscription methods
// plus the gateway's own methods (edge/echo, edge/sleep, edge/gate, edge/open,
// edge/ticks, edge/stats).
func NewRegistry(unary, subscriptions []string) *Registry {
	r := &Registry{methods: make(map[string]*Method)}
	add := func(names []string, k MethodKind) {
		for _, n := range names {
			r.methods[n] = &Method{Name: n, Kind: k}
		}
	}
	add(unary, Unary)
	add(subscriptions, Subscription)
	add(edgeUnary, Unary)
	add(edgeSubscriptions, Subscription)
	add([]string{"edge/stats", "edge/whoami"}, Local)
	for n := range r.methods {
		r.names = append(r.names, n)
	}
	slices.Sort(r.names)
	for i, n := range r.names {
		r.methods[n].slot = i + 1
	}
	return r
}

// DefaultRegistry returns the OECP v1 registry.
func DefaultRegistry() *Registry { return NewRegistry(oecpUnary, oecpSubscriptions) }

// LoadOpenRPC builds a registry from an OpenRPC document: every entry of
// "methods" is a method, and those with "x-subscription": true establish
// subscriptions.
func LoadOpenRPC(r io.Reader) (*Registry, error) {
	var doc struct {
		Methods []struct {
			Name         string `json:"name"`
			Subscription bool   `json:"x-subscription"`
		} `json:"methods"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("rpc: openrpc document: %w", err)
	}
	if len(doc.Methods) == 0 {
		return nil, fmt.Errorf("rpc: openrpc document lists no methods")
	}
	var unary, subs []string
	for _, m := range doc.Methods {
		if m.Name == "" {
			return nil, fmt.Errorf("rpc: openrpc document has a method without a name")
		}
		if m.Subscription {
			subs = append(subs, m.Name)
		} else {
			unary = append(unary, m.Name)
		}
	}
	return NewRegistry(unary, subs), nil
}

// Lookup returns the method named by the unescaped name, or nil. It does not
// allocate.
func (r *Registry) Lookup(name []byte) *Method { return r.methods[string(name)] }

// Methods calls fn with every method of the registry, in no particular order.
func (r *Registry) Methods(fn func(m *Method)) {
	for _, m := range r.methods {
		fn(m)
	}
}
