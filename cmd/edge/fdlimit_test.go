package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/openengine/edge/client"
	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
)

// Bounds of TestAcceptEMFILEKeepsServing.
const (
	fdLimit     = 64  // RLIMIT_NOFILE of the edge process
	extraConns  = 100 // plain TCP connections opened on top: more than the limit allows
	cpuWindow   = 2 * time.Second
	maxCPUShare = 0.2 // of one core while at the limit: a spinning acceptor takes all of it
	clockTicks  = 100 // USER_HZ: the unit of utime and stime in /proc/PID/stat
)

// fdWarning is the start of the log message edge writes when it pauses
// accepting for want of descriptors.
const fdWarning = "out of file descriptors"

// TestAcceptEMFILEKeepsServing is the regression test for issue 10 item 1:
// running out of file descriptors stopped the server. gnet's acceptor treats
// EMFILE from accept4 as fatal: the main reactor's loop returns, the engine
// shuts down and edge exited with status 2, dropping every connection.
//
// It runs the edge binary with RLIMIT_NOFILE 64, upgrades one WebSocket,
// then opens 100 plain TCP connections: the kernel completes them all (the
// listen backlog), edge accepts until accept4 fails with EMFILE and the rest
// wait in the backlog. CONTRACT.md section 6: the process must stay up, the
// WebSocket must still be answered, edge must not spin while it cannot accept
// (its CPU time over 2 s at the limit stays under a fifth of a core), and
// once the extra connections are closed a new client must be accepted and
// answered. Every wait is a bounded poll on a condition.
func TestAcceptEMFILEKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	watchdog(t)
	bin := buildEdge(t)
	stderr := &testgw.Buffer{}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--loops", "1")
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("edge stderr:\n%s", stderr.String())
		}
	})
	// Lowering a limit of one's own child needs no privilege.
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: fdLimit, Max: fdLimit}, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}

	// waitFor polls until cond holds, failing at once if edge exits, or once
	// exitTimeout passes.
	waitFor := func(what string, cond func() (bool, string)) {
		t.Helper()
		poll.Until(t, exitTimeout, what, func() (bool, string) {
			select {
			case err := <-exited:
				exited <- err
				t.Fatalf("edge exited (%v) while waiting for %s", err, what)
			default:
			}
			return cond()
		})
	}
	listening := regexp.MustCompile(`msg=listening addr=(\S+)`)
	var addr string
	waitFor("the listening log line", func() (bool, string) {
		m := listening.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil, "not logged"
	})
	url := "ws://" + addr + "/"

	ws := fdDial(t, url)
	defer ws.Close()
	fdEcho(t, ws, "before")

	extra := make([]net.Conn, 0, extraConns)
	defer func() {
		for _, c := range extra {
			c.Close()
		}
	}()
	for range extraConns {
		c, err := net.DialTimeout("tcp", addr, readTimeout)
		if err != nil {
			select {
			case werr := <-exited:
				exited <- werr
				t.Fatalf("edge exited (%v) after accepting %d extra connections", werr, len(extra))
			default:
			}
			t.Fatalf("dial extra connection %d: %v", len(extra), err)
		}
		extra = append(extra, c)
	}
	waitFor(fmt.Sprintf("edge at its limit of %d descriptors", fdLimit), func() (bool, string) {
		n := openFDs(t, pid)
		return n >= fdLimit-1, fmt.Sprintf("%d open", n)
	})

	// At the limit, with connections waiting in the backlog.
	for i := range 3 {
		fdEcho(t, ws, "at-limit-"+strconv.Itoa(i))
	}
	cpu0, start := cpuTicks(t, pid), time.Now()
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("edge exited at the descriptor limit: %v", err)
	case <-time.After(cpuWindow):
	}
	share := float64(cpuTicks(t, pid)-cpu0) / clockTicks / time.Since(start).Seconds()
	t.Logf("edge CPU at the descriptor limit: %.1f%% of one core over %s", 100*share, cpuWindow)
	if share > maxCPUShare {
		t.Errorf("edge used %.0f%% of a core while it could not accept, want under %.0f%% (spinning on EMFILE?)", 100*share, 100*maxCPUShare)
	}
	if n := openFDs(t, pid); n < fdLimit-1 {
		t.Fatalf("edge left its descriptor limit during the measurement: %d open", n)
	}
	fdEcho(t, ws, "after-window")

	// Free the descriptors: a new client is accepted and answered.
	for _, c := range extra {
		c.Close()
	}
	extra = extra[:0]
	var fresh *client.Client
	waitFor("a new client accepted and answered", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := client.Dial(ctx, url, nil)
		if err != nil {
			return false, "dial: " + err.Error()
		}
		var out map[string]string
		if err := c.Call(ctx, "edge/echo", map[string]string{"v": "fresh"}, &out); err != nil || out["v"] != "fresh" {
			c.Close()
			return false, fmt.Sprintf("echo: %v %v", out, err)
		}
		fresh = c
		return true, ""
	})
	fresh.Close()
	fdEcho(t, ws, "after")
	ws.Close()

	if n := strings.Count(stderr.String(), fdWarning); n < 1 || n > 3 {
		t.Errorf("edge logged %q %d times, want once per burst (1 to 3)", fdWarning, n)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("edge exited with %v after SIGTERM, want status 0", err)
		}
	case <-time.After(exitTimeout):
		t.Fatalf("edge still running %s after SIGTERM", exitTimeout)
	}
}

// fdDial connects a WebSocket client to url within readTimeout.
func fdDial(t *testing.T, url string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	c, err := client.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return c
}

// fdEcho requires c's edge/echo of v to be answered within readTimeout.
func fdEcho(t *testing.T, c *client.Client, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var out map[string]string
	if err := c.Call(ctx, "edge/echo", map[string]string{"v": v}, &out); err != nil {
		t.Fatalf("edge/echo %q: %v", v, err)
	}
	if out["v"] != v {
		t.Fatalf("edge/echo %q answered %v", v, out)
	}
}

// openFDs counts the descriptors process pid has open.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatalf("open descriptors of %d: %v", pid, err)
	}
	return len(ents)
}

// cpuTicks returns the user plus system CPU time of process pid, in clock
// ticks (proc(5): fields 14 and 15 of /proc/PID/stat).
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	s := string(b)
	// The command name (field 2) may hold spaces; fields after it do not.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		t.Fatalf("stat of %d: %q", pid, s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		t.Fatalf("stat of %d: %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	return utime + stime
}
