// Command geth is the go-ethereum peer of edge's benchmark suite: go-ethereum's
// rpc package (reflection-based services, goroutine per call, gorilla/websocket
// underneath) serving a tiny "edge" service over WebSocket on net/http.
//
// Dialect "geth", one JSON message per text frame:
//
//	-> {"jsonrpc":"2.0","id":1,"method":"edge_echo","params":[P]}
//	<- {"jsonrpc":"2.0","id":1,"result":P}               (P verbatim)
//	-> {"jsonrpc":"2.0","id":2,"method":"edge_subscribe","params":["topic","t"]}
//	<- {"jsonrpc":"2.0","id":2,"result":"0x…"}           (random hex subscription id)
//	-> {"jsonrpc":"2.0","id":3,"method":"edge_publish","params":["t",D]}
//	<- {"jsonrpc":"2.0","method":"edge_subscription","params":{"subscription":"0x…","result":D}}  (to every subscriber; D compacted by encoding/json)
//	<- {"jsonrpc":"2.0","id":3,"result":1}               (delivered count)
//	-> {"jsonrpc":"2.0","id":4,"method":"edge_unsubscribe","params":["0x…"]}
//	<- {"jsonrpc":"2.0","id":4,"result":true}
//
// The rpc server runs each call in its own goroutine, so responses may
// overtake one another; the publisher's result may arrive before or after
// the event on its own connection. After 30 s without traffic the server
// sends a WebSocket ping and closes the connection if no pong follows within
// 30 s. Messages over 1 MiB close the connection (edge's limit; go-ethereum's
// default is 32 MiB).
//
// Usage: geth --listen 127.0.0.1:0. Once accepting it prints one line
// "listening <host:port>" to stdout; logs go to stderr; SIGTERM/SIGINT exit 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/ethereum/go-ethereum/log"
	"github.com/ethereum/go-ethereum/rpc"
)

// maxMessageBytes matches edge's default text message limit (CONTRACT.md section 1.1).
const maxMessageBytes = 1 << 20

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "geth:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then stops the rpc server (closing every
// connection) and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("geth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on, host:port (port 0 picks a free port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" {
		return errors.New("--listen is required")
	}
	// go-ethereum logs nowhere by default; send its warnings to stderr.
	log.SetDefault(log.NewLogger(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	server := rpc.NewServer()
	server.SetWebsocketReadLimit(maxMessageBytes)
	if err := server.RegisterName("edge", newService()); err != nil {
		return err
	}
	ws := server.WebsocketHandler([]string{"*"})
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", ws)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ErrorLog: stdlog.New(stderr, "geth: ", 0)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	_ = srv.Close() // the listener and not-yet-upgraded connections
	server.Stop()   // closes every WebSocket codec it serves
	return nil
}

// service is registered as "edge": its exported methods become edge_echo,
// edge_publish and the subscription edge_subscribe ["topic", name].
type service struct {
	mu     sync.Mutex
	topics map[string]map[rpc.ID]*rpc.Notifier // guarded by mu
}

func newService() *service {
	return &service{topics: make(map[string]map[rpc.ID]*rpc.Notifier)}
}

// Echo returns its argument (edge_echo [P]).
func (s *service) Echo(p json.RawMessage) json.RawMessage { return p }

// Publish notifies every subscriber of topic name with data and returns how
// many notifications were written (edge_publish [name, data]).
func (s *service) Publish(name string, data json.RawMessage) int {
	type target struct {
		id rpc.ID
		n  *rpc.Notifier
	}
	s.mu.Lock()
	targets := make([]target, 0, len(s.topics[name]))
	for id, n := range s.topics[name] {
		targets = append(targets, target{id, n})
	}
	s.mu.Unlock()
	delivered := 0
	for _, t := range targets {
		if t.n.Notify(t.id, data) == nil {
			delivered++
		}
	}
	return delivered
}

// Topic subscribes the caller to topic name (edge_subscribe ["topic", name]).
// The subscription lasts until edge_unsubscribe or the connection closes.
func (s *service) Topic(ctx context.Context, name string) (*rpc.Subscription, error) {
	n, ok := rpc.NotifierFromContext(ctx)
	if !ok {
		return nil, rpc.ErrNotificationsUnsupported
	}
	sub := n.CreateSubscription()
	s.mu.Lock()
	set := s.topics[name]
	if set == nil {
		set = make(map[rpc.ID]*rpc.Notifier)
		s.topics[name] = set
	}
	set[sub.ID] = n
	s.mu.Unlock()
	go func() {
		<-sub.Err()
		s.mu.Lock()
		if set := s.topics[name]; set != nil {
			delete(set, sub.ID)
			if len(set) == 0 {
				delete(s.topics, name)
			}
		}
		s.mu.Unlock()
	}()
	return sub, nil
}
