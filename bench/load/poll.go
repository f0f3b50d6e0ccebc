package load

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// poller lets one goroutine serve many attached connections and a timer: an
// epoll set of its own holds the sockets (level-triggered) and a timerfd
// (edge-triggered, so it is never read), and the epoll descriptor itself sits
// in the Go netpoller, so that the goroutine parks like any other while
// nothing is ready.
//
// Parking through the netpoller rather than blocking a locked thread in
// epoll_wait matters with the generator's GOMAXPROCS=1: a thread blocked in a
// syscall has its P taken by sysmon and handed to another thread (which then
// polls the network itself), and a locked thread gets it back only through
// two thread switches per wake-up. Here a wake-up is one epoll_wait in the
// runtime, one here (non-blocking, harvesting up to len(evs) events) and the
// reads: no goroutine hand-off, and one read per readable socket.
//
// Events carry a tag in EpollEvent.Fd (not the descriptor): the connection's
// index, or timerTag. Every field is owned by the goroutine that made it.
type poller struct {
	ep  int             // the epoll set
	epf *os.File        // ep, registered with the Go netpoller
	rc  syscall.RawConn // epf's, to park on
	tfd int             // timerfd in ep, edge-triggered

	evs   []unix.EpollEvent
	ready []unix.EpollEvent  // what the last poll returned
	err   error              // the last poll's error
	try   func(uintptr) bool // p.poll as a func value, made once

	armed  int64 // when the timer fires, generator clock; 0: not armed
	lead   int64 // EWMA of how late a timer wake-up is seen (ns); the timer is armed that much early
	parked bool  // the last wait parked the goroutine
	polls  int   // polls during the current wait
}

// timerTag marks the timer's events.
const timerTag = -1

// maxLead bounds the poller's lead (see Pacer).
const maxLead = int64(200 * time.Microsecond)

// maxPark bounds how long a loop parks (or spins) without looking at its
// context.
const maxPark = int64(5 * time.Millisecond)

// spinYield is how often a spinning loop yields the P to other goroutines.
const spinYield = int64(time.Millisecond)

// newPoller returns a poller that harvests up to maxEvents events per poll.
func newPoller(maxEvents int) (*poller, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	p := &poller{ep: ep, tfd: tfd, evs: make([]unix.EpollEvent, max(maxEvents, 1))}
	p.try = p.poll
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: timerTag}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, tfd, &ev); err != nil {
		p.closeFDs()
		return nil, fmt.Errorf("epoll_ctl timerfd: %w", err)
	}
	// A non-blocking descriptor makes os.NewFile register it with the
	// netpoller (epoll_wait itself ignores O_NONBLOCK).
	if err := unix.SetNonblock(ep, true); err != nil {
		p.closeFDs()
		return nil, err
	}
	p.epf = os.NewFile(uintptr(ep), "epoll")
	if p.rc, err = p.epf.SyscallConn(); err != nil {
		p.epf.Close()
		unix.Close(tfd)
		return nil, err
	}
	return p, nil
}

func (p *poller) closeFDs() {
	unix.Close(p.ep)
	unix.Close(p.tfd)
}

// add watches fd for reading, and for writing too when out is set; its
// events carry tag.
func (p *poller) add(fd, tag int, out bool) error {
	ev := unix.EpollEvent{Events: connEvents(out), Fd: int32(tag)}
	return unix.EpollCtl(p.ep, unix.EPOLL_CTL_ADD, fd, &ev)
}

// watchOut starts or stops watching fd for writing.
func (p *poller) watchOut(fd, tag int, out bool) error {
	ev := unix.EpollEvent{Events: connEvents(out), Fd: int32(tag)}
	return unix.EpollCtl(p.ep, unix.EPOLL_CTL_MOD, fd, &ev)
}

func connEvents(out bool) uint32 {
	ev := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
	if out {
		ev |= unix.EPOLLOUT
	}
	return ev
}

