// Package admin serves edge's operator endpoints on a plain net/http listener
// of their own, never the data-plane port and never on the event loops
// (CONTRACT.md section 12):
//
//	GET /healthz        200 "ok" while the process serves
//	GET /readyz         200 when Config.Ready reports nothing, else 503 with the reasons as JSON
//	/debug/pprof/       net/http/pprof, only with Config.Pprof (its cmdline with URL credentials masked)
//
// With Config.Token every endpoint but /healthz requires the token (auth.go).
//
// Other endpoints (/metrics, the dashboard at /) are added by whoever owns
// them with Handle before Start. The package knows nothing of gnet, the
// sessions or the upstreams: what it reports comes in through Config.Ready.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openengine/edge/internal/redact"
)

// Timeouts of the admin HTTP server. No write timeout: a CPU profile or an
// execution trace streams for as long as the operator asked for.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 60 * time.Second
)

// Config is what the admin server needs. Zero values mean the defaults noted.
type Config struct {
	// Listen is the listener's host:port (port 0 picks a free one; Addr
	// tells which).
	Listen string
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
	// Ready reports why the gateway should not get traffic now: nothing
	// when it should [always ready]. /readyz calls it once per request on an
	// HTTP goroutine, so it must be safe for concurrent use and must not
	// block.
	Ready func() (reasons []string)
	// Logger gets the listener's start and the HTTP server's own errors
	// [discard].
	Logger *slog.Logger
	// Token, when set, returns the token every endpoint but /healthz
	// requires (auth.go); it is called once per request, so it must be
	// safe for concurrent use and may change between calls (a reload).
	// [nil: no token]
	Token func() []byte
}

// Server is the admin listener. Handlers are added with Handle before
// Start; Shutdown stops it.
type Server struct {
	cfg  Config         // immutable after New
	mux  *http.ServeMux // its patterns are fixed at Start
	http *http.Server   // immutable after New

	mu       sync.Mutex // guards started, ln, patterns
	started  bool
	ln       net.Listener
	patterns []string      // as registered, for Patterns
	served   chan struct{} // closed when Serve has returned (after Start)
}

// New returns an admin server for cfg with /healthz, /readyz and, with
// cfg.Pprof, /debug/pprof/ registered. Nothing listens until Start.
func New(cfg Config) (*Server, error) {
	if cfg.Listen == "" {
		return nil, ErrNoListen
	}
	if cfg.Ready == nil {
		cfg.Ready = func() []string { return nil }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), served: make(chan struct{})}
	var h http.Handler = s.mux
	if cfg.Token != nil {
		h = requireToken(cfg.Token, h)
	}
	s.http = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	s.Handle("GET /healthz", http.HandlerFunc(healthz))
	s.Handle("GET /readyz", http.HandlerFunc(s.readyz))
	if cfg.Pprof {
		s.Handle("/debug/pprof/", http.HandlerFunc(pprof.Index)) // also the named profiles: heap, goroutine, ...
		s.Handle("/debug/pprof/cmdline", http.HandlerFunc(cmdline))
		s.Handle("/debug/pprof/profile", http.HandlerFunc(pprof.Profile))
		s.Handle("/debug/pprof/symbol", http.HandlerFunc(pprof.Symbol))
		s.Handle("/debug/pprof/trace", http.HandlerFunc(pprof.Trace))
	}
	return s, nil
}

// Handle registers h for pattern (http.ServeMux syntax, e.g.
// "GET /metrics"). It panics, as ServeMux does on a conflicting pattern, if
// called after Start. Safe for concurrent use.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		panic("admin: Handle " + pattern + " after Start")
	}
	s.mux.Handle(pattern, h)
	s.patterns = append(s.patterns, pattern)
}

// Patterns lists the registered patterns in the order registered, for the
// start-up log line. Safe for concurrent use.
func (s *Server) Patterns() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.patterns)
}

// Start listens on Config.Listen and serves on a goroutine of its own until
// Shutdown. Safe for concurrent use; a second call returns ErrStarted.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrStarted
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return err
	}
	s.started, s.ln = true, ln
	go func() {
		defer close(s.served)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("admin listener stopped", "err", err)
		}
	}()
	return nil
}

// Addr returns the address the server listens on, nil before Start. Safe
// for concurrent use.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown closes the listener, lets requests being served finish until ctx
// ends (then closes their connections) and waits for the server's goroutine
// to return. Safe for concurrent use and to call more than once, also
// without Start.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.started = true // no Start or Handle after Shutdown
	serving := s.ln != nil
	s.mu.Unlock()
	err := s.http.Shutdown(ctx)
	if err != nil {
		_ = s.http.Close()
	}
	if serving {
		<-s.served
	}
	return err
}

// healthz answers 200 "ok": the process is up and serving HTTP.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, "ok\n")
}

// readiness is the JSON body of /readyz.
type readiness struct {
	Ready   bool     `json:"ready"`
	Reasons []string `json:"reasons,omitempty"`
}

// readyz answers 200 {"ready":true} when Config.Ready reports nothing, else
// 503 {"ready":false,"reasons":[...]}.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	reasons := s.cfg.Ready()
	body, _ := json.Marshal(readiness{Ready: len(reasons) == 0, Reasons: reasons})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if len(reasons) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(append(body, '\n'))
}

// cmdline answers as net/http/pprof's Cmdline does (the arguments separated
// by NUL bytes), with the userinfo of every URL masked (CONTRACT.md section
// 12): the command line carries --upstream and --nats as given, passwords
// included.
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, strings.Join(redact.Args(os.Args), "\x00"))
}
