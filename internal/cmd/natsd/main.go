// Command natsd is a NATS server built from the nats-server Go module, for
// `make cluster` and the bench suite's cluster workload (CONTRACT.md section
// 13): nothing is downloaded, and the edge binary does not carry the server.
//
//	natsd [--listen 127.0.0.1:4222] [--http HOST:PORT] [--jetstream --store-dir DIR]
//
// It logs `listening addr=HOST:PORT url=nats://HOST:PORT` on stderr once it
// accepts clients (port 0 in --listen: a free port, the line says which), and
// stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds how long the server may take to accept clients.
const readyTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(2)
	}
}

// hostPort splits HOST:PORT; port 0 is nats-server's RANDOM_PORT (its 0
// means the default port).
func hostPort(flagName, s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("--%s %q: %w", flagName, s, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("--%s %q: bad port", flagName, s)
	}
	if n == 0 {
		n = server.RANDOM_PORT
	}
	return h, n, nil
}

// options are natsd's flags as nats-server options.
func options(args []string, stderr io.Writer) (*server.Options, bool, error) {
	fs := flag.NewFlagSet("natsd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:4222", "client address HOST:PORT (port 0: a free port)")
	httpAddr := fs.String("http", "", "monitoring endpoint HOST:PORT (/varz, /connz, /subsz; empty: off)")
	js := fs.Bool("jetstream", false, "enable JetStream (needs --store-dir)")
	storeDir := fs.String("store-dir", "", "JetStream's storage directory")
	verbose := fs.Bool("log", false, "log the server's own messages (connections, errors) on stderr")
	if err := fs.Parse(args); err != nil {
		return nil, false, err
	}
	if fs.NArg() > 0 {
		return nil, false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o := &server.Options{NoSigs: true, NoLog: !*verbose, JetStream: *js, StoreDir: *storeDir}
	var err error
	if o.Host, o.Port, err = hostPort("listen", *listen); err != nil {
		return nil, false, err
	}
	if *httpAddr != "" {
		if o.HTTPHost, o.HTTPPort, err = hostPort("http", *httpAddr); err != nil {
			return nil, false, err
		}
	}
	if *js && *storeDir == "" {
		return nil, false, errors.New("--jetstream needs --store-dir")
	}
	return o, *verbose, nil
}

// run starts the server and serves until ctx is cancelled.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, verbose, err := options(args, stderr)
	if err != nil {
		return err
	}
	ns, err := server.NewServer(o)
	if err != nil {
		return err
	}
	if verbose {
		ns.ConfigureLogger()
	}
	ns.Start()
	defer ns.WaitForShutdown()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(readyTimeout) {
		return fmt.Errorf("not accepting clients within %s", readyTimeout)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	addr := ns.Addr().String()
	attrs := []any{"addr", addr, "url", "nats://" + addr, "jetstream", o.JetStream}
	if m := ns.MonitorAddr(); m != nil {
		attrs = append(attrs, "monitor", "http://"+m.String()+"/")
	}
	log.Info("listening", attrs...)
	<-ctx.Done()
	log.Info("stopping")
	return nil
}
