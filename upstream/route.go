package upstream

import (
	"fmt"
	"strings"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/redact"
)

// Memory is the route target of the embedded memory backend.
const Memory = "memory"

// Route is one --route PATTERN=NAME (CONTRACT.md section 10).
type Route struct {
	Pattern string // a method name, or a prefix ending in "*"
	Target  string // an upstream's name or Memory
}

// ParseRoute parses PATTERN=NAME.
func ParseRoute(s string) (Route, error) {
	p, n, ok := strings.Cut(s, "=")
	if !ok || p == "" || n == "" {
		return Route{}, fmt.Errorf("route %q: want PATTERN=NAME", s)
	}
	if i := strings.IndexByte(p, '*'); i >= 0 && i != len(p)-1 {
		return Route{}, fmt.Errorf("route %q: '*' may only end the pattern", s)
	}
	return Route{Pattern: p, Target: n}, nil
}

func (r Route) String() string { return r.Pattern + "=" + r.Target }

// Matches reports whether the route's pattern matches method.
func (r Route) Matches(method string) bool {
	if prefix, ok := strings.CutSuffix(r.Pattern, "*"); ok {
		return strings.HasPrefix(method, prefix)
	}
	return r.Pattern == method
}

// Set is every upstream of the gateway and the routes to them. Its
// methods' concurrency classes are Upstream's: Empty, Upstreams, Lookup and
// Forwarder are immutable (they read what NewSet fixed, from any goroutine,
// as every session does for every call); Start, StartOn and Close are once.
type Set struct {
	ups    []*Upstream // in the order first named
	byName map[string]*Upstream
	routes []Route
}

// Spec is one --upstream NAME=URL.
type Spec struct {
	Name string
	URL  string
}

// ParseSpec parses NAME=URL.
func ParseSpec(s string) (Spec, error) {
	n, u, ok := strings.Cut(s, "=")
	if !ok || n == "" || u == "" {
		return Spec{}, fmt.Errorf("upstream %q: want NAME=URL", redact.URLs(s))
	}
	if n == Memory {
		return Spec{}, fmt.Errorf("upstream %q: the name %q is the embedded backend's", redact.URLs(s), Memory)
	}
	return Spec{Name: n, URL: u}, nil
}

// NewSet builds the upstreams of specs (the same name again adds a replica)
// and checks that every route names one of them or Memory.
func NewSet(specs []Spec, routes []Route, cfg Config) (*Set, error) {
	set := &Set{byName: make(map[string]*Upstream), routes: routes}
	replicas := make(map[string][]Replica)
	var order []string
	for _, s := range specs {
		r, err := ParseURL(s.URL)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", s.Name, err)
		}
		if _, seen := replicas[s.Name]; !seen {
			order = append(order, s.Name)
		}
		replicas[s.Name] = append(replicas[s.Name], r)
	}
	for _, n := range order {
		u := New(n, replicas[n], cfg)
		set.ups = append(set.ups, u)
		set.byName[n] = u
	}
	for _, r := range routes {
		if r.Target != Memory && set.byName[r.Target] == nil {
			return nil, fmt.Errorf("route %s: no upstream named %q", r, r.Target)
		}
	}
	return set, nil
}

// Empty reports whether there are no upstreams: every method is the memory
// backend's. Immutable.
func (s *Set) Empty() bool { return len(s.ups) == 0 }

// Upstreams lists the upstreams in the order first named. Immutable: the
// caller must not modify the slice.
func (s *Set) Upstreams() []*Upstream { return s.ups }

// Lookup returns the upstream serving method, or nil for the memory backend,
// and the route that chose it (nil for the default: the first upstream).
// Immutable.
func (s *Set) Lookup(method string) (*Upstream, *Route) {
	for i := range s.routes {
		r := &s.routes[i]
		if r.Matches(method) {
			return s.byName[r.Target], r
		}
	}
	if len(s.ups) == 0 {
		return nil, nil
	}
	return s.ups[0], nil
}

// Forwarder returns the forwarder of method, or nil when the memory backend
// serves it. edge/topic and edge/publish are always edge's own (CONTRACT.md
// section 10). Immutable.
func (s *Set) Forwarder(method string) backend.Forwarder {
	if method == "edge/topic" || method == "edge/publish" {
		return nil
	}
	if u, _ := s.Lookup(method); u != nil {
		return u
	}
	return nil
}

// Start starts every upstream on loops of their own (Upstream.Start). Once.
func (s *Set) Start() {
	for _, u := range s.ups {
		u.Start()
	}
}

// StartOn starts every upstream with its exec, tcp and ws connections on
// the gateway's event loops (Upstream.StartOn). Once.
func (s *Set) StartOn(loops Loops) {
	for _, u := range s.ups {
		u.StartOn(loops)
	}
}

// Close closes every upstream (Upstream.Close). Once, after Start or StartOn,
// once the gateway forwards no more.
func (s *Set) Close() {
	for _, u := range s.ups {
		u.Close()
	}
}
