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
