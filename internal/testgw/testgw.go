// Package testgw starts in-process edge gateways for the tests of other
// packages (the end-to-end suite in test/, the Go client, the CLI) and holds
// what every such suite needs around them: a leak check for TestMain, a
// watchdog against hangs, and a log buffer that is printed when a test
// fails. Nothing here sleeps to wait for an effect: waits are channel
// receives or polls with a deadline.
package testgw

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
)

// StopTimeout bounds how long stopping a gateway, or its backend workers,
// may take before the test fails.
const StopTimeout = 10 * time.Second

// Main runs the tests of a package and then fails the run if any goroutine
// of edge or of a gnet engine outlives them (every gateway a test started
// must have stopped its event loops and backend workers). Call it from
// TestMain. cleanups run after the tests, before the check.
func Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	if code == 0 {
		if leaked := LeakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left behind by the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// LeakedGoroutines polls for up to d until no goroutine other than the
// caller runs edge or gnet engine code, and returns the stacks of those that
// remain ("" when none). gnet's process-wide worker pool is not counted.
func LeakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for i, g := range strings.Split(string(buf), "\n\n") {
			if i == 0 {
				continue // the calling goroutine
			}
			if strings.Contains(g, "github.com/openengine/edge/") ||
				strings.Contains(g, "gnet/v2.(*eventloop)") || strings.Contains(g, "gnet/v2.(*engine)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Watchdog dumps every goroutine and exits the test binary if t is still
// running after d: a hang must not silently eat the go test timeout.
func Watchdog(t testing.TB, d time.Duration) {
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		buf := make([]byte, 1<<22)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "watchdog: %s still running after %s; goroutines:\n%s\n", name, d, buf[:n])
		os.Exit(2)
	})
	t.Cleanup(func() { timer.Stop() })
}

// Buffer is a bytes.Buffer safe for concurrent use: a gateway's logs, or a
// process's output.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Config is what a test may set before its gateway starts. Zero fields get
// the defaults noted.
type Config struct {
	// Loop configures the listeners [127.0.0.1:0, 2 loops, the gateway's
	// logger]. With NDJSON set, NDJSONListen is chosen by Start.
	Loop loop.Config
	// RPC configures the dispatch core [Mem, the gateway's logger, and when
	// the handler is Mem itself, Mem.NonBlocking as cmd/edge wires it]; its
	// Pool is always the gateway's.
	RPC rpc.Config
	// Mem is the gateway's memory backend [a new one]: a test that builds
	// RPC.Handler around it makes it first.
	Mem *backend.Memory
	// Handler, when set, wraps the memory backend and serves in its place.
	Handler func(*backend.Memory) backend.Handler
	// MaxTasks is the global backend task cap [65536].
	MaxTasks int
	// NDJSON adds an NDJSON-over-TCP listener.
	NDJSON bool
	// QuietLogs discards the gateway's logs instead of keeping them to print
	// when the test fails.
	QuietLogs bool
}

// Gateway is one in-process edge gateway with the memory backend.
type Gateway struct {
	Srv  *loop.Server
	RPC  *rpc.Server
	Mem  *backend.Memory
	Pool *backend.Pool
	Logs *Buffer // nil with QuietLogs
}

// Start starts a gateway and stops it in t.Cleanup: its connections are
// closed, its engine stopped and its backend workers must all return, each
// within StopTimeout. If the test failed, the gateway's logs are printed.
func Start(t testing.TB, cfg Config) *Gateway {
	t.Helper()
	gw := &Gateway{Mem: cfg.Mem}
	if gw.Mem == nil {
		gw.Mem = backend.NewMemory()
	}
	var logger *slog.Logger
	if cfg.QuietLogs {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	} else {
		gw.Logs = &Buffer{}
		logger = slog.New(slog.NewTextHandler(gw.Logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if cfg.MaxTasks == 0 {
		cfg.MaxTasks = 65536
	}
	if cfg.RPC.Handler == nil {
		cfg.RPC.Handler = gw.Mem
	}
	if cfg.Handler != nil {
		cfg.RPC.Handler = cfg.Handler(gw.Mem)
	}
	if cfg.RPC.Handler == backend.Handler(gw.Mem) && cfg.RPC.NonBlocking == nil {
		// As cmd/edge wires it. A wrapped memory backend may block where
		// the memory backend does not, so it declares nothing.
		cfg.RPC.NonBlocking = gw.Mem.NonBlocking
	}
	if cfg.RPC.Logger == nil {
		cfg.RPC.Logger = logger
	}
	gw.Pool = backend.NewPool(cfg.MaxTasks, time.Second)
	cfg.RPC.Pool = gw.Pool
	rs, err := rpc.NewServer(cfg.RPC)
	if err != nil {
		t.Fatalf("rpc.NewServer: %v", err)
	}
	gw.RPC = rs
	lc := cfg.Loop
	if lc.Listen == "" {
		lc.Listen = "127.0.0.1:0"
	}
	if lc.Loops == 0 {
		lc.Loops = 2
	}
	if lc.Logger == nil {
		lc.Logger = logger
	}
	// The NDJSON address is not spelled like the WebSocket one, and it names
	// a concrete port: when gnet owned the listeners it told them apart by
	// their address string, and with port 0 loop.Server did not recognise
	// NDJSON connections (test/ndjson_test.go:
	// TestNDJSONListenSameAddressString,
	// TestNDJSONConnRecognisedOnEphemeralPort). The port was free a moment
	// ago; on the rare clash, try another.
	for attempt := 0; ; attempt++ {
		if cfg.NDJSON {
			lc.NDJSONListen = FreeAddr(t, "127.0.0.2")
		}
		gw.Srv, err = loop.New(lc, rs)
		if err != nil {
			t.Fatalf("loop.New: %v", err)
		}
		if err = gw.Srv.Start(); err == nil {
			break
		}
		if !cfg.NDJSON || attempt == 5 {
			t.Fatalf("Start: %v", err)
		}
	}
	t.Cleanup(func() {
		Stop(t, gw.Srv)
		closed := make(chan struct{})
		go func() { gw.Pool.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(StopTimeout):
			t.Errorf("backend workers did not return within %s", StopTimeout)
		}
		if t.Failed() && gw.Logs != nil {
			t.Logf("gateway logs:\n%s", gw.Logs.String())
		}
	})
	if cfg.NDJSON && (gw.Srv.Addr() == nil || gw.Srv.NDJSONAddr() == nil) {
		t.Fatalf("gateway addresses: WebSocket %v, NDJSON %v", gw.Srv.Addr(), gw.Srv.NDJSONAddr())
	}
	return gw
}

// Stop closes every connection of srv and stops its engine, and waits for
// Done. Safe to call again.
func Stop(t testing.TB, srv *loop.Server) {
	t.Helper()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		_ = srv.Close(ctx)
	}()
	select {
	case <-srv.Done():
	case <-time.After(StopTimeout):
		t.Errorf("gateway did not stop within %s", StopTimeout)
	}
}

// FreeAddr returns host:port with a port that was free on host just now.
func FreeAddr(t testing.TB, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatalf("listen %s: %v", host, err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
