package backend

import (
	"sync"
	"sync/atomic"
	"time"
)

// Job is a unit of work run by a Pool worker.
type Job interface {
	// Run executes the job on a worker goroutine.
	Run()
}

// Pool runs jobs on worker goroutines and enforces the global cap on backend
// tasks across all connections (CONTRACT.md section 3.2).
//
// Jobs wait in one FIFO queue. The pool keeps at least one worker awake and
// looking at the queue while the queue is not empty: a worker that takes a
// job and leaves work behind with nobody else awake wakes an idle worker (or
// starts one) before it runs the job. A burst of fast jobs is therefore run
// back to back by one worker, with one wake-up per burst instead of one per
// job, and a job that blocks (a gate, a sleep) never holds up the jobs behind
// it, since another worker is already awake to take them. Workers idle for
// the idle timeout exit, so an idle gateway holds no worker goroutines: one
// reaper timer for the whole pool retires them, so that going to sleep costs
// a worker a channel receive and no timer of its own.
// Submit never blocks; queued plus running jobs are bounded by the cap that
// callers take with TryAcquire.
type Pool struct {
	max  int64         // immutable after NewPool
	idle time.Duration // immutable after NewPool

	running atomic.Int64 // acquired slots
	// returning counts the workers that finished a job and wait for mu to
	// look at the queue again: as good as awake for wakeLocked. Without it
	// a contended mu made a convoy in which every job taken woke one more
	// worker (GOMAXPROCS 8: 100-135 workers for a burst of 10,000).
	returning atomic.Int32

	mu       sync.Mutex
	queue    []Job       // guarded by mu: FIFO from qhead
	qhead    int         // guarded by mu
	awake    int         // guarded by mu: workers awake and not running a job
	sleepers []*worker   // guarded by mu: idle workers, most recent last
	closed   bool        // guarded by mu
	reaper   *time.Timer // guarded by mu: armed while there are sleepers
	reaping  bool        // guarded by mu: reaper is armed

	wg sync.WaitGroup
}

// worker is an idle worker's wake-up channel.
type worker struct {
	wake  chan bool // buffered 1: true to work, false to exit
	since int64     // guarded by Pool.mu: when it went to sleep (monotonic ns)
}

// NewPool returns a pool admitting at most max concurrent jobs (max > 0).
// Workers without work for idle exit (idle <= 0 means 5 s).
func NewPool(max int, idle time.Duration) *Pool {
	if max <= 0 {
		panic("backend: NewPool max must be positive")
	}
	if idle <= 0 {
		idle = 5 * time.Second
	}
	return &Pool{max: int64(max), idle: idle}
}

// TryAcquire takes one slot of the global cap without waiting and reports
// whether it got one. Safe for concurrent use.
func (p *Pool) TryAcquire() bool {
	if p.running.Add(1) > p.max {
		p.running.Add(-1)
		return false
	}
	return true
}

// Release returns a slot taken with TryAcquire. Safe for concurrent use.
func (p *Pool) Release() { p.running.Add(-1) }

// ReleaseN returns n slots taken with TryAcquire. Safe for concurrent use.
func (p *Pool) ReleaseN(n int) { p.running.Add(-int64(n)) }

// Running reports how many slots are taken. Safe for concurrent use.
func (p *Pool) Running() int { return int(p.running.Load()) }

// Submit queues j for a worker. The caller holds a slot from TryAcquire,
// which the job releases. Submit never blocks. Safe for concurrent use.
func (p *Pool) Submit(j Job) {
	p.mu.Lock()
	p.queue = append(p.queue, j)
	w, wake := p.wakeLocked()
	p.mu.Unlock()
	if wake {
		p.start(w)
	}
}

// SubmitAll queues every job of js in order, as Submit would one by one, but
// takes the pool's lock once and wakes at most one worker: an event loop
// hands over all the calls of a turn together. The caller holds a slot for
// each job. js is not retained. Safe for concurrent use.
func (p *Pool) SubmitAll(js []Job) {
	if len(js) == 0 {
		return
	}
	p.mu.Lock()
	p.queue = append(p.queue, js...)
	w, wake := p.wakeLocked()
	p.mu.Unlock()
	if wake {
		p.start(w)
	}
}

