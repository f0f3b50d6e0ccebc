package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	bin := buildEdge(t) // before the watchdog: a cold build can take longer than its bound
	watchdog(t)
	e := startChild(t, exec.Command(bin, "--listen", "127.0.0.1:0", "--loops", "1"))
	pid, exited, stderr, waitFor, addr, url := e.pid, e.exited, e.stderr, e.waitFor, e.addr, e.url
	// Lowering a limit of one's own child needs no privilege.
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: fdLimit, Max: fdLimit}, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}

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
	e.checkNoSpin()
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
	e.stop()
}

// child is an edge process started by startChild.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	pid    int
	exited chan error // receives cmd.Wait's result; put back by whoever takes it
	stderr *testgw.Buffer
	addr   string // the WebSocket listener's address, from the log
	url    string // ws://addr/
}

// startChild starts cmd (edge, or a shell that execs it), kills it in
// t.Cleanup if it is still running, and waits for its listening log line.
func startChild(t *testing.T, cmd *exec.Cmd) *child {
	t.Helper()
	e := &child{t: t, cmd: cmd, exited: make(chan error, 1), stderr: &testgw.Buffer{}}
	cmd.Stderr = e.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.pid = cmd.Process.Pid
	go func() { e.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-e.exited:
		default:
			_ = cmd.Process.Kill()
			<-e.exited
		}
		if t.Failed() {
			t.Logf("edge stderr:\n%s", e.stderr.String())
		}
	})
	listening := regexp.MustCompile(`msg=listening addr=(\S+)`)
	e.waitFor("the listening log line", func() (bool, string) {
		m := listening.FindStringSubmatch(e.stderr.String())
		if m != nil {
			e.addr = m[1]
		}
		return m != nil, "not logged"
	})
	e.url = "ws://" + e.addr + "/"
	return e
}

// waitFor polls until cond holds, failing at once if edge exits, or once
// exitTimeout passes.
func (e *child) waitFor(what string, cond func() (bool, string)) {
	e.t.Helper()
	poll.Until(e.t, exitTimeout, what, func() (bool, string) {
		select {
		case err := <-e.exited:
			e.exited <- err
			e.t.Fatalf("edge exited (%v) while waiting for %s", err, what)
		default:
		}
		return cond()
	})
}

// checkNoSpin measures edge's CPU time over cpuWindow and fails if it is
// over maxCPUShare of a core (an acceptor spinning on EMFILE takes all of
// one) or if edge exits meanwhile.
func (e *child) checkNoSpin() {
	e.t.Helper()
	cpu0, start := cpuTicks(e.t, e.pid), time.Now()
	select {
	case err := <-e.exited:
		e.exited <- err
		e.t.Fatalf("edge exited at the descriptor limit: %v", err)
	case <-time.After(cpuWindow):
	}
	share := float64(cpuTicks(e.t, e.pid)-cpu0) / clockTicks / time.Since(start).Seconds()
	e.t.Logf("edge CPU at the descriptor limit: %.1f%% of one core over %s", 100*share, cpuWindow)
	if share > maxCPUShare {
		e.t.Errorf("edge used %.0f%% of a core while it could not accept, want under %.0f%% (spinning on EMFILE?)", 100*share, 100*maxCPUShare)
	}
}

// stop sends SIGTERM and requires edge to exit with status 0.
func (e *child) stop() {
	e.t.Helper()
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		e.t.Fatal(err)
	}
	select {
	case err := <-e.exited:
		e.exited <- err
		if err != nil {
			e.t.Fatalf("edge exited with %v after SIGTERM, want status 0", err)
		}
	case <-time.After(exitTimeout):
		e.t.Fatalf("edge still running %s after SIGTERM", exitTimeout)
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

// Bounds of TestFDLimitDefaultMaxConns.
const (
	lowFDLimit  = 64 // the soft open-file limit edge starts with
	lowMaxConns = 32 // its default --max-conns: half the limit (minus 128 would leave none)
	idleConns   = 60 // plain TCP connections on top: more than the descriptors left
)

// TestFDLimitDefaultMaxConns is the descriptor-exhaustion row of issue 12:
// edge started with a soft open-file limit of 64 (ulimit -n in the child)
// derives its default --max-conns from it: the limit minus 128 would be
// negative, so half the limit, 32. The 33rd upgrade gets 503 with
// Retry-After: 1 while descriptors remain. Then idle TCP connections (each
// holds a descriptor until its handshake timeout) take edge past its
// descriptor limit: it keeps serving the open WebSocket, does not spin
// (CPU time from /proc/PID/stat), and once they leave it answers upgrades
// again: 503 while the 32 are open, 101 once they close too.
func TestFDLimitDefaultMaxConns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdge(t) // before the watchdog: a cold build can take longer than its bound
	watchdog(t)
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n `+strconv.Itoa(lowFDLimit)+` && exec "$0" "$@"`,
		bin, "--listen", "127.0.0.1:0", "--loops", "1")
	e := startChild(t, cmd)
	if n := openFDs(t, e.pid); n > lowFDLimit-lowMaxConns-8 {
		t.Fatalf("edge holds %d descriptors at start: too many for this test's arithmetic", n)
	}

	ws := fdDial(t, e.url) // one of the 32
	defer ws.Close()
	fdEcho(t, ws, "before")
	var conns []net.Conn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
		conns = conns[:0]
	}
	defer closeAll()
	for range lowMaxConns - 1 {
		c, resp := rawUpgrade(t, e.addr)
		conns = append(conns, c)
		if resp.StatusCode != 101 {
			t.Fatalf("upgrade %d of %d: status %d, want 101", len(conns)+1, lowMaxConns, resp.StatusCode)
		}
	}
	c, resp := rawUpgrade(t, e.addr)
	c.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("upgrade %d: status %d Retry-After %q, want 503 and 1 (default --max-conns %d)", lowMaxConns+1, resp.StatusCode, resp.Header.Get("Retry-After"), lowMaxConns)
	}

	// Past the descriptor limit.
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range idleConns {
		c, err := net.DialTimeout("tcp", e.addr, readTimeout)
		if err != nil {
			t.Fatalf("dial idle connection %d: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	e.waitFor(fmt.Sprintf("edge at its limit of %d descriptors", lowFDLimit), func() (bool, string) {
		n := openFDs(t, e.pid)
		return n >= lowFDLimit-1, fmt.Sprintf("%d open", n)
	})
	fdEcho(t, ws, "at-limit")
	e.checkNoSpin()
	fdEcho(t, ws, "after-window")

	// The idle connections leave: an upgrade is accepted and refused 503
	// (the 32 are still open); once those leave, one is served.
	for _, c := range idle {
		c.Close()
	}
	idle = idle[:0]
	c, resp = rawUpgrade(t, e.addr)
	c.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("upgrade with descriptors free and --max-conns reached: status %d, want 503", resp.StatusCode)
	}
	closeAll()
	e.waitFor("a new client accepted and answered", func() (bool, string) {
		c, resp := rawUpgrade(t, e.addr)
		c.Close()
		return resp.StatusCode == 101, resp.Status
	})
	fdEcho(t, ws, "after")
	ws.Close()
	e.stop()
}

// rawUpgrade sends a WebSocket upgrade to addr on a new connection and
// reads the answer's head within readTimeout.
func rawUpgrade(t *testing.T, addr string) (net.Conn, *http.Response) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, readTimeout)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(readTimeout))
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: ZWRnZS1lMmUta2V5LTE2Yg==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodGet})
	if err != nil {
		conn.Close()
		t.Fatalf("upgrade answer: %v", err)
	}
	conn.SetDeadline(time.Time{})
	return conn, resp
}
