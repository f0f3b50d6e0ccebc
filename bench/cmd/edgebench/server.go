package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// peerNames are the servers the suite knows, edge first.
var peerNames = []string{"edge", "raw", "geth", "centrifuge", "nbio", "gorilla"}

// baseEdge is edge built from -base-src: the same server as edge, started
// the same way, from another checkout (the baseline of a change).
const baseEdge = "edge-base"

// isEdge reports whether peer is an edge server (edge or its baseline).
func isEdge(peer string) bool { return peer == "edge" || peer == baseEdge }

// dialectOf is the load dialect of peer.
func dialectOf(peer string) string {
	if peer == baseEdge {
		return "edge"
	}
	return peer
}

// build compiles edge and edge-base (cmd/edge of the edge module at
// edgeSrc[peer]: usually root for edge, -base-src for edge-base) and each
// available peer (root's bench/peers/<name>, each its own module) into dir.
// A peer that is missing or does not build is reported in failed and left
// out; an edge failing is an error.
func build(ctx context.Context, goBin, root string, edgeSrc map[string]string, dir string, peers []string, logf func(string, ...any)) (bins map[string]string, failed map[string]error, err error) {
	bins, failed = map[string]string{}, map[string]error{}
	for _, p := range peers {
		out := filepath.Join(dir, p)
		var cmd *exec.Cmd
		if isEdge(p) {
			cmd = exec.CommandContext(ctx, goBin, "build", "-o", out, "./cmd/edge")
			cmd.Dir = edgeSrc[p]
		} else {
			src := filepath.Join(root, "bench", "peers", p)
			if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
				failed[p] = fmt.Errorf("no peer at %s", src)
				continue
			}
			cmd = exec.CommandContext(ctx, goBin, "build", "-o", out, ".")
			cmd.Dir = src
		}
		start := time.Now()
		if b, err := cmd.CombinedOutput(); err != nil {
			e := fmt.Errorf("go build %s: %w\n%s", p, err, tail(string(b), 2000))
			if isEdge(p) {
				return nil, nil, e
			}
			failed[p] = e
			continue
		}
		logf("built %s in %.1fs", p, time.Since(start).Seconds())
		bins[p] = out
	}
	return bins, failed, nil
}

// buildNatsd compiles the NATS server of C1 (internal/cmd/natsd of the root
// module, the nats-server Go module) into dir.
func buildNatsd(ctx context.Context, goBin, root, dir string) (string, error) {
	out := filepath.Join(dir, "natsd")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, "./internal/cmd/natsd")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build natsd: %w\n%s", err, tail(string(b), 2000))
	}
	return out, nil
}

// server is one running server process.
type server struct {
	peer string
	cmd  *exec.Cmd
	pid  int
	addr string
	cpus string // Cpus_allowed_list as observed

	pprofMu   sync.Mutex
	pprofAddr string // guarded by pprofMu: edge's --pprof-listen address, if any

	logMu sync.Mutex
	log   *os.File

	done    chan struct{} // closed when the process has exited
	waitErr error

	// ready recognises the line that says the server is ready and returns
	// its address (immutable after launch).
	ready func(line string) string
	// nginx: its worker's pid (pid is the master's) and its temporary
	// directory, removed by stop. Immutable after startNginx.
	worker int
	tmp    string
	// ndjson is edge's --ndjson-listen address, from its listening line;
	// set before the address is handed over, read after.
	ndjson string

	// gctrace (GODEBUG=gctrace=1): the live heap after the last GC and how
	// many client connections were open then.
	gcConns  func() int64
	gcHeapMB atomic.Int64
	gcStack  atomic.Int64
	gcAtConn atomic.Int64
	gcCount  atomic.Int64
}

// serverSpec says how to start a server.
type serverSpec struct {
	peer    string
	bin     string
	logPath string
	pin     pinning
	gctrace bool
	gcConns func() int64 // client connections open now (for gctrace)
	pprof   bool         // edge only: serve net/http/pprof on a loopback port
	extra   []string     // edge only: more flags
	tls     *certFiles   // serve wss:// with this certificate (edge and gorilla take the same flags)
}

var gcLine = regexp.MustCompile(`^gc \d+ @.*?(\d+)->(\d+)->(\d+) MB, \d+ MB goal, (\d+) MB stacks`)

// startServer starts a server on 127.0.0.1 with a kernel-chosen port, pinned
// to the server CPU with GOMAXPROCS=1 (edge also with --loops 1), and waits
// for the line that says where it listens: edge logs `msg=listening
// addr=host:port` on stderr, the peers print `listening host:port` on stdout.
func startServer(ctx context.Context, sp serverSpec) (*server, error) {
	args := []string{"--listen", "127.0.0.1:0"}
	if isEdge(sp.peer) {
		args = append(args, "--loops", "1")
		if sp.pprof && sp.peer == baseEdge {
			args = append(args, baseEdgePprofArgs...)
		} else if sp.pprof {
			args = append(args, edgePprofArgs...)
		}
		args = append(args, sp.extra...)
	}
	args = append(args, sp.tls.args()...)
	cmd := exec.Command(sp.bin, args...)
	env := append(os.Environ(), "GOMAXPROCS=1")
	if sp.gctrace {
		env = append(env, "GODEBUG=gctrace=1")
	}
	cmd.Env = env
	return launch(ctx, sp.peer, cmd, sp.logPath, sp.pin, sp.gcConns, listeningLine)
}

