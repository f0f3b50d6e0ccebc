// Package rpc is the transport-agnostic JSON-RPC 2.0 protocol core of edge: the
// per-connection Session (in-flight ids, generations, task slots, cancellation,
// admission) and the Server that holds what sessions share.
//
// A Session is owned by one event loop and has no mutex: the loop calls
// HandleMessage for every inbound message and Complete for every finished task
// that a worker posted back. Workers never touch session state; they run the
// backend call and post the Task, tagged with its generation, to the loop, which
// drops it if the request was cancelled or its id now belongs to a newer request.
package rpc

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/openengine/edge/backend"
)

// CancelReply selects what a cancelled request gets (CONTRACT.md section 4).
type CancelReply uint8

const (
	// CancelReplyNone sends nothing for a cancelled request (the default).
	CancelReplyNone CancelReply = iota
	// CancelReplyError sends exactly one -32800 Request cancelled error.
	CancelReplyError
)

// ParseCancelReply parses the --cancel-reply flag value.
func ParseCancelReply(s string) (CancelReply, error) {
	switch s {
	case "none", "":
		return CancelReplyNone, nil
	case "error":
		return CancelReplyError, nil
	}
	return 0, fmt.Errorf("rpc: cancel reply %q: want none or error", s)
}

func (c CancelReply) String() string {
	if c == CancelReplyError {
		return "error"
	}
	return "none"
}

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// MaxConnTasks is the number of task slots per connection [256].
	MaxConnTasks int
	// CancelReply selects the answer to a cancelled request [none].
	CancelReply CancelReply
	// Registry lists the methods [DefaultRegistry()].
	Registry *Registry
	// Handler serves backend methods (required).
	Handler backend.Handler
	// NonBlocking, when set, names the unary methods whose Handler.Call
	// never blocks: it computes the result from params and returns, without
	// I/O and without waiting for ctx, a lock held for long or another call.
	// The calls to such methods that one loop turn admits go to a worker
	// together (a batch, see Turn), which runs them back to back and delivers
	// their results in one hand-off instead of one per call. A method named
	// here that blocks holds up the calls batched with it. It is asked once
	// per method, by NewServer. [nil: none]
	NonBlocking func(method string) bool
	// Forward, when set, names the forwarder that serves a method instead
	// of Handler (an upstream, CONTRACT.md section 10), or nil for Handler.
	// It is asked once per method, by NewServer. [nil: Handler serves every
	// method]
	Forward func(method string) backend.Forwarder
	// Profile is the protocol profile [ProfileOECP].
	Profile Profile
	// MaxBatch is the most requests a batch may hold with ProfileJSONRPC
	// [DefaultMaxBatch].
	MaxBatch int
	// SubscribeMethods are the patterns of the plain JSON-RPC subscription
	// methods with ProfileJSONRPC (CONTRACT.md section 10): a method name
	// ending in "_subscribe", or "*" followed by such a suffix ("*_subscribe"
	// matches any NS_subscribe). NS_subscribe of a matching name establishes
	// a subscription whose notifications are NS_subscription, and
	// NS_unsubscribe ends it. [DefaultSubscribeMethods with ProfileJSONRPC;
	// none with ProfileOECP]
	SubscribeMethods []string
	// Pool runs backend calls and holds the global task cap (required).
	Pool *backend.Pool
	// SubscriptionBuffer is the number of undelivered events a subscription may
	// hold before it is closed SLOW_CONSUMER [1024].
	SubscriptionBuffer int
	// SubscriptionBufferBytes caps the bytes of those events [16 MiB].
	SubscriptionBufferBytes int
	// Logger receives diagnostics [slog.Default()].
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxConnTasks            = 256
	DefaultSubscriptionBuffer      = 1024
	DefaultSubscriptionBufferBytes = 16 << 20
)

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxConnTasks < 0 {
		errs = append(errs, fmt.Errorf("rpc: max conn tasks %d must be positive", c.MaxConnTasks))
	}
	if c.SubscriptionBuffer < 0 {
		errs = append(errs, fmt.Errorf("rpc: subscription buffer %d must be positive", c.SubscriptionBuffer))
	}
	if c.SubscriptionBufferBytes < 0 {
		errs = append(errs, fmt.Errorf("rpc: subscription buffer bytes %d must be positive", c.SubscriptionBufferBytes))
	}
	if c.Handler == nil {
		errs = append(errs, errors.New("rpc: no backend handler"))
	}
	if c.Pool == nil {
		errs = append(errs, errors.New("rpc: no worker pool"))
	}
	if c.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("rpc: max batch %d must be positive", c.MaxBatch))
	}
	if c.Profile > ProfileJSONRPC {
		errs = append(errs, fmt.Errorf("rpc: profile %d unknown", c.Profile))
	}
	for _, p := range c.SubscribeMethods {
		if err := checkSubscribePattern(p); err != nil {
			errs = append(errs, err)
		}
	}
	if c.CancelReply > CancelReplyError {
		errs = append(errs, fmt.Errorf("rpc: cancel reply %d unknown", c.CancelReply))
	}
	return errors.Join(errs...)
}

