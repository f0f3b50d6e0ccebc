package loop

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
)

// gatedWriter blocks every Write until open is closed, then records it.
type gatedWriter struct {
	open chan struct{}
	mu   sync.Mutex
	b    strings.Builder
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.b.Write(p)
}

func (g *gatedWriter) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.b.String()
}

// TestLogWriterNeverBlocks: with an output that takes nothing, 1,000 lines
// written to a LogWriter of 4 KiB all return; what fits is kept, the rest
// is dropped and counted, and once the output takes again the kept lines
// come out in order, each run of drops reported after the lines kept before
// it.
func TestLogWriterNeverBlocks(t *testing.T) {
	out := &gatedWriter{open: make(chan struct{})}
	w := NewLogWriter(out, 4096)
	const lines = 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range lines {
			fmt.Fprintf(w, "line %04d %s\n", i, strings.Repeat("x", 40))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a write blocked on an output that takes nothing")
	}
	dropped := w.Dropped()
	// Each line is 51 bytes and 4096/51 fit the buffer. The writer
	// goroutine may have taken the buffer once (up to as many again) before
	// it blocked in the output, or not at all: the scheduler decides.
	const lineBytes = len("line 0000 ") + 40 + 1
	if fit := uint64(4096 / lineBytes); dropped < lines-2*fit || dropped > lines-fit {
		t.Fatalf("dropped %d of %d lines, want between %d and %d", dropped, lines, lines-2*fit, lines-fit)
	}
	close(out.open)
	// The drops are reported after the lines buffered before them: in one
	// line, or two when the writer goroutine took the buffer between drops.
	reported := func(s string) (sum uint64) {
		for _, m := range regexp.MustCompile(`msg="log lines dropped[^"]*" dropped=(\d+)`).FindAllStringSubmatch(s, -1) {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			sum += n
		}
		return sum
	}
	poll.Until(t, 5*time.Second, "the drop report", func() (bool, string) {
		n := reported(out.String())
		return n == dropped, fmt.Sprintf("%d of %d reported", n, dropped)
	})
	got := out.String()
	if !strings.HasPrefix(got, "line 0000 ") {
		t.Fatalf("output starts %.40q, want the first line", got)
	}
	// The last report counts every drop; lines kept after the last drop
	// (the writer goroutine took the buffer, drops included, and the
	// buffer filled again) may follow it.
	last := got[strings.LastIndex(got, "log lines dropped"):]
	if want := fmt.Sprintf("droppedTotal=%d\n", dropped); !strings.Contains(last, want) {
		t.Fatalf("the last report does not say %q: %s", want, last)
	}
	numbers := regexp.MustCompile(`(?m)^line (\d{4}) `).FindAllStringSubmatch(got, -1)
	if uint64(len(numbers))+dropped != lines {
		t.Fatalf("%d lines kept + %d dropped, want %d", len(numbers), dropped, lines)
	}
	for i := 1; i < len(numbers); i++ {
		if numbers[i][1] <= numbers[i-1][1] {
			t.Fatalf("line %s came after line %s", numbers[i][1], numbers[i-1][1])
		}
	}
	w.Write([]byte("after\n"))
	w.Close(5 * time.Second)
	if !strings.HasSuffix(out.String(), "after\n") {
		t.Fatalf("the line written before Close is missing: %q", out.String()[len(got):])
	}
}
