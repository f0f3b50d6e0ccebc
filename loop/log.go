package loop

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// gnetLogger adapts gnet's printf-style logger to slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) logf(level slog.Level, format string, args ...any) {
	if g.l.Enabled(context.Background(), level) {
		g.l.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "gnet")
	}
}

func (g gnetLogger) Debugf(format string, args ...any) { g.logf(slog.LevelDebug, format, args...) }
func (g gnetLogger) Infof(format string, args ...any)  { g.logf(slog.LevelDebug, format, args...) }
func (g gnetLogger) Warnf(format string, args ...any)  { g.logf(slog.LevelWarn, format, args...) }
func (g gnetLogger) Errorf(format string, args ...any) { g.logf(slog.LevelError, format, args...) }
func (g gnetLogger) Fatalf(format string, args ...any) { g.logf(slog.LevelError, format, args...) }

// LogWriter is the io.Writer under the process's slog handler: logging
// never blocks an event loop (issue 24 item 3). A stderr that nobody reads
// (a full pipe) blocks the write that reaches it, and slog's handlers write
// under a mutex that every logger of the process shares, so one blocked
// write would stop every goroutine that logs, the event loops included.
//
// Write copies the line (slog writes each record with one Write) into a
// bounded buffer and returns at once; one goroutine writes the buffer to
// the output. When the buffer is full the line is dropped and counted
// (Dropped, the metric edge_log_dropped_total); once the goroutine has
// written what was buffered before, it writes one line saying how many
// were dropped. Safe for concurrent use.
type LogWriter struct {
	out io.Writer // the writer goroutine's
	max int       // immutable: bytes buffered at most

	mu        sync.Mutex
	buf       []byte // guarded by mu: lines not yet written
	unlogged  uint64 // guarded by mu: lines dropped since the last report
	closing   bool   // guarded by mu: Close was called
	dropped   atomic.Uint64
	wake      chan struct{} // capacity 1
	done      chan struct{} // closed when the writer goroutine returns
	closeOnce sync.Once
}

// DefaultLogBufferBytes is the default bound of a LogWriter's buffer: a
// few thousand lines.
const DefaultLogBufferBytes = 1 << 20

// NewLogWriter returns a LogWriter writing to out through a buffer of at
// most maxBytes, and starts its goroutine; Close stops it.
func NewLogWriter(out io.Writer, maxBytes int) *LogWriter {
	if maxBytes <= 0 {
		maxBytes = DefaultLogBufferBytes
	}
	w := &LogWriter{out: out, max: maxBytes, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// Write queues a copy of p, or drops it when the buffer has no room for
// it. It never blocks on the output and never fails.
func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closing || len(w.buf)+len(p) > w.max {
		w.unlogged++
		w.mu.Unlock()
		w.dropped.Add(1)
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// Dropped is the number of lines dropped so far. Safe for concurrent use.
func (w *LogWriter) Dropped() uint64 { return w.dropped.Load() }

// run writes the buffered lines until Close, then what is left.
func (w *LogWriter) run() {
	defer close(w.done)
	report := slog.New(slog.NewTextHandler(w.out, nil))
	var spare []byte
	for {
		w.mu.Lock()
		b, n, closing := w.buf, w.unlogged, w.closing
		w.buf, w.unlogged = spare[:0], 0
		w.mu.Unlock()
		if len(b) > 0 {
			_, _ = w.out.Write(b)
		}
		if n > 0 {
			report.Warn("log lines dropped: the log output did not keep up", "dropped", n, "droppedTotal", w.dropped.Load())
		}
		if cap(b) > 64<<10 && len(b) < cap(b)/4 {
			b = nil // let a burst's buffer go
		}
		spare = b
		if len(b) > 0 || n > 0 {
			continue
		}
		if closing {
			return
		}
		<-w.wake
	}
}

// Close writes what is buffered and stops the goroutine, waiting at most
// timeout for the output to take it (an output nobody reads never does:
// the goroutine is then left blocked in its write). Lines written after
// Close are dropped.
func (w *LogWriter) Close(timeout time.Duration) {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closing = true
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
	}
}
