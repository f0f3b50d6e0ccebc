package loop

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/openengine/edge/rpc"
)

// eventLoop is edge's state for one gnet event loop: the completion queue that
// workers post to, the connections the loop owns (for timeout sweeps) and the
// connections with output to flush at the end of the current turn.
type eventLoop struct {
	srv   *Server        // immutable
	el    gnet.EventLoop // immutable
	index int            // the loop's number (bytestream.Loops), -1 until Start numbers it

	// wires are the forwarders' connections with output to write at the
	// end of this turn (wire.go).
	wires []*wire // loop-owned
	// wiresQueued: a task to flush the wires is queued (flushDeferred).
	wiresQueued bool // loop-owned

	mu        sync.Mutex
	queue     []rpc.Completion // guarded by mu: posted by workers, not yet applied
	scheduled bool             // guarded by mu: a drain is queued on the loop
	// inTurn is set while the loop is about to drain the queue itself at the
	// end of a turn, so workers posting meanwhile need not wake it.
	inTurn bool // guarded by mu

	handled int // loop-owned: messages handed to sessions in the current turn
	// turn gathers the backend calls sessions dispatch in the current turn;
	// every path that can dispatch ends with flush, which flushes it.
	turn *rpc.Turn // immutable pointer, loop-owned Turn; nil without an rpc server (Echo)

	spare []rpc.Completion // loop-owned: the other half of the double buffer
	conns []*conn          // loop-owned: every open connection, for sweeps
	dirty []*conn          // loop-owned: connections with unflushed output
	bufs  [][]byte         // loop-owned: spare output buffers
	// spareBytes is the capacity held in bufs.
	spareBytes int // loop-owned
	// spareLow is the fewest spares held since the last sweep: that many at
	// the bottom of bufs went unused and the sweep releases them.
	spareLow int // loop-owned
	spareMax int // immutable: Config.SpareOutputBytes
	// paused lists connections over their soft outbound cap; entries whose
	// connection was resumed or closed are dropped at the next paused sweep.
	paused []*conn // loop-owned
	// tails are the half-closed NDJSON connections (halfclose.go): each
	// flush looks at them, since completions that send nothing can end them.
	tails []*conn // loop-owned
	epfd  int     // immutable: the loop's epoll descriptor, -1 if unknown

	sweeping bool // guarded by mu: a sweep is queued on the loop

	// ctr is the request counters the loop's sessions share, counts the
	// loop's connection counters; a snapshot task copies both into snap
	// (stats.go).
	ctr    *rpc.Counters // immutable pointer, loop-owned Counters
	counts loopCounters  // loop-owned
	snapMu sync.Mutex
	snap   loopSnapshot // guarded by snapMu: the counters as of the last snapshot task

	// open is len(conns), for the acceptors' choice of a loop.
	open atomic.Int32
	// opening is the accepted socket OnOpen is running for (accept.go).
	opening *accepted // loop-owned
	// readAt is when the input being handled arrived (conn.traffic), in
	// unix nanoseconds: the clock of the rate limit and of identity expiry.
	readAt int64 // loop-owned

	// deferred are the connections whose sessions have subscription events
	// for their next write (rpc.DeferringSink): framed by the flush, each
	// just before its connection's write (events.go).
	deferred []*conn // loop-owned
	// capped are the connections that refused an event over their hard
	// outbound cap: closed SLOW_CONSUMER by the flush (events.go).
	capped []*conn // loop-owned
}

// Output buffers: a new one has minOutBuf bytes; one larger than maxSpareBuf
// is dropped after its flush; a loop keeps at most Config.SpareOutputBytes of
// spares (64 MiB by default),
// and each sweep releases the spares that no turn needed since the last one,
// so a quiet loop holds none. Idle connections hold none either. The limits
// are well above what busy turns write: a buffer dropped after every turn
// would be regrown from minOutBuf by doubling in the next, which cost a
// third of the loop's time in W1 c4w64-1KiB (64 responses of 1 KiB per turn)
// and a quarter in W4, when a fan-out to 10,000 connections held one buffer
// per connection until the end of the turn (its events now take turns with
// one, events.go).
const (
	minOutBuf   = 512
	maxSpareBuf = 1 << 20
)

// Post queues a completion for the loop and makes sure a drain is scheduled.
// Completions posted while a drain is pending ride along with it, so a busy loop
// applies many per wake-up and writes each connection once. Safe for concurrent use.
func (l *eventLoop) Post(c rpc.Completion) {
	l.mu.Lock()
	l.queue = append(l.queue, c)
	schedule := !l.scheduled && !l.inTurn
	if schedule {
		l.scheduled = true
	}
	l.mu.Unlock()
	if schedule {
		if err := l.el.Execute(context.Background(), gnet.RunnableFunc(l.drain)); err != nil {
			// The engine is shutting down: every session is closing and the
			// completion has nothing left to answer.
			l.mu.Lock()
			l.scheduled = false
			l.mu.Unlock()
		}
	}
}

