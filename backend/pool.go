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
// the idle timeout exit, so an idle gateway holds no worker goroutines.
// Submit never blocks; queued plus running jobs are bounded by the cap that
// callers take with TryAcquire.
type Pool struct {
	max  int64         // immutable after NewPool
	idle time.Duration // immutable after NewPool

	running atomic.Int64 // acquired slots

	mu       sync.Mutex
	queue    []Job     // guarded by mu: FIFO from qhead
	qhead    int       // guarded by mu
	awake    int       // guarded by mu: workers awake and not running a job
	sleepers []*worker // guarded by mu: idle workers, most recent last
	closed   bool      // guarded by mu

	wg sync.WaitGroup
}

// worker is an idle worker's wake-up channel.
type worker struct {
	wake chan bool // buffered 1: true to work, false to exit
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

// wakeLocked makes sure a worker is awake for the queue: if none is, it
// counts one as awake and returns the idle worker to wake (nil: start a new
// one). Called with mu held.
func (p *Pool) wakeLocked() (*worker, bool) {
	if p.awake > 0 || p.qhead == len(p.queue) {
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
	timer := time.NewTimer(p.idle)
	defer timer.Stop()
	p.mu.Lock()
	for {
		if p.qhead == len(p.queue) {
			p.queue, p.qhead = p.queue[:0], 0
			p.awake--
			if p.closed {
				p.mu.Unlock()
				return
			}
			p.sleepers = append(p.sleepers, w)
			p.mu.Unlock()
			if !p.sleep(w, timer) {
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
		p.mu.Lock()
		p.awake++
	}
}

// sleep waits until w is woken (true) or told to exit, or the idle timeout
// passes and w leaves the sleepers (false).
func (p *Pool) sleep(w *worker, timer *time.Timer) bool {
	timer.Reset(p.idle)
	select {
	case ok := <-w.wake:
		return ok
	case <-timer.C:
	}
	p.mu.Lock()
	for i, s := range p.sleepers {
		if s == w {
			p.sleepers = append(p.sleepers[:i], p.sleepers[i+1:]...)
			p.mu.Unlock()
			return false
		}
	}
	p.mu.Unlock()
	// A waker took w from the sleepers just as the timer fired: its wake is
	// on the way and w is already counted as awake.
	return <-w.wake
}

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
	p.mu.Unlock()
	for _, w := range sleepers {
		w.wake <- false
	}
	p.wg.Wait()
}
