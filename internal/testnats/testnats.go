// Package testnats starts an embedded NATS server for tests (CONTRACT.md
// section 13): built from the nats-server module, in the test process, on
// 127.0.0.1 with a free port. Nothing is downloaded.
package testnats

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ReadyTimeout bounds how long the server may take to accept connections.
const ReadyTimeout = 5 * time.Second

// Start starts a NATS server and shuts it down in t.Cleanup. Its client URL
// is ClientURL(); Shutdown stops it early (as a crash of the server would
// for its clients).
func Start(t testing.TB) *server.Server {
	t.Helper()
	return StartPort(t, server.RANDOM_PORT)
}

// StartPort is Start on a given port: a server started again where one
// stopped, for its clients to reconnect to.
func StartPort(t testing.TB, port int) *server.Server {
	t.Helper()
	return StartWith(t, Config{Port: port})
}

// Config is what StartWith may set.
type Config struct {
	Port int // 0: a free port
	// StoreDir, when not empty, turns JetStream on with its files there
	// (a t.TempDir()); a server restarted on the same dir finds its
	// streams again.
	StoreDir string
	// User and Password, when set, are required of every client
	// (nats://USER:PASSWORD@HOST:PORT).
	User, Password string
}

// StartWith is Start with cfg.
func StartWith(t testing.TB, cfg Config) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: cfg.Port, NoLog: true, NoSigs: true}
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if cfg.StoreDir != "" {
		opts.JetStream, opts.StoreDir = true, cfg.StoreDir
	}
	opts.Username, opts.Password = cfg.User, cfg.Password
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(ReadyTimeout) {
		ns.Shutdown()
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// Restart shuts ns down, as a crash of the server would for its clients,
// and starts a new server on the same port (and JetStream store dir,
// storeDir, "" without JetStream), for the clients to reconnect to.
func Restart(t testing.TB, ns *server.Server, storeDir string) *server.Server {
	t.Helper()
	port := Port(ns)
	ns.Shutdown()
	ns.WaitForShutdown()
	return StartWith(t, Config{Port: port, StoreDir: storeDir})
}

// Port is the client port of ns (while it runs).
func Port(ns *server.Server) int { return ns.Addr().(*net.TCPAddr).Port }
