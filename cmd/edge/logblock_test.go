package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/openengine/edge/client"
	"github.com/openengine/edge/internal/poll"
)

// Bounds of TestLogBlockedStderrKeepsServing.
const (
	blockedCalls   = 200             // edge/echo calls in each phase
	blockedCallMax = 2 * time.Second // one call's bound: far above any loop turn
)

// TestLogBlockedStderrKeepsServing is the regression test of issue 24 item 3:
// with stderr a pipe nobody reads, one upstream warning froze every client.
//
// It runs the edge binary on one event loop with its stderr a pipe that the
// test reads only until edge says where it listens, and two exec
// upstreams: "a" writes 3 MB of stderr lines of 10 KiB once called (edge relays them
// to its own stderr, which fills the pipe), "b" answers every call with a
// line that is not JSON (the loop logs "upstream message dropped"). Once the
// pipe is full (a bounded poll on its FIONREAD) the test calls b, so the
// loop logs, and then makes 200 edge/echo calls on the memory backend, each
// bounded by 2 s. Before the fix slog's handler wrote to the pipe under the
// mutex every logger shares: the relay blocked in that write holding it,
// the loop blocked on it at its warning, and the first echo call timed out.
// Now the log lines go to a bounded buffer that drops what does not fit.
//
// It logs the echo latencies (p50, p90, p99, max) with stderr drained and
// with it blocked: a shared CPU, so they are an indication, not a bound.
func TestLogBlockedStderrKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdge(t) // before the watchdog: a cold build can take longer than its bound
	watchdog(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	capacity, err := unix.FcntlInt(w.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--loops", "1", "--profile", "jsonrpc",
		"--upstream-conns", "1", "--upstream-timeout", "1s",
		"--upstream", `a=exec:sh -c "read l; s=aaaaaaaaaa; for i in 1 2 3 4 5 6 7 8 9 10; do s=$s$s; done; yes $s | head -c 3000000 >&2; cat >/dev/null"`,
		"--upstream", `b=exec:sh -c "while read l; do echo garbage; done"`,
		"--route", "edge/echo=memory", "--route", "a/*=a", "--route", "b/*=b")
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	// Read stderr until edge says where it listens and both upstreams
	// are connected, then never again.
	addrs := make(chan string, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		listening := regexp.MustCompile(`msg=listening addr=(\S+)`)
		connected := 0
		addr := ""
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr = m[1]
			}
			if regexp.MustCompile(`msg="upstream connected"`).MatchString(sc.Text()) {
				connected++
			}
			if addr != "" && connected == 2 {
				addrs <- addr
				return
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrs:
	case <-stopped:
		t.Fatal("edge's stderr ended before it listened with both upstreams connected")
	case <-time.After(exitTimeout):
		t.Fatal("edge did not listen with both upstreams connected in time")
	}
	<-stopped

	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	c, err := client.Dial(ctx, "ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	drained, n := echoLatencies(c, "drained")
	if n < blockedCalls {
		t.Fatalf("%d of %d edge/echo calls completed before stderr was blocked", n, blockedCalls)
	}

	// Fill the pipe: a's stderr, relayed (since the fix a burst of
	// --upstream-stderr-rate lines, 1 MB), until a thread of edge is
	// blocked writing it (its wchan; the pipe is full to within its last
	// pages: a write that does not fit a page's rest takes a page of its
	// own).
	go func() { _ = c.Call(context.Background(), "a/spew", nil, nil) }()
	poll.Until(t, exitTimeout, "edge blocked writing its stderr", func() (bool, string) {
		n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ)
		return err == nil && n >= capacity/2 && blockedInPipeWrite(cmd.Process.Pid),
			fmt.Sprintf("%d of %d bytes in the pipe (%v), no thread in pipe_write", n, capacity, err)
	})
	// The loop logs a warning (the answer is not JSON); the call itself
	// times out upstream after 1 s.
	warned := make(chan error, 1)
	go func() { warned <- c.Call(context.Background(), "b/garbage", nil, nil) }()
	blocked, n := echoLatencies(c, "blocked")
	t.Logf("edge/echo latency, %d sequential calls on one loop (shared CPU: an indication only): stderr drained %s; stderr blocked %s", blockedCalls, drained, blocked)
	if n < blockedCalls {
		t.Fatalf("with stderr blocked, %d of %d edge/echo calls completed: call %d took over %s", n, blockedCalls, n+1, blockedCallMax)
	}
	select {
	case err := <-warned: // the garbage came before the timeout: the loop logged
		if err == nil || !strings.Contains(err.Error(), "UPSTREAM_TIMEOUT") {
			t.Fatalf("b/garbage: %v, want UPSTREAM_TIMEOUT", err)
		}
	case <-time.After(readTimeout):
		t.Fatal("b/garbage did not end: the loop is blocked")
	}
}

// blockedInPipeWrite reports whether a thread of process pid sleeps in the
// kernel's pipe write (its wchan).
func blockedInPipeWrite(pid int) bool {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/wchan")
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && strings.HasSuffix(string(b), "pipe_write") {
			return true
		}
	}
	return false
}

// echoLatencies makes blockedCalls sequential edge/echo calls on c, each
// bounded by blockedCallMax, and returns their percentiles and how many
// completed before the first failure.
func echoLatencies(c *client.Client, tag string) (string, int) {
	ds := make([]time.Duration, 0, blockedCalls)
	for i := range blockedCalls {
		ctx, cancel := context.WithTimeout(context.Background(), blockedCallMax)
		v := fmt.Sprintf("%s-%d", tag, i)
		var out map[string]string
		start := time.Now()
		err := c.Call(ctx, "edge/echo", map[string]string{"v": v}, &out)
		cancel()
		if err != nil || out["v"] != v {
			break
		}
		ds = append(ds, time.Since(start))
	}
	if len(ds) == 0 {
		return "none completed", 0
	}
	slices.Sort(ds)
	at := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(time.Microsecond) }
	return fmt.Sprintf("p50 %s p90 %s p99 %s max %s", at(0.5), at(0.9), at(0.99), ds[len(ds)-1].Round(time.Microsecond)), len(ds)
}
