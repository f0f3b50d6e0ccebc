// Command cluster is `make cluster`: a local demo of several edges over NATS
// on loopback (CONTRACT.md section 13). It starts, each as a child process
// it stops by pid:
//
//   - a NATS server (natsd, built from the nats-server Go module);
//   - two edges, each with `--upstream work=nats://<natsd>/work`: every
//     method but those edge serves itself goes over NATS to a worker; and
//     `--nats nats://<natsd>`: edge/publish on one reaches the edge/topic
//     subscribers of both;
//   - two workers, `edge worker --nats nats://<natsd> --prefix work`.
//
// It prints the URLs once every process is ready, and stops everything on
// SIGINT or SIGTERM (Ctrl-C): the edges first (they drain), then the
// workers, then the NATS server. If one of them exits on its own, it stops
// the others and fails.
//
//	cluster --bin DIR [--nats HOST:PORT] [--edges L1,L2] [--admins A1,A2] [--workers N]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Time limits of the children.
const (
	readyTimeout = 20 * time.Second // from start to the ready line
	stopGrace    = 10 * time.Second // from SIGTERM to SIGKILL
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// config is the demo's layout.
type config struct {
	bin       string   // directory holding edge and natsd
	nats      string   // natsd's --listen
	monitor   string   // natsd's --http ("" off)
	edges     []string // each edge's --listen
	admins    []string // each edge's --admin-listen
	workers   int
	prefix    string
	jetstream bool     // natsd with JetStream (a temporary store), edges with --jetstream
	edgeArgs  []string // more flags for every edge
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.bin, "bin", "bin", "directory holding the edge and natsd binaries")
	fs.StringVar(&c.nats, "nats", "127.0.0.1:4222", "the NATS server's client address (port 0: a free port)")
	fs.StringVar(&c.monitor, "nats-monitor", "127.0.0.1:8222", "the NATS server's monitoring address (empty: off)")
	edges := fs.String("edges", "127.0.0.1:8081,127.0.0.1:8082", "the edges' WebSocket listen addresses, comma-separated (one edge each)")
	admins := fs.String("admins", "127.0.0.1:9091,127.0.0.1:9092", "the edges' admin listen addresses (dashboard), comma-separated, one per edge")
	fs.IntVar(&c.workers, "workers", 2, "how many workers")
	fs.StringVar(&c.prefix, "prefix", "work", "the workers' subject prefix and queue group")
	fs.BoolVar(&c.jetstream, "jetstream", false, "JetStream: natsd keeps the topics (in a temporary store, removed at exit), the edges replay from a cursor")
	edgeArgs := fs.String("edge-args", "", "more flags for every edge, space-separated")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.edges, c.admins = split(*edges), split(*admins)
	c.edgeArgs = strings.Fields(*edgeArgs)
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if len(c.edges) == 0 {
		errs = append(errs, errors.New("--edges: at least one edge"))
	}
	if len(c.admins) != len(c.edges) {
		errs = append(errs, fmt.Errorf("--admins: %d addresses for %d edges", len(c.admins), len(c.edges)))
	}
	if c.workers < 1 {
		errs = append(errs, errors.New("--workers: at least one"))
	}
	if c.prefix == "" || strings.ContainsAny(c.prefix, " .*>") {
		errs = append(errs, fmt.Errorf("--prefix %q: one NATS subject token", c.prefix))
	}
	for _, b := range []string{"edge", "natsd"} {
		if _, err := os.Stat(filepath.Join(c.bin, b)); err != nil {
			errs = append(errs, fmt.Errorf("--bin: %w (make cluster builds it)", err))
		}
	}
	return c, errors.Join(errs...)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// child is one process of the demo.
type child struct {
	name string
	cmd  *exec.Cmd
	// ready recognises the child's ready line; fields are then read from
	// it (url, admin url).
	ready  func(line string) bool
	fields map[string]string
	readyc chan struct{} // closed once ready has matched
	done   chan struct{} // closed once the process has exited
	err    error         // its exit, once done
}

// start starts c.cmd with its output copied to out, each line prefixed with
// the child's name, and watches for its ready line.
func (c *child) start(out io.Writer, outMu *sync.Mutex) error {
	// Its own process group: a terminal's Ctrl-C reaches this command only,
	// which then stops the children in order. Pdeathsig: none outlives it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	c.cmd.Stdout, c.cmd.Stderr = pw, pw
	c.readyc, c.done, c.fields = make(chan struct{}), make(chan struct{}), map[string]string{}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	var fieldsMu sync.Mutex
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			outMu.Lock()
			fmt.Fprintf(out, "[%s] %s\n", c.name, line)
			outMu.Unlock()
			if seen {
				continue
			}
			fieldsMu.Lock()
			if strings.Contains(line, `msg="admin listening"`) {
				c.fields["admin"] = field(line, "url")
			}
			if c.ready(line) {
				c.fields["url"] = field(line, "url")
				c.fields["monitor"] = field(line, "monitor")
				seen = true
				close(c.readyc)
			}
			fieldsMu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		c.err = c.cmd.Wait()
		pw.Close()
		<-scanned // its last lines are out before it counts as stopped
		close(c.done)
	}()
	return nil
}