// Turn implements rpc.TurnPoster. Safe for concurrent use.
func (l *eventLoop) Turn() *rpc.Turn { return l.turn }

// drain applies every queued completion and flushes. Runs on the loop.
func (l *eventLoop) drain(context.Context) error {
	l.clock(time.Now())
	l.mu.Lock()
	l.scheduled = false
	l.applyLocked()
	l.flush()
	return nil
}

// applyLocked takes the queue, unlocks mu and applies what it took. Called
// with mu held, on the loop.
func (l *eventLoop) applyLocked() {
	q := l.queue
	l.queue = l.spare[:0]
	l.mu.Unlock()
	for i, c := range q {
		c.Apply()
		q[i] = nil
	}
	l.spare = q[:0]
}

// endTurn finishes a turn that handed messages to sessions. It yields the
// processor once so that workers can run what was just dispatched (with
// GOMAXPROCS=1 they could not run before the loop blocks in epoll_wait), then
// applies whatever they posted meanwhile, so that fast calls are answered in
// the same write as the turn's other output: one read and one write per
// request instead of a wake-up through the poller. A turn that handed the
// workers nothing (its calls were forwarded, or answered at once) has
// nothing to wait for: it does not yield. Runs on the loop.
func (l *eventLoop) endTurn() {
	if l.handled == 0 {
		return
	}
	l.handled = 0
	if !l.turn.Flush() {
		return
	}
	l.holdPosts()
	runtime.Gosched()
	l.releasePosts()
	if len(l.queue) == 0 {
		l.mu.Unlock()
		return
	}
	l.clock(time.Now())
	l.applyLocked()
}

// holdPosts marks the loop as about to apply its queue itself (inTurn): a
// Post meanwhile schedules no wake-up. Runs on the loop.
func (l *eventLoop) holdPosts() {
	l.mu.Lock()
	l.inTurn = true
	l.mu.Unlock()
}

// releasePosts ends holdPosts and returns with mu held, for the caller to
// applyLocked (or unlock). Runs on the loop.
func (l *eventLoop) releasePosts() {
	l.mu.Lock()
	l.inTurn = false
}

// markDirty records that w has output to flush at the end of this turn.
func (l *eventLoop) markDirty(w *conn) {
	if !w.dirty {
		w.dirty = true
		l.dirty = append(l.dirty, w)
	}
}

// flush hands the calls dispatched in this turn to the pool (rpc.Turn.Flush),
// then writes every dirty connection's output with one write each. A flush
// may dirty a connection again (a close after the hard cap), so the list is
// walked until it stops growing. Runs on the loop.
func (l *eventLoop) flush() {
	l.flushConns()
	l.flushWires()
}

// flushConns is flush but for the wires. The connections with deferred
// events go first, each framing its events and writing at once (events.go),
// so that they take turns with one output buffer; a write can defer more
// (Resume), so both lists are walked until they stay empty.
func (l *eventLoop) flushConns() {
	l.turn.Flush()
	for _, w := range l.tails {
		l.markDirty(w)
	}
	for {
		l.flushEvents()
		for i := 0; i < len(l.dirty); i++ {
			w := l.dirty[i]
			l.dirty[i] = nil
			if w.dirty { // not written by flushEvents meanwhile
				w.flush()
			}
		}
		l.dirty = l.dirty[:0]
		if len(l.deferred) == 0 && len(l.capped) == 0 {
			return
		}
	}
}

// flushWires writes what every dirty wire queued. Runs on the loop.
func (l *eventLoop) flushWires() {
	for i, x := range l.wires {
		l.wires[i] = nil
		x.flush()
	}
	l.wires = l.wires[:0]
}

// flushDeferred is flush for the end of a client connection's input: the
// connections are written now, the wires by a task. gnet runs tasks after
// the sockets of a poll; queueing one wakes the poller, whose next poll
// returns at once: the wires are written after every socket ready with
// this one and those ready by then. Each client's read forwards its calls
// to the upstream links, usually to every one of them: one write per link
// for all the reads of a round instead of one per link per read.
// (Deferring the clients' writes after an upstream's answers the same way
// was measured too, and made the bench's pipelined P1 slower.) Runs on the
// loop.
func (l *eventLoop) flushDeferred() {
	l.flushConns()
	if len(l.wires) == 0 || l.wiresQueued {
		return
	}
	l.wiresQueued = true
	if err := l.el.Execute(context.Background(), gnet.RunnableFunc(l.flushQueuedWires)); err != nil {
		// The engine is shutting down: write them now.
		l.wiresQueued = false
		l.flushWires()
	}
}

// flushQueuedWires is the task flushDeferred queues.
func (l *eventLoop) flushQueuedWires(context.Context) error {
	l.wiresQueued = false
	l.flushWires()
	return nil
}