// wakeLocked makes sure a worker is awake for the queue: if none is, it
// counts one as awake and returns the idle worker to wake (nil: start a new
// one). Called with mu held.
func (p *Pool) wakeLocked() (*worker, bool) {
	if p.awake > 0 || p.qhead == len(p.queue) || p.returning.Load() > 0 {
		return nil, false
	}
	p.awake++
	n := len(p.sleepers)
	if n == 0 {
		return nil, true
	}
	w := p.sleepers[n-1]
	p.sleepers[n-1] = nil
	p.sleepers = p.sleepers[:n-1]
	return w, true
}

// start wakes w, or starts a new worker when w is nil. The worker has
// already been counted as awake.
func (p *Pool) start(w *worker) {
	if w != nil {
		w.wake <- true
		return
	}
	p.wg.Add(1)
	go p.work(&worker{wake: make(chan bool, 1)})
}

// work is one worker goroutine. It starts counted as awake.
func (p *Pool) work(w *worker) {
	defer p.wg.Done()
	p.mu.Lock()
	for {
		if p.qhead == len(p.queue) {
			p.queue, p.qhead = p.queue[:0], 0
			p.awake--
			if p.closed {
				p.mu.Unlock()
				return
			}
			w.since = nanotime()
			p.sleepers = append(p.sleepers, w)
			if !p.reaping {
				p.reaping = true
				p.armReaperLocked(p.idle)
			}
			p.mu.Unlock()
			if !<-w.wake {
				return
			}
			p.mu.Lock()
			continue
		}
		j := p.queue[p.qhead]
		p.queue[p.qhead] = nil
		p.qhead++
		p.awake-- // busy with j now
		next, wake := p.wakeLocked()
		p.mu.Unlock()
		if wake {
			p.start(next)
		}
		j.Run()
		if !p.mu.TryLock() {
			// Contended: counted as returning while it waits, so that
			// the holder does not wake another worker for the queue.
			p.returning.Add(1)
			p.mu.Lock()
			p.returning.Add(-1)
		}
		p.awake++
	}
}

// armReaperLocked runs reap after d. Called with mu held.
func (p *Pool) armReaperLocked(d time.Duration) {
	if p.reaper == nil {
		p.reaper = time.AfterFunc(d, p.reap)
		return
	}
	p.reaper.Reset(d)
}

// reap retires the workers that have slept for the idle timeout and re-arms
// itself for the next one while any sleep. Sleepers are ordered by the time
// they went to sleep, so the ones to retire are at the front.
func (p *Pool) reap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.reaping = false
		return
	}
	now := nanotime()
	n := 0
	for n < len(p.sleepers) && now-p.sleepers[n].since >= int64(p.idle) {
		p.sleepers[n].wake <- false
		n++
	}
	if n > 0 {
		rest := copy(p.sleepers, p.sleepers[n:])
		clear(p.sleepers[rest:])
		p.sleepers = p.sleepers[:rest]
	}
	if len(p.sleepers) == 0 {
		p.reaping = false
		return
	}
	p.armReaperLocked(time.Duration(p.sleepers[0].since + int64(p.idle) - now))
}

// epoch is the origin of nanotime.
var epoch = time.Now()

// nanotime reads the monotonic clock.
func nanotime() int64 { return int64(time.Since(epoch)) }

// Close stops idle workers and waits until every worker has exited, which
// includes waiting for queued and running jobs to finish. Jobs submitted
// after Close still run. Safe for concurrent use.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	sleepers := p.sleepers
	p.sleepers = nil
	if p.reaper != nil {
		p.reaper.Stop()
	}
	p.mu.Unlock()
	for _, w := range sleepers {
		w.wake <- false
	}
	p.wg.Wait()
}
