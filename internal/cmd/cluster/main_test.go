package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/internal/testgw"
)

// fakeEnv makes the test binary play natsd or edge (by the name it was
// started under, a symlink in a temporary --bin): it prints the ready lines
// the real ones print, with its arguments, and waits for SIGTERM. With
// fakeExitEnv=<worker id> that worker exits 3 once ready.
const (
	fakeEnv     = "CLUSTER_TEST_FAKE"
	fakeExitEnv = "CLUSTER_TEST_FAKE_EXIT"
)

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) != "" {
		os.Exit(fake(filepath.Base(os.Args[0]), os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fake(name string, args []string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	arg := func(flag string) string {
		for i, a := range args {
			if a == flag && i+1 < len(args) {
				return args[i+1]
			}
		}
		return ""
	}
	all := strings.Join(args, " ")
	switch {
	case name == "natsd":
		fmt.Fprintf(os.Stderr, "level=INFO msg=listening addr=127.0.0.1:1 url=nats://127.0.0.1:1 args=%q\n", all)
	case name == "edge" && len(args) > 0 && args[0] == "worker":
		fmt.Fprintf(os.Stderr, "level=INFO msg=\"worker serving\" prefix=%s id=%s args=%q\n", arg("--prefix"), arg("--id"), all)
		if os.Getenv(fakeExitEnv) == arg("--id") {
			fmt.Fprintln(os.Stderr, "level=ERROR msg=failing")
			return 3
		}
	case name == "edge":
		fmt.Fprintf(os.Stderr, "level=INFO msg=\"admin listening\" url=http://%s/\n", arg("--admin-listen"))
		fmt.Fprintf(os.Stderr, "level=INFO msg=listening url=ws://%s/ args=%q\n", arg("--listen"), all)
	default:
		fmt.Fprintln(os.Stderr, "fake: unknown role", name, args)
		return 2
	}
	<-term
	fmt.Fprintln(os.Stderr, "level=INFO msg=stopped")
	return 0
}

// fakeBin is a --bin directory whose edge and natsd are this test binary.
func fakeBin(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, n := range []string{"edge", "natsd"} {
		if err := os.Symlink(self, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(fakeEnv, "1")
	return dir
}

var pidLine = regexp.MustCompile(`(?m)^  (\S+) .* pid (\d+)$`)

// gone reports whether no process has pid (it exited and was reaped).
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// TestStartsAndStops: the cluster starts NATS, two workers and two edges
// wired to it, prints their URLs and pids, and on cancel stops them all by
// pid: the edges first, then the workers, then NATS.
func TestStartsAndStops(t *testing.T) {
	bin := fakeBin(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testgw.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"--bin", bin, "--edges", "127.0.0.1:7001,127.0.0.1:7002", "--admins", "127.0.0.1:7101,127.0.0.1:7102",
			"--nats-monitor", "", "--jetstream", "--edge-args", "--log-level debug"}, &stdout, &stderr)
	}()
	poll.Until(t, 20*time.Second, "the cluster up", func() (bool, string) {
		return strings.Contains(stdout.String(), "try: "), stdout.String() + stderr.String()
	})
	out := stdout.String()
	for _, want := range []string{
		"nats      nats://127.0.0.1:1 ",
		"edge-a    ws://127.0.0.1:7001/  dashboard http://127.0.0.1:7101/",
		"edge-b    ws://127.0.0.1:7002/  dashboard http://127.0.0.1:7102/",
		"worker-1  prefix work", "worker-2  prefix work",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	logs := stderr.String()
	for _, want := range []string{
		`[edge-a] level=INFO msg=listening url=ws://127.0.0.1:7001/ args="--listen 127.0.0.1:7001 --admin-listen 127.0.0.1:7101 --upstream work=nats://127.0.0.1:1/work --nats nats://127.0.0.1:1 --jetstream --log-level debug"`,
		`[worker-2] level=INFO msg="worker serving" prefix=work id=w2 args="worker --nats nats://127.0.0.1:1 --prefix work --id w2"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	// natsd with JetStream in a temporary store, removed once it stopped.
	store := regexp.MustCompile(`\[nats\] level=INFO msg=listening addr=127.0.0.1:1 url=nats://127.0.0.1:1 args="--listen 127.0.0.1:4222 --jetstream --store-dir (\S+)"`).FindStringSubmatch(logs)
	if store == nil {
		t.Fatalf("natsd not started with JetStream and a store:\n%s", logs)
	}
	if _, err := os.Stat(store[1]); err != nil {
		t.Fatalf("store %s: %v", store[1], err)
	}
	pids := map[string]int{}
	for _, m := range pidLine.FindAllStringSubmatch(out, -1) {
		pids[m[1]], _ = strconv.Atoi(m[2])
	}
	if len(pids) != 5 {
		t.Fatalf("%d pids printed, want 5:\n%s", len(pids), out)
	}
	for n, pid := range pids {
		if gone(pid) {
			t.Fatalf("%s (pid %d) is not running", n, pid)
		}
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(4 * stopGrace):
		t.Fatal("run did not return after its context ended")
	}
	for n, pid := range pids {
		if !gone(pid) {
			t.Errorf("%s (pid %d) still runs", n, pid)
		}
	}
	if _, err := os.Stat(store[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the JetStream store is left behind: %v", err)
	}
	var order []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if name, ok := strings.CutSuffix(l, " level=INFO msg=stopped"); ok {
			order = append(order, name)
		}
	}
	if got := strings.Join(order, " "); got != "[edge-b] [edge-a] [worker-2] [worker-1] [nats]" {
		t.Errorf("stopped in the order %s", got)
	}
}

// TestChildExits: a worker that exits on its own stops the others, and run
// fails naming it.
func TestChildExits(t *testing.T) {
	bin := fakeBin(t)
	t.Setenv(fakeExitEnv, "w2")
	var stdout, stderr testgw.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- run(context.Background(), []string{"--bin", bin, "--edges", "127.0.0.1:7001", "--admins", "127.0.0.1:7101"}, &stdout, &stderr)
	}()
	var err error
	select {
	case err = <-errc:
	case <-time.After(4 * stopGrace):
		t.Fatal("run did not return after a worker exited")
	}
	// The worker may exit before or after everything is up.
	if err == nil || !strings.Contains(err.Error(), "worker-2") {
		t.Fatalf("run: %v, want an error naming worker-2\n%s", err, stderr.String())
	}
	for _, l := range []string{"[nats] level=INFO msg=stopped", "[worker-1] level=INFO msg=stopped"} {
		if !strings.Contains(stderr.String(), l) {
			t.Errorf("logs lack %q:\n%s", l, stderr.String())
		}
	}
}

// TestBadFlags: wrong layouts are refused before anything starts.
func TestBadFlags(t *testing.T) {
	bin := fakeBin(t)
	for _, args := range [][]string{
		{"--bin", bin, "--edges", "a:1,b:2", "--admins", "c:3"},
		{"--bin", bin, "--workers", "0"},
		{"--bin", bin, "--prefix", "a.b"},
		{"--bin", t.TempDir()},
		{"--bin", bin, "extra"},
	} {
		var stdout, stderr testgw.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
