package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/gobwas/ws"

	"github.com/openengine/edge/client"
)

// runClient serves the operator subcommands:
//
//	edge call [flags] URL METHOD [PARAMS]
//	edge subscribe [flags] URL METHOD [PARAMS]
//
// URL is ws://host:port/path, wss://host:port/path or tcp://host:port
// (NDJSON). PARAMS is JSON, an object or an array (default {}). call prints
// the result as one JSON line; subscribe prints the establishment result,
// then each event's params, one JSON line each, until the subscription ends
// or ctx is cancelled. A METHOD named NS_subscribe (eth_subscribe) is a
// plain JSON-RPC subscription (client.Subscribe): its result is the id, its
// events NS_subscription's params, and the cancel NS_unsubscribe. An RPC error is printed as {"error":...} and fails the command.
// The bearer token comes from --token or EDGE_TOKEN and never appears in an
// error.
func runClient(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("edge "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "bound on dialing and, for call, on the whole call")
	wait := fs.Duration("wait", 0, "keep retrying the connection for up to this long while the gateway is not up yet (refused, 503)")
	token := fs.String("token", "", "bearer token for the upgrade (prefer EDGE_TOKEN: a flag shows in ps)")
	caFile := fs.String("ca", "", "PEM file of the CA that signed a wss:// server's certificate (default: the system's)")
	insecure := fs.Bool("insecure", false, "wss://: do not verify the server's certificate (a self-signed test certificate; never in production)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: edge %s [--timeout D] [--wait D] [--token T] [--ca FILE] [--insecure] URL METHOD [PARAMS]\n", cmd)
		fmt.Fprintf(stderr, "URL: ws://HOST:PORT/PATH, wss://HOST:PORT/PATH or tcp://HOST:PORT; EDGE_TOKEN sets the token\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 || fs.NArg() > 3 {
		fs.Usage()
		return fmt.Errorf("%s: want URL METHOD [PARAMS]", cmd)
	}
	url, method := fs.Arg(0), fs.Arg(1)
	params := json.RawMessage("{}")
	if fs.NArg() == 3 {
		params = json.RawMessage(fs.Arg(2))
		if !json.Valid(params) {
			return fmt.Errorf("%s: PARAMS is not valid JSON: %s", cmd, params)
		}
	}
	opts := client.Options{Token: *token}
	if opts.Token == "" {
		opts.Token = os.Getenv(clientTokenEnv)
	}
	if *caFile != "" || *insecure {
		opts.TLSConfig = &tls.Config{InsecureSkipVerify: *insecure}
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil {
				return fmt.Errorf("%s: --ca: %w", cmd, err)
			}
			opts.TLSConfig.RootCAs = x509.NewCertPool()
			if !opts.TLSConfig.RootCAs.AppendCertsFromPEM(pem) {
				return fmt.Errorf("%s: --ca %s: no PEM certificate in it", cmd, *caFile)
			}
		}
	}
	dialCtx, cancel := context.WithTimeout(ctx, *timeout+*wait)
	defer cancel()
	until := time.Now().Add(*wait)
	c, err := dialWaiting(dialCtx, url, &opts, until)
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "call":
		var result json.RawMessage
		if err := retryUnavailable(dialCtx, until, func() error { return c.Call(dialCtx, method, params, &result) }); err != nil {
			return printError(stdout, err)
		}
		_, err := fmt.Fprintf(stdout, "%s\n", result)
		return err
	default:
		var sub *client.Subscription
		err := retryUnavailable(dialCtx, until, func() (err error) {
			sub, err = c.Subscribe(dialCtx, method, params)
			return err
		})
		if err != nil {
			return printError(stdout, err)
		}
		cancel()
		fmt.Fprintf(stdout, "%s\n", sub.Result)
		for {
			select {
			case ev, ok := <-sub.Events():
				if !ok {
					if err := sub.Err(); err != nil {
						return err
					}
					return nil
				}
				if _, err := fmt.Fprintf(stdout, "%s\n", ev); err != nil {
					return err
				}
			case <-ctx.Done():
				return sub.Close()
			}
		}
	}
}

// dialWaiting dials url, retrying for up to wait while the gateway is not up
// yet: the connection refused, or 503 (over --max-conns, or draining). Any
// other refusal (401, 403, 404, a bad certificate) fails at once.
func dialWaiting(ctx context.Context, url string, opts *client.Options, until time.Time) (c *client.Client, err error) {
	err = retry(ctx, until, retryable, func() error {
		c, err = client.Dial(ctx, url, opts)
		return err
	})
	return c, err
}

// retryUnavailable runs call until it is not answered UPSTREAM_UNAVAILABLE
// (the gateway is up, its upstream not connected yet), or until passes.
func retryUnavailable(ctx context.Context, until time.Time, call func() error) error {
	return retry(ctx, until, func(err error) bool {
		var re *client.Error
		return errors.As(err, &re) && re.DataCode() == "UPSTREAM_UNAVAILABLE"
	}, call)
}

// retry runs f, and again after a growing pause while its error is
// retryable and until has not passed.
func retry(ctx context.Context, until time.Time, retryable func(error) bool, f func() error) error {
	backoff := 20 * time.Millisecond
	for {
		err := f()
		if err == nil || time.Now().After(until) || !retryable(err) {
			return err
		}
		if onDialRetry != nil {
			onDialRetry(err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// onDialRetry, when set (by tests), sees each refusal that is retried.
var onDialRetry func(error)

// retryable: the gateway may not be up yet.
func retryable(err error) bool {
	var se ws.StatusError
	if errors.As(err, &se) {
		return se == 503
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// printError prints an RPC error as a JSON line and returns it.
func printError(w io.Writer, err error) error {
	var re *client.Error
	if errors.As(err, &re) {
		b, _ := json.Marshal(map[string]*client.Error{"error": re})
		fmt.Fprintf(w, "%s\n", b)
	}
	return err
}
