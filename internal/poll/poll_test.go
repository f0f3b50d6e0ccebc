package poll

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestUntilReturnsOnceDone: Until returns as soon as cond reports done, after
// exactly as many looks as it took.
func TestUntilReturnsOnceDone(t *testing.T) {
	calls := 0
	Until(t, time.Minute, "the third look", func() (bool, string) {
		calls++
		return calls == 3, fmt.Sprintf("%d looks", calls)
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

// fatalTB records the failure of a test run on its own goroutine.
type fatalTB struct {
	testing.TB // nil: any other method panics
	msg        string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestUntilFailsAtTheDeadline: a condition that never holds fails the test
// once the timeout has passed, not before and not much later, naming what was
// awaited and the state cond reported last.
func TestUntilFailsAtTheDeadline(t *testing.T) {
	const timeout = 200 * time.Millisecond
	f := &fatalTB{}
	calls := 0
	start := time.Now()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		Until(f, timeout, "a miracle", func() (bool, string) {
			calls++
			return false, fmt.Sprintf("look %d", calls)
		})
	}()
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatal("Until did not give up")
	}
	took := time.Since(start)
	if want := fmt.Sprintf("waited %s for a miracle; last: look %d", timeout, calls); f.msg != want {
		t.Fatalf("failure %q, want %q", f.msg, want)
	}
	if took < timeout || took > timeout+time.Second {
		t.Fatalf("gave up after %s, want just after %s", took, timeout)
	}
	// The backoff is short: a 200 ms poll looks several times.
	if calls < 4 {
		t.Fatalf("cond called %d times in %s, want a short backoff", calls, timeout)
	}
}
