package backend

import (
	"sync"
	"sync/atomic"
	"time"
)

// Job is a unit of work run by a Pool worker.
type Job interface {
	// Run executes the job on a worker goroutine. It must call Pool.Release
	// exactly once when the slot it holds may be reused.
	Run()
}

// Pool runs jobs on worker goroutines and enforces the global cap on backend
// tasks across all connections (CONTRACT.md section 3.2). Workers are started on
// demand and exit after IdleTimeout without work, so an idle gateway holds no
// worker goroutines. Submit never blocks: a job goes to an idle worker or to a
// new one, and the number of running jobs is bounded by the cap that callers
// take with TryAcquire.
type Pool struct {
	max  int64         // immutable after NewPool
	idle time.Duration // immutable after NewPool

	running atomic.Int64 // acquired slots
	work    chan Job     // unbuffered: a send succeeds only if a worker waits
	quit    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool
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
	return &Pool{max: int64(max), idle: idle, work: make(chan Job), quit: make(chan struct{})}
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

// Submit runs j on a worker. The caller holds a slot from TryAcquire, which the
// job releases. Submit never blocks. After Close it runs j on a fresh goroutine
// so that a job already admitted still completes. Safe for concurrent use.
func (p *Pool) Submit(j Job) {
	select {
	case p.work <- j:
	default:
		p.wg.Add(1)
		go p.worker(j)
	}
}

func (p *Pool) worker(j Job) {
	defer p.wg.Done()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		j.Run()
		if p.closed.Load() {
			return
		}
		t.Reset(p.idle)
		select {
		case j = <-p.work:
		case <-t.C:
			return
		case <-p.quit:
			return
		}
	}
}

// Close stops idle workers and waits until every worker has exited, which
// includes waiting for running jobs to return. Safe for concurrent use; call once.
func (p *Pool) Close() {
	if p.closed.Swap(true) {
		return
	}
	close(p.quit)
	p.wg.Wait()
}
