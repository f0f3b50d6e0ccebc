package backend

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
)

// jobFunc adapts a function to Job; the test owns the slot accounting.
type jobFunc func()

func (f jobFunc) Run() { f() }

func TestPoolCap(t *testing.T) {
	p := NewPool(2, time.Second)
	defer p.Close()
	if !p.TryAcquire() || !p.TryAcquire() {
		t.Fatal("the first two slots must be granted")
	}
	if p.TryAcquire() {
		t.Fatal("a third slot was granted with max 2")
	}
	p.Release()
	if !p.TryAcquire() {
		t.Fatal("a released slot was not granted again")
	}
	if got := p.Running(); got != 2 {
		t.Fatalf("Running() = %d, want 2", got)
	}
}

// TestPoolBlockedJobDoesNotHoldQueue is the deadlock the spare-worker rule
// prevents: jobs that block until a later job runs. A pool that runs the
// queue on one worker, or wakes nobody while its only worker is busy, hangs.
func TestPoolBlockedJobDoesNotHoldQueue(t *testing.T) {
	p := NewPool(1000, time.Second)
	defer p.Close()
	const blocked = 50
	gate := make(chan struct{})
	var done sync.WaitGroup
	done.Add(blocked + 1)
	for range blocked {
		p.Submit(jobFunc(func() { <-gate; done.Done() }))
	}
	p.Submit(jobFunc(func() { close(gate); done.Done() }))
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the job opening the gate never ran behind the blocked ones")
	}
}

// TestPoolSubmitAll: a batch handed over at once runs every job, also when
// jobs early in the batch block until the last one runs (the batch is not
// run on one worker in isolation), and the pool keeps none of the caller's
// slice: the caller clears it at once, as the event loop does.
func TestPoolSubmitAll(t *testing.T) {
	p := NewPool(1000, time.Second)
	defer p.Close()
	p.SubmitAll(nil) // nothing to do, nobody to wake
	const blocked = 50
	gate := make(chan struct{})
	var ran [blocked + 1]atomic.Bool
	var done sync.WaitGroup
	done.Add(blocked + 1)
	batch := make([]Job, 0, blocked+1)
	for i := range blocked {
		batch = append(batch, jobFunc(func() { <-gate; ran[i].Store(true); done.Done() }))
	}
	batch = append(batch, jobFunc(func() { close(gate); ran[blocked].Store(true); done.Done() }))
	p.SubmitAll(batch)
	clear(batch)
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the job opening the gate never ran behind the blocked ones of its batch")
	}
	for i := range ran {
		if !ran[i].Load() {
			t.Fatalf("job %d did not run", i)
		}
	}
}

// TestPoolBurstRunsOnFewWorkers checks the point of the queue: a burst of
// fast jobs does not start a goroutine per job, with this process's
// GOMAXPROCS and with 8, five bursts each. With 8, a worker that finished
// its job waited for the pool's lock counted as busy, so every job taken
// during the convoy started one more worker: 100-135 extra goroutines in 12
// of 30 runs before Pool.returning.
func TestPoolBurstRunsOnFewWorkers(t *testing.T) {
	for _, procs := range []int{runtime.GOMAXPROCS(0), 8} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs)) // restored on Fatal too
			for round := range 5 {
				if extra := burstGoroutines(t, 10000); extra > 64 {
					t.Fatalf("GOMAXPROCS %d, burst %d: 10000 jobs ran on %d extra goroutines", procs, round, extra)
				}
			}
		}()
	}
}

// burstGoroutines submits jobs fast jobs to a new pool at once and returns
// the most goroutines beyond those before that any job saw.
func burstGoroutines(t *testing.T, jobs int64) int64 {
	p := NewPool(100000, time.Minute)
	defer p.Close()
	before := runtime.NumGoroutine()
	var n atomic.Int64
	var peak atomic.Int64
	for range jobs {
		p.Submit(jobFunc(func() {
			n.Add(1)
			if g := int64(runtime.NumGoroutine()); g > peak.Load() {
				peak.Store(g)
			}
		}))
	}
	poll.Until(t, 10*time.Second, "every job to run", func() (bool, string) {
		got := n.Load()
		return got == jobs, fmt.Sprintf("%d of %d ran", got, jobs)
	})
	return peak.Load() - int64(before)
}

func TestPoolIdleWorkersExit(t *testing.T) {
	before := runtime.NumGoroutine()
	p := NewPool(100, 20*time.Millisecond)
	defer p.Close()
	var wg sync.WaitGroup
	wg.Add(10)
	gate := make(chan struct{})
	for range 10 {
		p.Submit(jobFunc(func() { <-gate; wg.Done() }))
	}
	close(gate)
	wg.Wait()
	poll.Until(t, 10*time.Second, "idle workers to exit", func() (bool, string) {
		g := runtime.NumGoroutine()
		return g <= before, fmt.Sprintf("%d goroutines, %d before the jobs", g, before)
	})
	// The pool still works after its workers left.
	ran := make(chan struct{})
	p.Submit(jobFunc(func() { close(ran) }))
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a job submitted after the workers idled out never ran")
	}
}

func TestPoolCloseWaitsForJobs(t *testing.T) {
	p := NewPool(10, time.Minute)
	release := make(chan struct{})
	var finished atomic.Bool
	p.Submit(jobFunc(func() { <-release; finished.Store(true) }))
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a job was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if !finished.Load() {
		t.Fatal("Close returned before the running job finished")
	}
}

// BenchmarkPoolSubmit measures hand-off of a burst of empty jobs.
func BenchmarkPoolSubmit(b *testing.B) {
	p := NewPool(1<<30, time.Minute)
	defer p.Close()
	var wg sync.WaitGroup
	job := jobFunc(func() { wg.Done() })
	b.ReportAllocs()
	for b.Loop() {
		wg.Add(64)
		for range 64 {
			p.Submit(job)
		}
		wg.Wait()
	}
}
