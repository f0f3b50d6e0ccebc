// Command centrifuge is the centrifugal/centrifuge peer of edge's benchmark
// suite: a centrifuge Node with its WebSocket handler at "/", the JSON
// protocol (client protocol v2), anonymous connections, an RPC method "echo"
// and channels anyone may subscribe and publish to (in-memory broker).
//
// Dialect "centrifuge", client frames (verified by main_test.go):
//
//	-> {"id":1,"connect":{}}                        must be the first command
//	<- {"id":1,"connect":{"client":"<uuid>","ping":25,"pong":true}}
//	-> {"id":2,"rpc":{"method":"echo","data":P}}
//	<- {"id":2,"rpc":{"data":P}}                    (P verbatim)
//	-> {"id":3,"subscribe":{"channel":"t"}}
//	<- {"id":3,"subscribe":{}}
//	-> {"id":4,"publish":{"channel":"t","data":D}}
//	<- {"push":{"channel":"t","pub":{"data":D}}}    (to every subscriber; no delivered count)
//	<- {"id":4,"publish":{}}
//
// Things a client must know:
//   - The server coalesces queued replies and pushes of one connection into one
//     text frame, newline-separated (up to 16 per frame): split every frame on '\n'.
//   - App-level ping: the server sends {} every 25 s; answer each {} with {} within
//     10 s or the connection is closed.
//   - A data value (P, D) must be JSON; messages over 1 MiB close the connection
//     (MessageSizeLimit, set to edge's limit; centrifuge's default is 64 KiB).
//
// Usage: centrifuge --listen 127.0.0.1:0. Once accepting it prints one line
// "listening <host:port>" to stdout; logs go to stderr; SIGTERM/SIGINT exit 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/centrifugal/centrifuge"
)

// maxMessageBytes matches edge's default text message limit (CONTRACT.md section 1.1).
const maxMessageBytes = 1 << 20

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "centrifuge:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then shuts the node down (disconnecting every
// client) and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("centrifuge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on, host:port (port 0 picks a free port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" {
		return errors.New("--listen is required")
	}
	logger := log.New(stderr, "centrifuge: ", log.LstdFlags)
	node, err := centrifuge.New(centrifuge.Config{
		Name:     "edge-bench",
		LogLevel: centrifuge.LogLevelWarn,
		LogHandler: func(e centrifuge.LogEntry) {
			logger.Printf("%s: %s %v %v", centrifuge.LogLevelToString(e.Level), e.Message, e.Fields, e.Error)
		},
	})
	if err != nil {
		return err
	}
	// Anonymous connections: every client is user "bench".
	node.OnConnecting(func(context.Context, centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: "bench"}}, nil
	})
	node.OnConnect(func(c *centrifuge.Client) {
		c.OnRPC(func(e centrifuge.RPCEvent, cb centrifuge.RPCCallback) {
			if e.Method != "echo" {
				cb(centrifuge.RPCReply{}, centrifuge.ErrorMethodNotFound)
				return
			}
			cb(centrifuge.RPCReply{Data: e.Data}, nil)
		})
		c.OnSubscribe(func(_ centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
			cb(centrifuge.SubscribeReply{}, nil)
		})
		c.OnPublish(func(_ centrifuge.PublishEvent, cb centrifuge.PublishCallback) {
			cb(centrifuge.PublishReply{}, nil)
		})
	})
	if err := node.Run(); err != nil {
		return err
	}

	ws := centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{
		CheckOrigin:      func(*http.Request) bool { return true },
		MessageSizeLimit: maxMessageBytes,
	})
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", ws)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = node.Shutdown(context.Background())
		return err
	}
	srv := &http.Server{Handler: mux, ErrorLog: logger}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())

	select {
	case err := <-served:
		_ = node.Shutdown(context.Background())
		return err
	case <-ctx.Done():
	}
	_ = srv.Close() // the listener and not-yet-upgraded connections
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = node.Shutdown(sctx) // disconnects every client
	return nil
}
