package upstream

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/redact"
)

// Config configures the upstreams. Zero values mean the defaults.
type Config struct {
	// Conns is the number of connections per tcp or ws replica [2] (a
	// nats replica is one connection), spread over the event loops
	// (StartOn).
	Conns int
	// HTTPConns bounds the requests in flight to one http replica, and so
	// its connections and the goroutines net/http runs for them [64]: a
	// call over it gets SERVER_BUSY, a notification over it is dropped
	// (http.go).
	HTTPConns int
	// Timeout is how long a unary call may wait for its answer [30s].
	Timeout time.Duration
	// BackoffMin and BackoffMax bound the reconnect back-off [100ms, 10s].
	BackoffMin, BackoffMax time.Duration
	// MaxMessageBytes is the largest message accepted from an upstream
	// [1 MiB]; longer ones are dropped.
	MaxMessageBytes int
	// MaxHeaderBytes caps the head of an http upstream's response
	// [16 KiB]: a longer one fails the call UPSTREAM_UNAVAILABLE.
	MaxHeaderBytes int
	// MaxPendingBytes is the most output an exec, tcp or ws connection
	// holds for an upstream that does not read [16 MiB] (CONTRACT.md
	// section 6, as a client's hard cap): a call beyond it is answered
	// UPSTREAM_UNAVAILABLE; output edge owes the upstream (the answer to
	// its request, a pong, a cancel) that takes it beyond closes the
	// connection (its calls end UPSTREAM_UNAVAILABLE, its subscriptions
	// UPSTREAM_LOST) and it reconnects with back-off.
	MaxPendingBytes int
	// WriteStallTimeout closes an exec, tcp or ws connection whose pending
	// output has made no progress for this long, as MaxPendingBytes does
	// [10s].
	WriteStallTimeout time.Duration
	// KillTimeout is how long an exec child gets after EOF on its stdin,
	// and again after SIGTERM, before the next step [2s].
	KillTimeout time.Duration
	// StderrRate is how many stderr lines of an exec child are logged
	// per second (a burst of as many at once); the excess is counted and
	// reported with the next line logged [100].
	StderrRate int
	// Logger receives state changes, dropped messages and exec children's
	// stderr [slog.Default()].
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultConns           = 2
	DefaultHTTPConns       = 64
	DefaultMaxHeaderBytes  = 16 << 10
	DefaultTimeout         = 30 * time.Second
	DefaultBackoffMin      = 100 * time.Millisecond
	DefaultBackoffMax      = 10 * time.Second
	DefaultMaxMessageBytes = 1 << 20
	DefaultMaxPendingBytes = 16 << 20
	DefaultWriteStall      = 10 * time.Second
	DefaultKillTimeout     = 2 * time.Second
	DefaultStderrRate      = 100
)

