package upstream

import (
	"log/slog"
	"strings"
	"sync"
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