// field returns the value of key=value in a log line ("" if absent).
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// stop sends SIGTERM to the child, by its pid, and SIGKILL after stopGrace.
func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.cmd.Process.Kill()
		<-c.done
	}
}

func msgIs(want string) func(string) bool {
	return func(line string) bool {
		return strings.Contains(line, "msg="+want+" ") || strings.Contains(line, `msg="`+want+`"`)
	}
}

// run starts the demo and serves until ctx is cancelled.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	edgeBin, natsdBin := filepath.Join(c.bin, "edge"), filepath.Join(c.bin, "natsd")
	natsArgs := []string{"--listen", c.nats}
	if c.monitor != "" {
		natsArgs = append(natsArgs, "--http", c.monitor)
	}
	var edgeJS []string
	if c.jetstream {
		store, err := os.MkdirTemp("", "edge-cluster-js-")
		if err != nil {
			return err
		}
		// Removed once every child has stopped: deferred before their stop.
		defer os.RemoveAll(store)
		natsArgs = append(natsArgs, "--jetstream", "--store-dir", store)
		edgeJS = []string{"--jetstream"}
	}
	var outMu sync.Mutex
	var started []*child
	// Stopped in the reverse order of start: edges, workers, NATS.
	defer func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].stop()
		}
	}()
	launch := func(ch *child) error {
		if err := ch.start(stderr, &outMu); err != nil {
			return err
		}
		started = append(started, ch)
		t := time.NewTimer(readyTimeout)
		defer t.Stop()
		select {
		case <-ch.readyc:
			return nil
		case <-ch.done:
			return fmt.Errorf("%s exited before it was ready: %v", ch.name, ch.err)
		case <-t.C:
			return fmt.Errorf("%s not ready within %s", ch.name, readyTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	ns := &child{name: "nats", cmd: exec.Command(natsdBin, natsArgs...), ready: msgIs("listening")}
	if err := launch(ns); err != nil {
		return err
	}
	natsURL := ns.fields["url"]
	workers := make([]*child, c.workers)
	for i := range workers {
		workers[i] = &child{name: fmt.Sprintf("worker-%d", i+1), ready: msgIs("worker serving"),
			cmd: exec.Command(edgeBin, "worker", "--nats", natsURL, "--prefix", c.prefix, "--id", fmt.Sprintf("w%d", i+1))}
		if err := launch(workers[i]); err != nil {
			return err
		}
	}
	edges := make([]*child, len(c.edges))
	for i := range edges {
		a := []string{"--listen", c.edges[i], "--admin-listen", c.admins[i],
			"--upstream", "work=nats://" + strings.TrimPrefix(natsURL, "nats://") + "/" + c.prefix,
			"--nats", natsURL} // topics across the edges
		a = append(append(a, edgeJS...), c.edgeArgs...)
		edges[i] = &child{name: "edge-" + string(rune('a'+i)), ready: msgIs("listening"), cmd: exec.Command(edgeBin, a...)}
		if err := launch(edges[i]); err != nil {
			return err
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "cluster up: NATS, %d edges, %d workers on loopback (Ctrl-C stops them all)\n", len(edges), len(workers))
	fmt.Fprintf(&b, "  nats      %s", natsURL)
	if m := ns.fields["monitor"]; m != "" {
		fmt.Fprintf(&b, "  monitor %s", m)
	}
	fmt.Fprintf(&b, "  pid %d\n", ns.cmd.Process.Pid)
	for _, e := range edges {
		fmt.Fprintf(&b, "  %-9s %s  dashboard %s  pid %d\n", e.name, e.fields["url"], e.fields["admin"], e.cmd.Process.Pid)
	}
	for _, w := range workers {
		fmt.Fprintf(&b, "  %-9s prefix %s  pid %d\n", w.name, c.prefix, w.cmd.Process.Pid)
	}
	last := edges[len(edges)-1].fields["url"]
	fmt.Fprintf(&b, "try: %s call %s edge/echo '{\"hello\":1}'\n", edgeBin, edges[0].fields["url"])
	fmt.Fprintf(&b, "     %s subscribe %s edge/topic '{\"name\":\"news\"}' &\n", edgeBin, last)
	fmt.Fprintf(&b, "     %s call %s edge/publish '{\"name\":\"news\",\"data\":\"hi\"}'\n", edgeBin, edges[0].fields["url"])
	outMu.Lock()
	io.WriteString(stdout, b.String())
	outMu.Unlock()

	// Serve until stopped, or until a child exits on its own.
	exited := make(chan *child, len(started))
	for _, ch := range started {
		go func() {
			select {
			case <-ch.done:
				exited <- ch
			case <-ctx.Done():
			}
		}()
	}
	select {
	case <-ctx.Done():
		outMu.Lock()
		fmt.Fprintln(stdout, "cluster: stopping")
		outMu.Unlock()
		return nil
	case ch := <-exited:
		return fmt.Errorf("%s exited: %v; stopping the others", ch.name, ch.err)
	}
}