// remove stops watching fd.
func (p *poller) remove(fd int) error {
	return unix.EpollCtl(p.ep, unix.EPOLL_CTL_DEL, fd, nil)
}

// poll harvests ready events without blocking; it is the RawConn.Read
// callback of wait and reports whether wait may return.
func (p *poller) poll(uintptr) bool {
	p.polls++
	n, e := rawPoll(p.ep, p.evs)
	p.ready, p.err = p.evs[:0], nil
	switch {
	case e == unix.EINTR:
	case e != 0:
		p.err = e
	default:
		p.ready = p.evs[:n]
	}
	return len(p.ready) > 0 || p.err != nil
}

// wait returns the ready events, parking the goroutine in the Go netpoller
// until there are some. Arm the timer first (wakeAt) unless a socket event
// is certain. The events are valid until the next poll or wait.
func (p *poller) wait() ([]unix.EpollEvent, error) {
	// RawRead calls try before parking, and again after each wake-up.
	p.polls = 0
	err := p.rc.Read(p.try)
	p.parked = p.polls > 1
	if err != nil {
		return nil, err
	}
	return p.ready, p.err
}

// await returns the events that are ready once something happened or the
// clock reaches next (the caller's next deadline; a timer event then
// arrives, or, spinning, the result is empty): parked in the Go netpoller
// with the timer armed for next, or, with spin, polling without ever parking
// and yielding the P every spinYield. The time spin polled with nothing to
// do inside win is added to *idle. The events are valid until the next poll.
func (p *poller) await(now, next int64, spin bool, win Window, idle *int64) ([]unix.EpollEvent, error) {
	if spin {
		return p.spin(now, next, win, idle)
	}
	park, err := p.wakeAt(next, now)
	if err != nil {
		return nil, err
	}
	if park {
		_, err = p.wait()
	} else {
		p.parked = false
		p.poll(0)
		err = p.err
	}
	if err != nil {
		return nil, fmt.Errorf("epoll_wait: %w", err)
	}
	return p.ready, nil
}

// spin polls without parking until an event is ready or the clock reaches
// next, yielding the P every spinYield; the time it spent inside win is
// idle polling, added to *idle.
func (p *poller) spin(start, next int64, win Window, idle *int64) ([]unix.EpollEvent, error) {
	p.parked = false
	yield := start + spinYield
	for {
		p.poll(0)
		now := Now()
		if len(p.ready) > 0 || p.err != nil || now >= next {
			*idle += max(min(now, win.End)-max(start, win.Start), 0)
			if p.err != nil {
				return nil, fmt.Errorf("epoll_wait: %w", p.err)
			}
			return p.ready, nil
		}
		if now >= yield {
			runtime.Gosched()
			yield = Now() + spinYield
		}
	}
}

// wakeAt makes a timer event arrive at about t on the generator clock (lead
// early, so that the loop sees it at t), unless the timer is already armed
// to fire before. It reports false, arming nothing, when t is so close that
// the caller should not wait at all.
func (p *poller) wakeAt(t, now int64) (bool, error) {
	fire := t - p.lead
	if fire <= now {
		return false, nil
	}
	if p.armed != 0 && p.armed <= fire {
		return true, nil
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(fire - now)}
	if err := unix.TimerfdSettime(p.tfd, 0, &spec, nil); err != nil {
		return false, fmt.Errorf("timerfd_settime: %w", err)
	}
	p.armed = fire
	return true, nil
}

// fired notes a timer event seen at now: the timer is disarmed, and when
// the event woke the parked loop the lead follows how late it was seen (an
// EWMA, as Pacer's; an event seen while the loop was busy says nothing about
// wake-up latency).
func (p *poller) fired(now int64) {
	if p.armed == 0 {
		return
	}
	if p.parked {
		over := min(max(now-p.armed, 0), maxLead)
		p.lead += (over - p.lead) / 8
	}
	p.armed = 0
}

// Close releases the epoll set and the timer (not the watched sockets).
func (p *poller) Close() {
	p.epf.Close()
	unix.Close(p.tfd)
}