// Server holds what every session shares: configuration, registry, backend,
// worker pool, and the draining flag. Safe for concurrent use.
type Server struct {
	cfg        Config             // immutable after NewServer
	subscriber backend.Subscriber // immutable after NewServer: Handler as a Subscriber, or nil
	// nonBlocking holds the unary methods Config.NonBlocking names.
	// Immutable after NewServer.
	nonBlocking map[*Method]bool
	// unaryTwin holds, with the jsonrpc profile, the unary stand-in of each
	// registry subscription method routed to an upstream that carries unary
	// calls only (an http one): that upstream answers it itself (CONTRACT.md
	// section 10). Immutable after NewServer.
	unaryTwin map[*Method]*Method
	// forward holds the forwarder of each forwarded method
	// (Config.Forward). Immutable after NewServer.
	forward map[*Method]backend.Forwarder
	// maxBatch is Config.MaxBatch with its default. Immutable.
	maxBatch int
	adhocs   adhocMethods // methods outside the registry (jsonrpc profile)
	// owing is the drain flag (drainBit) and, below it, the number of
	// admitted requests that still owe an answer: unary calls running and
	// subscriptions establishing. One word, so that admitting a request and
	// starting to drain are each one atomic step and cannot interleave (see
	// admit). A loop's Turn takes admissions a block at a time and gives
	// back what its turn did not use at Flush (Turn.admit): while a turn
	// runs, owing may count up to a block more than is owed.
	owing atomic.Int64
	tasks sync.Pool // free unary *Task, see newTask
}

// drainBit is the drain flag in Server.owing.
const drainBit = 1 << 62

// testHookAdmit, when set by a test, runs just before a request's admission
// step, on the loop.
var testHookAdmit func()

// admit counts a request that is about to be dispatched as owing an answer,
// unless the server is draining, and reports whether it did. Shutdown reads
// the same word (Drain, InFlight), so every request it does not see as owing
// was refused. Safe for concurrent use.
func (srv *Server) admit() bool {
	if testHookAdmit != nil {
		testHookAdmit()
	}
	return srv.admitN(1)
}

// admitN is admit for n requests at once: a Turn's credit.
func (srv *Server) admitN(n int64) bool {
	for {
		v := srv.owing.Load()
		if v&drainBit != 0 {
			return false
		}
		if srv.owing.CompareAndSwap(v, v+n) {
			return true
		}
	}
}

// draining reports whether Drain has run: one load, for a Turn's credit.
func (srv *Server) draining() bool { return srv.owing.Load()&drainBit != 0 }

// settled releases n requests counted by admit. Safe for concurrent use.
func (srv *Server) settled(n int) { srv.owing.Add(-int64(n)) }

// NewServer validates cfg, fills defaults and returns a Server.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxConnTasks == 0 {
		cfg.MaxConnTasks = DefaultMaxConnTasks
	}
	if cfg.Registry == nil {
		cfg.Registry = DefaultRegistry()
	}
	if cfg.SubscriptionBuffer == 0 {
		cfg.SubscriptionBuffer = DefaultSubscriptionBuffer
	}
	if cfg.SubscriptionBufferBytes == 0 {
		cfg.SubscriptionBufferBytes = DefaultSubscriptionBufferBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SubscribeMethods == nil && cfg.Profile == ProfileJSONRPC {
		cfg.SubscribeMethods = DefaultSubscribeMethods
	}
	sub, _ := cfg.Handler.(backend.Subscriber)
	srv := &Server{cfg: cfg, subscriber: sub, maxBatch: cfg.MaxBatch}
	if srv.maxBatch == 0 {
		srv.maxBatch = DefaultMaxBatch
	}
	if cfg.NonBlocking != nil {
		srv.nonBlocking = make(map[*Method]bool)
		for name, m := range cfg.Registry.methods {
			if m.Kind == Unary && cfg.NonBlocking(name) {
				srv.nonBlocking[m] = true
			}
		}
	}
	if cfg.Forward != nil {
		srv.forward = make(map[*Method]backend.Forwarder)
		for name, m := range cfg.Registry.methods {
			if m.Kind == Local {
				continue
			}
			if f := cfg.Forward(name); f != nil {
				srv.forward[m] = f
				if m.Kind == Subscription && cfg.Profile == ProfileJSONRPC && unaryOnly(f) {
					if srv.unaryTwin == nil {
						srv.unaryTwin = make(map[*Method]*Method)
					}
					srv.unaryTwin[m] = &Method{Name: m.Name, Kind: Unary, slot: m.slot}
				}
			}
		}
	}
	return srv, nil
}

// Drain makes every session answer new requests with SERVER_SHUTTING_DOWN
// (CONTRACT.md section 9). Work already admitted continues. Safe for concurrent use.
func (srv *Server) Drain() { srv.owing.Or(drainBit) }

// Draining reports whether Drain was called. Safe for concurrent use.
func (srv *Server) Draining() bool { return srv.owing.Load()&drainBit != 0 }

// Running reports the backend tasks running across all sessions, subscription
// producers included. Safe for concurrent use.
func (srv *Server) Running() int { return srv.cfg.Pool.Running() }

// InFlight reports the requests across all sessions that still owe an
// answer: unary calls running and subscriptions establishing. Graceful
// shutdown waits for them (CONTRACT.md section 9). Safe for concurrent use.
func (srv *Server) InFlight() int { return int(srv.owing.Load() &^ drainBit) }