func (c Config) withDefaults() Config {
	if c.Conns <= 0 {
		c.Conns = DefaultConns
	}
	if c.HTTPConns <= 0 {
		c.HTTPConns = DefaultHTTPConns
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMin = c.BackoffMax
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if c.WriteStallTimeout <= 0 {
		c.WriteStallTimeout = DefaultWriteStall
	}
	if c.KillTimeout <= 0 {
		c.KillTimeout = DefaultKillTimeout
	}
	if c.StderrRate <= 0 {
		c.StderrRate = DefaultStderrRate
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Kind is an upstream's transport.
type Kind uint8

// Transports (CONTRACT.md section 10).
const (
	Exec Kind = iota + 1
	TCP
	WebSocket
	HTTP
	NATS
)

func (k Kind) String() string {
	switch k {
	case Exec:
		return "exec"
	case TCP:
		return "tcp"
	case WebSocket:
		return "ws"
	case HTTP:
		return "http"
	case NATS:
		return "nats"
	}
	return "unknown"
}

// Replica is one parsed --upstream URL.
type Replica struct {
	Kind Kind
	URL  string   // as given, credentials included: dialled, never printed (String)
	Argv []string // exec: the command and its arguments
	Addr string   // tcp: host:port; nats: nats://[userinfo@]host:port, never printed
	// Prefix is a nats replica's subject prefix and queue group.
	Prefix string
}

// String is the replica's URL for display: its userinfo masked
// (redact.URLs), for logs, errors and `edge config` (CONTRACT.md section 12).
func (r Replica) String() string { return redact.URLs(r.URL) }

// ParseURL parses the URL of an --upstream flag. Its errors show the URL
// with its userinfo masked.
func ParseURL(raw string) (Replica, error) {
	s := redact.URLs(raw) // for the errors
	switch {
	case strings.HasPrefix(raw, "exec:"):
		argv, err := splitWords(strings.TrimPrefix(raw, "exec:"))
		if err != nil {
			return Replica{}, fmt.Errorf("%q: %w", s, err)
		}
		if len(argv) == 0 {
			return Replica{}, fmt.Errorf("%q: no command", s)
		}
		return Replica{Kind: Exec, URL: raw, Argv: argv}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the URL as given, and its cause may quote a
		// piece of the userinfo (`invalid port ":pass" after host`).
		var ue *url.Error
		if !errors.As(err, &ue) || strings.Contains(raw, "@") {
			return Replica{}, fmt.Errorf("%q: not a valid URL", s)
		}
		return Replica{}, fmt.Errorf("%q: %w", s, ue.Err)
	}
	if u.Host == "" || u.Port() == "" {
		return Replica{}, fmt.Errorf("%q: want HOST:PORT", s)
	}
	switch u.Scheme {
	case "tcp":
		if u.Path != "" && u.Path != "/" {
			return Replica{}, fmt.Errorf("%q: a tcp upstream has no path", s)
		}
		return Replica{Kind: TCP, URL: raw, Addr: u.Host}, nil
	case "ws":
		return Replica{Kind: WebSocket, URL: raw, Addr: u.Host}, nil
	case "http":
		return Replica{Kind: HTTP, URL: raw, Addr: u.Host}, nil
	case "nats":
		prefix := strings.TrimPrefix(u.Path, "/")
		if !validToken(prefix) || strings.ContainsAny(prefix, "/") || u.RawQuery != "" {
			return Replica{}, fmt.Errorf("%q: want nats://HOST:PORT/PREFIX, PREFIX a NATS subject without wildcards", s)
		}
		// The server's URL without the prefix; its userinfo, if any, is
		// how nats.go authenticates (user and password, or a token).
		srv := url.URL{Scheme: "nats", User: u.User, Host: u.Host}
		return Replica{Kind: NATS, URL: raw, Addr: srv.String(), Prefix: prefix}, nil
	}
	return Replica{}, fmt.Errorf("%q: want exec:, tcp://, ws:// or http://, or nats://HOST:PORT/PREFIX", s)
}

// splitWords splits a command line on spaces; double quotes group words.
// No shell is involved.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			in, have = !in, true
		case r == ' ' && !in:
			if have {
				words = append(words, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if in {
		return nil, errors.New("unterminated double quote")
	}
	if have {
		words = append(words, cur.String())
	}
	return words, nil
}

// Upstream is one named upstream: its replicas and their connections. It is
// a backend.Forwarder. Each method's doc states its concurrency class:
//
//   - immutable: reads what New fixed; safe from any goroutine at any time.
//   - concurrent: safe for concurrent use with every other method but Close.
//   - loop: called by an event loop (or a session's goroutine) for a call
//     or notification; never blocks; concurrent with the other loops.
//   - once: called once, by the one goroutine that owns the Upstream's
//     lifecycle (cmd/edge's main, a test).
type Upstream struct {
	name string
	cfg  Config
	log  *slog.Logger
	http []*httpReplica // HTTP replicas
	// links are the connections of every exec, tcp and ws replica.
	links []*link
	sups  []interface{ run() }
	// place is where the byte-stream links live, set by StartOn.
	place   atomic.Pointer[placement]
	own     *goLoop      // the fallback loop of Start, nil under StartOn
	dropped atomic.Int64 // upstream messages dropped (CONTRACT.md section 10)
	late    atomic.Int64 // answers to calls that had timed out
	// slowClosed counts the connections closed for output the upstream
	// did not read (link.overflow).
	slowClosed atomic.Int64
	next       atomic.Uint32
	quit       chan struct{}
	wg         sync.WaitGroup
	stop       sync.Once

	// counters count forwarded calls by outcome (stats.go).
	counters counters
	busy     httpBusy // the http replicas' refusals at their bound
}

// New returns the upstream name with the given replicas. Start connects it.
func New(name string, replicas []Replica, cfg Config) *Upstream {
	cfg = cfg.withDefaults()
	u := &Upstream{name: name, cfg: cfg, log: cfg.Logger, quit: make(chan struct{})}
	for _, r := range replicas {
		switch r.Kind {
		case HTTP:
			u.http = append(u.http, newHTTPReplica(u, r))
		case Exec:
			u.addLink(r, r.String())
		case NATS:
			// One nats.go connection per replica: it multiplexes every
			// call, and reconnects by itself.
			l := newLink(u, r.String(), nil, false)
			l.nats = &natsLink{prefix: r.Prefix, inbox: nats.NewInbox(), probe: newProbeSecret()}
			u.links = append(u.links, l)
			u.sups = append(u.sups, &natsSupervisor{u: u, l: l, r: r})
		default:
			for i := range cfg.Conns {
				u.addLink(r, fmt.Sprintf("%s#%d", r, i+1))
			}
		}
	}
	return u
}

func (u *Upstream) addLink(r Replica, desc string) {
	var l *link
	if r.Kind == WebSocket {
		l = newLink(u, desc, appendClientFrame, true)
	} else {
		l = newLink(u, desc, nil, false)
	}
	l.probes, l.url = r.Kind == TCP, r.String()
	u.links = append(u.links, l)
	u.sups = append(u.sups, &supervisor{u: u, l: l, r: r})
}

// Name is the upstream's name. Immutable.
func (u *Upstream) Name() string { return u.name }

// HTTPOnly reports whether every replica is an HTTP one (no subscriptions).
// Immutable.
func (u *Upstream) HTTPOnly() bool { return len(u.links) == 0 }

// UnaryOnly implements backend.UnaryOnly: an upstream of http replicas
// only carries no subscription. Immutable.
func (u *Upstream) UnaryOnly() bool { return u.HTTPOnly() }

// HasHTTP reports whether some replica is an HTTP one. Immutable.
func (u *Upstream) HasHTTP() bool { return len(u.http) > 0 }

// Dropped reports how many upstream messages were dropped. Concurrent.
func (u *Upstream) Dropped() int64 { return u.dropped.Load() }

// Late reports how many answers came for calls that had timed out already
// (answered UPSTREAM_TIMEOUT); they are not counted in Dropped. Concurrent.
func (u *Upstream) Late() int64 { return u.late.Load() }

// placement is where an upstream's byte-stream links live: the Loops, and
// the links each loop owns. Immutable.
type placement struct {
	loops  Loops
	byHome [][]*link
	// turns[i] rotates the start of loop i's scans of byHome[i] (least):
	// written by loop i only, so without an atomic. Padded to a cache
	// line each, as the loops write them concurrently.
	turns []homeTurn
}

// newPlacement returns the placement of no links yet on loops (nil: none).
func newPlacement(loops Loops) *placement {
	p := &placement{loops: loops}
	if loops != nil {
		p.byHome = make([][]*link, loops.NumLoops())
		p.turns = make([]homeTurn, loops.NumLoops())
	}
	return p
}

// homeTurn is one loop's rotation counter (placement.turns).
type homeTurn struct {
	n uint32
	_ [60]byte
}

// Start is StartOn without the gateway's event loops: the exec, tcp and ws
// connections run on a loop of the upstream's own (goLoop), for callers that
// have none (edge --stdio, tests). Once, instead of StartOn.
func (u *Upstream) Start() {
	var g *goLoop
	for _, l := range u.links {
		if l.nats == nil {
			g = newGoLoop()
			break
		}
	}
	u.own = g
	if g == nil {
		u.StartOn(nil)
		return
	}
	u.StartOn(g)
}

// StartOn starts connecting every replica in the background; calls get
// UPSTREAM_UNAVAILABLE until a connection is up. The exec, tcp and ws
// connections are spread over loops: connection k of the upstream lives on
// loop k mod loops.NumLoops(), so with --upstream-conns at least the number
// of loops every loop owns a connection to every tcp and ws replica. Once,
// instead of Start; Forward may run before it (UPSTREAM_UNAVAILABLE).
func (u *Upstream) StartOn(loops Loops) {
	p := newPlacement(loops)
	if loops != nil {
		k := 0
		for _, l := range u.links {
			if l.nats != nil {
				continue
			}
			l.home, l.loops = k%len(p.byHome), loops
			p.byHome[l.home] = append(p.byHome[l.home], l)
			k++
		}
	}
	u.place.Store(p)
	for _, s := range u.sups {
		u.wg.Add(1)
		go s.run()
	}
}

// Ready reports whether some connection of the upstream takes calls.
// Concurrent.
func (u *Upstream) Ready() bool {
	for _, l := range u.links {
		if l.isUp() {
			return true
		}
	}
	for _, h := range u.http {
		if h.up() {
			return true
		}
	}
	return false
}

// Connected reports how many of the upstream's connections (exec, tcp and
// ws; an HTTP replica counts as one) take calls now, out of how many.
// Concurrent.
func (u *Upstream) Connected() (up, total int) {
	for _, l := range u.links {
		if l.isUp() {
			up++
		}
	}
	for _, h := range u.http {
		if h.up() {
			up++
		}
	}
	return up, len(u.links) + len(u.http)
}

// Close closes every connection (exec children get EOF, then SIGTERM, then
// SIGKILL) and waits for the connection goroutines to end. Calls still in
// flight get UPSTREAM_UNAVAILABLE. Once, after Start or StartOn and once
// the gateway forwards no more: not concurrently with Forward or Notify (an
// HTTP call started meanwhile would race Close's wait for the calls).
func (u *Upstream) Close() {
	u.stop.Do(func() { close(u.quit) })
	for _, h := range u.http {
		h.abortAll()
	}
	u.wg.Wait()
	if u.own != nil {
		u.own.stop()
	}
	for _, h := range u.http {
		h.running.Wait()
	}
}

// Forward implements backend.Forwarder: the call goes to the connected
// connection with the fewest calls in flight, across replicas, among those
// the call's own event loop owns if any is up, else among all; with none
// connected it is answered UPSTREAM_UNAVAILABLE at once (nothing queues).
// Loop: runs on an event loop; never waits for I/O.
func (u *Upstream) Forward(c backend.Call, o backend.Origin) backend.Ticket {
	if len(u.links) > 0 && (len(u.http) == 0 || c.Stream() != nil || u.next.Add(1)%2 == 0) {
		home := u.home(o)
		if l := u.pick(home); l != nil {
			switch {
			case l.nats != nil:
				return l.forward(c, o.Admitted)
			case l.home == home:
				return l.forwardHere(c, o.Admitted)
			}
			return l.forwardFrom(c, o.Admitted)
		}
	}
	if c.Stream() == nil && len(u.http) > 0 {
		return u.forwardHTTP(c)
	}
	u.refuse(c, nil, outcomeUnavailable, backend.ErrUpstreamUnavailable)
	return backend.Ticket{}
}

// BorrowsParams implements backend.Borrower: every path of Forward
// writes the call out before it returns (a link's output, a NATS message,
// an http request's body), but forwardFrom, which keeps the params for the
// link's loop (LentCall.Keep).
func (u *Upstream) BorrowsParams() {}

// home returns the number of the event loop a call from o runs on, if it
// is one of the upstream's Loops, else -1.
func (u *Upstream) home(o backend.Origin) int {
	p := u.place.Load()
	if o.Loops == nil || p == nil || o.Loops != p.loops || o.Loop < 0 || o.Loop >= len(p.byHome) {
		return -1
	}
	return o.Loop
}

// pick returns the connected link with the fewest calls in flight among
// those loop home owns, or if none of them is up among all, or nil.
func (u *Upstream) pick(home int) *link {
	if home >= 0 {
		p := u.place.Load()
		if l := u.least(p.byHome[home], &p.turns[home].n); l != nil {
			return l
		}
	}
	return u.least(u.links, nil)
}

// least returns the connected link of links with the fewest calls in
// flight, starting the scan at a rotating offset so that ties spread, or
// nil. turn is the rotation of the calling loop's own links
// (placement.turns), whose counts it reads exactly (inFlightHere); nil for
// the upstream's shared one, whose counts of other loops' links may lag
// by a turn (link.inflight).
func (u *Upstream) least(links []*link, turn *uint32) *link {
	var best *link
	var least int64
	n := len(links)
	if n == 0 {
		return nil
	}
	off := 0
	if n > 1 {
		var k uint32
		if turn != nil {
			*turn++
			k = *turn
		} else {
			k = u.next.Add(1)
		}
		off = int(k % uint32(n))
	}
	for i := range n {
		l := links[(off+i)%n]
		if !l.isUp() {
			continue
		}
		var f int64
		if turn != nil {
			f = l.inFlightHere()
		} else {
			f = l.inflight.Load()
		}
		if best == nil || f < least {
			best, least = l, f
		}
	}
	return best
}

// backoff returns the wait before attempt n (0-based): exponential from
// BackoffMin to BackoffMax, with up to 50% jitter.
func (u *Upstream) backoff(n int) time.Duration {
	d := u.cfg.BackoffMin
	for i := 0; i < n && d < u.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, u.cfg.BackoffMax)
	return d/2 + rand.N(d/2+1)
}

// Notify implements backend.Notifier: the notification goes to a connected
// connection, or nowhere when none is (a notification has no answer to
// carry the failure). Loop: runs on an event loop; never waits for I/O.
func (u *Upstream) Notify(method string, params []byte) {
	if l := u.pick(-1); l != nil {
		if l.nats != nil {
			l.notify(method, params)
		} else {
			l.notifyFrom(method, params)
		}
		return
	}
	u.notifyHTTP(method, params)
}
