package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/openengine/edge/client"
)

// runClient serves the operator subcommands:
//
//	edge call [--timeout D] URL METHOD [PARAMS]
//	edge subscribe [--timeout D] URL METHOD [PARAMS]
//
// URL is ws://host:port/path or tcp://host:port (NDJSON). PARAMS is a JSON
// object (default {}). call prints the result as one JSON line; subscribe
// prints the establishment result, then each event's params, one JSON line
// each, until the subscription ends or ctx is cancelled. An RPC error is
// printed as {"error":...} and fails the command.
func runClient(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("edge "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 30*time.Second, "bound on dialing and, for call, on the whole call")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: edge %s [--timeout D] URL METHOD [PARAMS]\n", cmd)
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
	dialCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := client.Dial(dialCtx, url, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "call":
		var result json.RawMessage
		if err := c.Call(dialCtx, method, params, &result); err != nil {
			return printError(stdout, err)
		}
		_, err := fmt.Fprintf(stdout, "%s\n", result)
		return err
	default:
		sub, err := c.Subscribe(dialCtx, method, params)
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

// printError prints an RPC error as a JSON line and returns it.
func printError(w io.Writer, err error) error {
	var re *client.Error
	if errors.As(err, &re) {
		b, _ := json.Marshal(map[string]*client.Error{"error": re})
		fmt.Fprintf(w, "%s\n", b)
	}
	return err
}
