package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/worker"
)

// runWorker serves the embedded memory backend as a NATS worker
// (CONTRACT.md section 13):
//
//	edge worker --nats URL --prefix PREFIX [--id ID] [--drain-timeout D]
//
// It takes the calls an edge forwards to nats://HOST:PORT/PREFIX until ctx is
// cancelled (SIGINT, SIGTERM), then drains: it takes nothing new and
// finishes what it took. While the NATS server is unreachable it keeps
// reconnecting.
func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("edge worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("nats", "", "NATS server URL, e.g. nats://127.0.0.1:4222 (required)")
	prefix := fs.String("prefix", "", "subject prefix and queue group: the PREFIX of the edges' nats://HOST:PORT/PREFIX (required)")
	id := fs.String("id", "", "worker id in its accepted messages and cancel subject (default a random NUID)")
	maxCalls := fs.Int("max-calls", worker.DefaultMaxCalls, "calls and subscriptions served at once")
	drain := fs.Duration("drain-timeout", worker.DefaultDrainTimeout, "on shutdown, how long calls taken may run before they are cancelled")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: edge worker --nats URL --prefix PREFIX [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	level, err := parseLevel(*logLevel)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if *url == "" {
		errs = append(errs, errors.New("worker: --nats is required"))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("worker: unexpected arguments %q", fs.Args()))
	}
	if *maxCalls <= 0 {
		errs = append(errs, errors.New("worker: --max-calls must be positive"))
	}
	if *drain <= 0 {
		errs = append(errs, errors.New("worker: --drain-timeout must be positive"))
	}
	cfg := worker.Config{Prefix: *prefix, ID: *id, MaxCalls: *maxCalls, DrainTimeout: *drain}
	mem := backend.NewMemory()
	cfg.Handler, cfg.Subscriber, cfg.NonBlocking = mem, mem, mem.NonBlocking
	// Every Config problem is reported with the flags' (Conn is set below).
	if err := cfg.Validate(); err != nil {
		for _, e := range unwrapJoined(err) {
			if !errors.Is(e, worker.ErrNoConn) {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		fs.Usage()
		return errors.Join(errs...)
	}
	logger := newLogger(stderr, level)
	cfg.Logger = logger
	nc, err := nats.Connect(*url,
		nats.Name("edge worker "+*prefix),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close at exit
				logger.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { logger.Info("NATS reconnected") }),
	)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer nc.Close()
	cfg.Conn = nc
	w, err := worker.New(cfg)
	if err != nil {
		return err
	}
	return w.Serve(ctx)
}

// unwrapJoined lists the errors of an errors.Join.
func unwrapJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