// listeningLine recognises the line with which a server says it listens
// (edge: `msg=listening addr=host:port`, the peers: `listening host:port`)
// and returns the address.
func listeningLine(line string) string {
	if strings.Contains(line, "listening") {
		return listenAddr(line)
	}
	return ""
}

// launch starts cmd pinned to the server CPU, copies its output to logPath,
// and waits until ready recognises a line of it (its value becomes s.addr).
func launch(ctx context.Context, name string, cmd *exec.Cmd, logPath string, pin pinning, gcConns func() int64, ready func(line string) string) (*server, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	s := &server{peer: name, cmd: cmd, log: lf, done: make(chan struct{}), gcConns: gcConns, ready: ready}
	cpu := -1
	if pin.on {
		cpu = pin.server
	}
	if err := startOnThread(cpu, cmd.Start, s.done); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.pid = cmd.Process.Pid
	addrc := make(chan string, 2)
	var readers sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			s.scan(r, addrc)
		}()
	}
	go func() {
		readers.Wait() // the pipes must be drained before Wait
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if cpus, err := procStatus(s.pid, "Cpus_allowed_list"); err == nil {
		s.cpus = cpus
	}
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case s.addr = <-addrc:
		return s, nil
	case <-s.done:
		s.closeLog()
		return nil, fmt.Errorf("%s exited before listening: %v\n%s", name, s.waitErr, tailFile(logPath, 2000))
	case <-t.C:
	case <-ctx.Done():
	}
	s.stop(2 * time.Second)
	return nil, fmt.Errorf("%s did not report a listening address in time\n%s", name, tailFile(logPath, 2000))
}

// scan copies a server's output to its log, looking for the listening line
// and gctrace lines.
func (s *server) scan(r io.Reader, addrc chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		s.logMu.Lock()
		if s.log != nil {
			fmt.Fprintln(s.log, line)
		}
		s.logMu.Unlock()
		if m := gcLine.FindStringSubmatch(line); m != nil {
			live, _ := strconv.ParseInt(m[3], 10, 64)
			stacks, _ := strconv.ParseInt(m[4], 10, 64)
			s.gcHeapMB.Store(live)
			s.gcStack.Store(stacks)
			s.gcCount.Add(1)
			if s.gcConns != nil {
				s.gcAtConn.Store(s.gcConns())
			}
			continue
		}
		if strings.Contains(line, "msg=pprof") || strings.Contains(line, `msg="admin listening"`) {
			if a := listenAddr(line); a != "" {
				s.pprofMu.Lock()
				s.pprofAddr = a
				s.pprofMu.Unlock()
			}
			continue
		}
		if !found {
			if a := s.ready(line); a != "" {
				found = true
				if v := fieldValue(line, "ndjson"); v != "" {
					s.ndjson = v
				}
				addrc <- a
			}
		}
	}
}

// pprof returns edge's pprof address ("" when it serves none).
func (s *server) pprof() string {
	s.pprofMu.Lock()
	defer s.pprofMu.Unlock()
	return s.pprofAddr
}

// fieldValue returns the value of key=value in a log line ("" if absent).
func fieldValue(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// listenAddr extracts host:port from `... addr=H:P ...` or `listening H:P`.
func listenAddr(line string) string {
	if v := fieldValue(line, "addr"); v != "" {
		return v
	}
	f := strings.Fields(line)
	for i, w := range f {
		if w == "listening" && i+1 < len(f) && strings.Contains(f[i+1], ":") {
			return f[i+1]
		}
	}
	return ""
}

// stop sends SIGTERM, waits up to grace, then SIGKILL. Only this process, by
// its pid.
func (s *server) stop(grace time.Duration) error {
	defer s.closeLog()
	defer func() {
		s.reapWorker()
		if s.tmp != "" {
			os.RemoveAll(s.tmp)
		}
	}()
	select {
	case <-s.done:
		return s.exitError()
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.done:
		return s.exitError()
	case <-t.C:
	}
	s.cmd.Process.Kill()
	<-s.done
	return fmt.Errorf("%s: did not exit within %s of SIGTERM; killed", s.peer, grace)
}

func (s *server) exitError() error {
	var ee *exec.ExitError
	if s.waitErr != nil && !errors.As(s.waitErr, &ee) {
		return s.waitErr
	}
	if ee != nil && !ee.Success() {
		// A server killed by our SIGTERM without a handler is not a failure
		// of the run; a non-zero exit is worth a note only.
		return fmt.Errorf("%s exited: %v", s.peer, s.waitErr)
	}
	return nil
}

func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *server) closeLog() {
	s.logMu.Lock()
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
	s.logMu.Unlock()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), n)
}
