package load

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Pacer sleeps until absolute times on the generator clock with tens of
// microseconds of precision. Go's timers wake at millisecond granularity on
// Linux (the netpoller's epoll timeout is in milliseconds), which would add
// up to 1 ms of generator lag to every open-loop request; a timerfd read
// through the netpoller wakes when the kernel timer fires. Lead is the
// observed wake-up overshoot (an EWMA): callers arm early by Lead and send
// what is due within it. Not safe for concurrent use.
type Pacer struct {
	f        *os.File // nil: fall back to time.Sleep
	fd       int
	lead     int64 // ns
	buf      [8]byte
	periodic bool // the timer ticks every Quantum (see ForRate)
}

// NewPacer returns a pacer; without timerfd it falls back to time.Sleep.
func NewPacer() *Pacer {
	p := &Pacer{}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err == nil {
		p.fd = fd
		p.f = os.NewFile(uintptr(fd), "timerfd")
	}
	return p
}

// ForRate prepares the pacer for a schedule of rate events per second: above
// one event per Quantum the timer ticks every Quantum instead of being armed
// for each wake-up, which saves a syscall per wake-up.
func (p *Pacer) ForRate(rate float64) {
	if p.f == nil || rate*float64(Quantum) < 1e9 {
		return
	}
	spec := unix.ItimerSpec{Interval: unix.NsecToTimespec(Quantum), Value: unix.NsecToTimespec(Quantum)}
	if unix.TimerfdSettime(p.fd, 0, &spec, nil) == nil {
		p.periodic = true
	}
}

// Lead is how early the pacer arms its timer, in ns.
func (p *Pacer) Lead() int64 { return p.lead }

// Quantum is the schedule granularity of the open-loop senders: a sender
// that wakes sends everything due within the next Quantum at once instead of
// sleeping again for each request. Each wake-up costs the generator several
// syscalls; at 60k requests/s one wake-up per request would cost more than
// the requests. Requests sent early are timed from their actual send time.
const Quantum = int64(100 * time.Microsecond)

// Due reports whether a request scheduled at due should be sent now rather
// than after a sleep.
func (p *Pacer) Due(due int64) bool { return due-p.lead-Quantum <= Now() }

// Wait sleeps until the request scheduled at due is within one Quantum.
func (p *Pacer) Wait(due int64) { p.SleepUntil(due - Quantum) }

// SleepUntil blocks until about t - Lead on the generator clock.
func (p *Pacer) SleepUntil(t int64) {
	target := t - p.lead
	d := target - Now()
	if d <= 0 {
		return
	}
	switch {
	case p.periodic:
		// Wait for ticks until the target is less than a tick away.
		for target-Now() > Quantum/2 {
			if _, err := p.f.Read(p.buf[:]); err != nil {
				time.Sleep(time.Duration(target - Now()))
				break
			}
		}
		return
	case p.f == nil:
		time.Sleep(time.Duration(d))
	default:
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d)}
		if unix.TimerfdSettime(p.fd, 0, &spec, nil) != nil {
			time.Sleep(time.Duration(d))
		} else if _, err := p.f.Read(p.buf[:]); err != nil {
			time.Sleep(time.Duration(d))
		}
	}
	over := Now() - target
	p.lead += (min(max(over, 0), 200_000) - p.lead) / 8
}

// Close releases the timer.
func (p *Pacer) Close() {
	if p.f != nil {
		p.f.Close()
	}
}
