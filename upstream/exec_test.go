package upstream

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
)

// logBuffer collects log output for assertions. Safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestExecShutdownSteps: closing an exec upstream gives the child EOF on
// stdin, then SIGTERM after KillTimeout, then SIGKILL after KillTimeout again
// (CONTRACT.md section 10), and waits for it; the child's stderr lines are
// logged with the upstream's name.
func TestExecShutdownSteps(t *testing.T) {
	const kill = 200 * time.Millisecond
	for _, tt := range []struct {
		name, cmd, status string
		least             time.Duration
	}{
		{"exits at EOF", `exec:sh -c "echo hello >&2; cat >/dev/null"`, "status=0", 0},
		{"exits at SIGTERM", `exec:sh -c "echo hello >&2; exec sleep 60"`, "signal: terminated", kill},
		{"ignores SIGTERM", `exec:sh -c "trap '' TERM; echo hello >&2; while :; do sleep 0.05; done"`, "signal: killed", 2 * kill},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := &logBuffer{}
			r, err := ParseURL(tt.cmd)
			if err != nil {
				t.Fatal(err)
			}
			u := New("child", []Replica{r}, Config{KillTimeout: kill, Logger: slog.New(slog.NewTextHandler(logs, nil))})
			u.Start()
			t.Cleanup(u.Close)
			poll.Until(t, 5*time.Second, "the child's stderr line in the log", func() (bool, string) {
				out := logs.String()
				return strings.Contains(out, "line=hello"), out
			})
			start := time.Now()
			u.Close()
			took := time.Since(start)
			out := logs.String()
			if !strings.Contains(out, `msg="upstream stderr" upstream=child`) {
				t.Errorf("stderr line not logged with the upstream's name:\n%s", out)
			}
			if !strings.Contains(out, "upstream process exited") || !strings.Contains(out, tt.status) {
				t.Errorf("want the child to end with %q:\n%s", tt.status, out)
			}
			if took < tt.least || took > tt.least+3*time.Second {
				t.Errorf("Close took %s, want at least %s", took, tt.least)
			}
		})
	}
}

// TestExecStderrLongLine is the regression test of issue 24 item 3's
// stderr relay: a child writes a 100 KiB line to stderr and then "after".
// The long line is relayed truncated and the relay goes on: "after" is
// logged. Before the fix bufio.Scanner stopped at the line over its 64 KiB
// buffer (bufio.ErrTooLong) and the relay discarded the rest of stderr, so
// nothing after it was ever logged.
func TestExecStderrLongLine(t *testing.T) {
	logs := &logBuffer{}
	r, err := ParseURL(`exec:sh -c "yes x | head -n 102400 | tr -d '[:space:]' >&2; echo >&2; echo after >&2; cat >/dev/null"`)
	if err != nil {
		t.Fatal(err)
	}
	u := New("child", []Replica{r}, Config{KillTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	u.Start()
	t.Cleanup(u.Close)
	poll.Until(t, 5*time.Second, `the child's "after" line in the log`, func() (bool, string) {
		out := logs.String()
		return strings.Contains(out, "line=after"), tail(out)
	})
	out := logs.String()
	long := strings.Repeat("x", stderrLineMax)
	if !strings.Contains(out, "line="+long+" truncated=102400") {
		t.Fatalf("the long line was not relayed truncated to %d bytes: %s", stderrLineMax, tail(out))
	}
	if strings.Contains(out, strings.Repeat("x", stderrLineMax+1)) {
		t.Fatalf("a relayed line is longer than %d bytes", stderrLineMax)
	}
}

// TestExecStderrRateLimited: a child that writes 5,000 stderr lines at once
// has at most the burst of --upstream-stderr-rate relayed at once; the
// excess is counted and reported with the next relayed line, and the child
// is never blocked by the relay: its last line ("done") comes through once
// the bucket refills.
func TestExecStderrRateLimited(t *testing.T) {
	logs := &logBuffer{}
	r, err := ParseURL(`exec:sh -c "i=0; while [ $i -lt 5000 ]; do echo noise $i >&2; i=$((i+1)); done; sleep 0.3; echo done >&2; cat >/dev/null"`)
	if err != nil {
		t.Fatal(err)
	}
	const rate = 50
	u := New("child", []Replica{r}, Config{KillTimeout: time.Second, StderrRate: rate, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	u.Start()
	t.Cleanup(u.Close)
	poll.Until(t, 10*time.Second, `the child's "done" line in the log`, func() (bool, string) {
		out := logs.String()
		return strings.Contains(out, "line=done"), tail(out)
	})
	out := logs.String()
	relayed := strings.Count(out, `line="noise`)
	// The burst, plus what the bucket refilled while the child wrote.
	if relayed >= 5000 || relayed < rate {
		t.Fatalf("%d of 5000 noise lines relayed, want between %d and well under 5000", relayed, rate)
	}
	if !strings.Contains(out, "skippedLines=") {
		t.Fatalf("the skipped lines were not reported: %s", tail(out))
	}
}

// tail is the end of a long log, for a failure message.
func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// TestExecDescendantHoldsStdout is the regression test of issue 24 item 5's
// exec child that was never restarted: the child starts a descendant that
// inherits its stdout (the socket to edge) and stderr, then exits. edge
// saw no EOF on the socket, and waited for stderr to be read out before
// reaping the child, so it never noticed the exit and never restarted it.
// The child now runs in its own process group: its exit is noticed, the
// group (the descendant) is killed, and the child is started again.
func TestExecDescendantHoldsStdout(t *testing.T) {
	dir := t.TempDir()
	starts, sleepers := filepath.Join(dir, "starts"), filepath.Join(dir, "sleepers")
	r, err := ParseURL(`exec:sh -c "echo $$ >>` + starts + `; sleep 30 & echo $! >>` + sleepers + `; exit 0"`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // whatever a failed run left
		for _, pid := range pidsIn(sleepers) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	u := New("child", []Replica{r}, Config{KillTimeout: 100 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	u.Start()
	defer u.Close()
	poll.Until(t, 5*time.Second, "the child started a second time", func() (bool, string) {
		n := len(pidsIn(starts))
		return n >= 2, fmt.Sprintf("%d starts", n)
	})
	first := pidsIn(sleepers)[0]
	poll.Until(t, 5*time.Second, "the first child's descendant killed", func() (bool, string) {
		return !alive(first), fmt.Sprintf("pid %d alive", first)
	})
	u.Close()
	for _, pid := range pidsIn(sleepers) {
		poll.Until(t, 5*time.Second, "every descendant killed by Close", func() (bool, string) {
			return !alive(pid), fmt.Sprintf("pid %d alive", pid)
		})
	}
}

// pidsIn reads the process ids a test child wrote to file, one a line.
func pidsIn(file string) []int {
	b, _ := os.ReadFile(file)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether process pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}
