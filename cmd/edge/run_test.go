package main

// An in-process edge for the tests: run() on a goroutine, on ports the
// kernel chooses, its addresses read from its start-up log lines.

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
)

// edgeWait bounds one awaited effect of the tests of an in-process edge: a
// log line, /readyz changing, an upstream connecting.
const edgeWait = 10 * time.Second

// edgeProc is edge's run() serving in-process.
type edgeProc struct {
	t      *testing.T
	admin  string // http://host:port of the admin listener, "" when off
	ws     string // ws://host:port/ of the data listener
	stderr *testgw.Buffer
	stop   context.CancelFunc // as SIGTERM
	done   chan error         // run's result
}

var (
	adminLine  = regexp.MustCompile(`msg="admin listening" addr=(\S+)`)
	listenLine = regexp.MustCompile(`msg=listening addr=(\S+)`)
)

// startEdge runs run() with args on a goroutine and waits for its
// listening log line (and its admin one, with --admin-listen). t.Cleanup
// stops it and requires run to return nil.
func startEdge(t *testing.T, args ...string) *edgeProc {
	t.Helper()
	e, err := tryEdge(t, args...)
	if err != nil {
		t.Fatalf("run returned %v before listening", err)
	}
	return e
}

// tryEdge is startEdge for a start that may be refused: it returns run's
// error when run returns before listening (and registers nothing), else
// the serving edge, stopped by t.Cleanup, which requires run to return nil.
func tryEdge(t *testing.T, args ...string) (*edgeProc, error) {
	t.Helper()
	watchdog(t)
	ctx, cancel := context.WithCancel(context.Background())
	e := &edgeProc{t: t, stderr: &testgw.Buffer{}, stop: cancel, done: make(chan error, 1)}
	go func() { e.done <- run(ctx, args, strings.NewReader(""), io.Discard, e.stderr) }()
	withAdmin := slices.Contains(args, "--admin-listen")
	var early error // run's result when it returned before listening
	returned := false
	poll.Until(t, edgeWait, "edge's listening log lines", func() (bool, string) {
		select {
		case err := <-e.done:
			e.done <- err
			early, returned = err, true
			return true, ""
		default:
		}
		logs := e.stderr.String()
		if m := listenLine.FindStringSubmatch(logs); m != nil {
			e.ws = "ws://" + m[1] + "/"
		}
		if m := adminLine.FindStringSubmatch(logs); m != nil {
			e.admin = "http://" + m[1]
		}
		return e.ws != "" && (e.admin != "" || !withAdmin), logs
	})
	if returned {
		cancel()
		if early == nil {
			early = fmt.Errorf("run returned nil before listening")
		}
		return nil, early
	}
	t.Cleanup(func() {
		cancel()
		if err := e.wait(); err != nil {
			t.Errorf("run: %v", err)
		}
		if t.Failed() {
			t.Logf("edge stderr:\n%s", e.stderr.String())
		}
	})
	return e, nil
}

// wait returns run's result, or an error if it does not come within
// exitTimeout. Safe to call again.
func (e *edgeProc) wait() error {
	select {
	case err := <-e.done:
		e.done <- err
		return err
	case <-time.After(exitTimeout):
		return fmt.Errorf("run did not return within %s", exitTimeout)
	}
}

// returned reports whether run has returned.
func (e *edgeProc) returned() bool {
	select {
	case err := <-e.done:
		e.done <- err
		return true
	default:
		return false
	}
}
