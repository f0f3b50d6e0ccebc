// Package testnats starts an embedded NATS server for tests (CONTRACT.md
// section 13): built from the nats-server module, in the test process, on
// 127.0.0.1 with a free port. Nothing is downloaded.
package testnats

import (
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
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
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
