// Command raw is the ceiling peer of edge's benchmark suite: edge's own event
// loop (package loop: gnet + codec) in Echo mode, with no JSON-RPC at all.
// Every text message is sent back unchanged in one text frame, so it measures
// the framing stack alone.
//
// Dialect "raw": -> any text frame T, <- the same text frame T. No fan-out.
//
// Usage: raw --listen 127.0.0.1:0. Once accepting it prints one line
// "listening <host:port>" to stdout; logs go to stderr; SIGTERM/SIGINT exit 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/openengine/edge/loop"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "raw:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then closes the server and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("raw", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on, host:port (port 0 picks a free port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" {
		return errors.New("--listen is required")
	}
	srv, err := loop.New(loop.Config{
		Listen: *listen,
		Echo:   true,
		Loops:  runtime.GOMAXPROCS(0),
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, nil)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening %s\n", srv.Addr())

	select {
	case <-srv.Done():
		return errors.New("server stopped unexpectedly")
	case <-ctx.Done():
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Close(cctx)
}