// pause takes w's socket out of the read set. Runs on the loop.
func (l *eventLoop) pause(w *conn) {
	l.paused = append(l.paused, w)
	l.srv.paused.Add(1)
	if l.epfd >= 0 {
		_ = setInterest(l.epfd, w.c.Fd(), false, true)
	}
}

// unpause puts w's socket back into the read set. Runs on the loop.
func (l *eventLoop) unpause(w *conn) {
	l.srv.paused.Add(-1)
	if l.epfd >= 0 && w.state != stateClosed {
		_ = setInterest(l.epfd, w.c.Fd(), true, w.c.OutboundBuffered() > 0)
	}
}

// schedulePausedSweep queues a sweep of the paused connections. Safe for concurrent use.
func (l *eventLoop) schedulePausedSweep() {
	_ = l.el.Execute(context.Background(), gnet.RunnableFunc(l.sweepPaused))
}

// sweepPaused resumes paused connections that are writable again. Runs on the loop.
func (l *eventLoop) sweepPaused(context.Context) error {
	if len(l.paused) == 0 {
		return nil
	}
	now := time.Now()
	l.clock(now)
	list := l.paused
	l.paused = nil
	for i, w := range list {
		list[i] = nil
		if !w.paused {
			continue
		}
		if w.state != stateOpen {
			w.paused = false
			l.unpause(w)
			continue
		}
		if w.Writable() {
			w.unpause(now)
		} else {
			l.paused = append(l.paused, w)
		}
	}
	l.flush()
	return nil
}

// getBuf returns an empty output buffer. A turn that answers on many
// connections at once needs one buffer per connection until the flush, so
// spare buffers are kept up to a byte budget rather than a count. The spares
// are a stack: the buffer put back last is handed out next, which is how a
// fan-out's connections, each framing its events and writing in turn
// (events.go), share one.
func (l *eventLoop) getBuf() []byte {
	if n := len(l.bufs); n > 0 {
		b := l.bufs[n-1]
		l.bufs[n-1] = nil
		l.bufs = l.bufs[:n-1]
		l.spareBytes -= cap(b)
		l.spareLow = min(l.spareLow, n-1)
		return b
	}
	return make([]byte, 0, minOutBuf)
}

// trimSpares releases the spares that no turn used since the last call.
func (l *eventLoop) trimSpares() {
	n := l.spareLow
	for _, b := range l.bufs[:n] {
		l.spareBytes -= cap(b)
	}
	rest := copy(l.bufs, l.bufs[n:])
	clear(l.bufs[rest:])
	l.bufs = l.bufs[:rest]
	if rest == 0 {
		l.bufs = nil
	}
	l.spareLow = rest
}

func (l *eventLoop) putBuf(b []byte) {
	if cap(b) <= maxSpareBuf && l.spareBytes+cap(b) <= l.spareMax {
		l.bufs = append(l.bufs, b[:0])
		l.spareBytes += cap(b)
	}
}

func (l *eventLoop) add(w *conn) {
	w.index = int32(len(l.conns))
	l.conns = append(l.conns, w)
	l.open.Add(1)
}

func (l *eventLoop) remove(w *conn) {
	last := len(l.conns) - 1
	if w.index < 0 || int(w.index) > last {
		return
	}
	l.conns[w.index] = l.conns[last]
	l.conns[w.index].index = w.index
	l.conns[last] = nil
	l.conns = l.conns[:last]
	l.open.Add(-1)
	w.index = -1
}

// scheduleSweep queues a timeout sweep unless one is pending. Safe for concurrent use.
func (l *eventLoop) scheduleSweep() {
	l.mu.Lock()
	if l.sweeping {
		l.mu.Unlock()
		return
	}
	l.sweeping = true
	l.mu.Unlock()
	if err := l.el.Execute(context.Background(), gnet.RunnableFunc(l.sweep)); err != nil {
		l.mu.Lock()
		l.sweeping = false
		l.mu.Unlock()
	}
}

// sweep checks every connection's deadlines. Runs on the loop.
func (l *eventLoop) sweep(context.Context) error {
	l.mu.Lock()
	l.sweeping = false
	l.mu.Unlock()
	now := time.Now()
	l.clock(now)
	// Iterate backwards: a connection closed during the sweep is swap-removed.
	for i := len(l.conns) - 1; i >= 0; i-- {
		if i < len(l.conns) {
			l.conns[i].tick(now)
		}
	}
	l.flush()
	l.trimSpares()
	return nil
}

// closeAll closes every connection for shutdown with 1001 going away. Runs on the loop.
func (l *eventLoop) closeAll(context.Context) error {
	l.clock(time.Now())
	for i := len(l.conns) - 1; i >= 0; i-- {
		if i < len(l.conns) {
			l.conns[i].goAway()
		}
	}
	l.flush()
	return nil
}
