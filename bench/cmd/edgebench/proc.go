package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100 on
// every Linux architecture Go supports.
const clockTick = 100

// cpuTimes are a process's accumulated CPU times.
type cpuTimes struct {
	user, sys time.Duration
}

func (c cpuTimes) sub(o cpuTimes) cpuTimes { return cpuTimes{c.user - o.user, c.sys - o.sys} }

// procCPU reads utime and stime (all threads, live and exited) from
// /proc/PID/stat.
func procCPU(pid int) (cpuTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTimes{}, err
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return cpuTimes{}, fmt.Errorf("proc stat: malformed %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return cpuTimes{}, fmt.Errorf("proc stat: %d fields", len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return cpuTimes{}, fmt.Errorf("proc stat: bad times %q %q", f[11], f[12])
	}
	tick := time.Second / clockTick
	return cpuTimes{time.Duration(ut) * tick, time.Duration(st) * tick}, nil
}

// procCPUs sums procCPU over pids.
func procCPUs(pids []int) (cpuTimes, error) {
	var sum cpuTimes
	for _, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return sum, err
		}
		sum.user += c.user
		sum.sys += c.sys
	}
	return sum, nil
}

// selfCPU is the harness's own CPU time (getrusage, microsecond resolution).
func selfCPU() cpuTimes {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return cpuTimes{}
	}
	return cpuTimes{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}

// selfRunWaits is how long each of the harness's threads has waited,
// runnable, for a CPU, by thread id (the second field of
// /proc/self/task/*/schedstat), or nil when the kernel does not say.
func selfRunWaits() map[string]time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	m := make(map[string]time.Duration, len(tasks))
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // exited
		}
		w, ok := runWait(b)
		if !ok {
			return nil
		}
		m[t.Name()] = w
	}
	return m
}

// maxRunWait is the longest a thread waited for a CPU between two
// selfRunWaits: the generator loop's thread, usually (its goroutine runs
// on one thread while it spins). Not the sum: the harness's threads share
// the generator's one CPU and wait for each other, behind the spinning loop
// too, which is not time the loop lost. 0 when unknown.
func maxRunWait(w0, w1 map[string]time.Duration) time.Duration {
	var m time.Duration
	for tid, b := range w1 {
		if a, ok := w0[tid]; ok {
			m = max(m, b-a)
		}
	}
	return m
}

// runWait is the run-queue wait of a schedstat line: "<on CPU ns> <waiting
// ns> <timeslices>".
func runWait(schedstat []byte) (time.Duration, bool) {
	f := strings.Fields(string(schedstat))
	if len(f) < 2 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(ns), err == nil && ns >= 0
}

// procStatus returns a field of /proc/PID/status, such as VmRSS (in KiB for
// the Vm fields) or Cpus_allowed_list.
func procStatus(pid int, field string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("proc status: no %s", field)
}

// ioCalls are a process's read-class and write-class system calls so far
// (syscr and syscw of /proc/PID/io, all threads, live and exited): read,
// readv, pread and the like, and write, writev, pwrite and the like, on
// any descriptor, sockets included (recvfrom, recvmsg, sendto and sendmsg
// are not counted). The kernel keeps them always, so they cost nothing to
// read.
type ioCalls struct{ reads, writes int64 }

func procIO(pid int) (ioCalls, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return ioCalls{}, err
	}
	c := ioCalls{-1, -1}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch {
		case k != "syscr" && k != "syscw":
			continue
		case err != nil:
			return ioCalls{}, fmt.Errorf("proc io: bad %s %q", k, v)
		case k == "syscr":
			c.reads = n
		default:
			c.writes = n
		}
	}
	if c.reads < 0 || c.writes < 0 {
		return ioCalls{}, errors.New("proc io: no syscr or syscw")
	}
	return c, nil
}

// procIOs sums procIO over pids.
func procIOs(pids []int) (ioCalls, error) {
	var sum ioCalls
	for _, pid := range pids {
		c, err := procIO(pid)
		if err != nil {
			return sum, err
		}
		sum.reads += c.reads
		sum.writes += c.writes
	}
	return sum, nil
}

// rssKiB is the resident set size of a process in KiB.
func rssKiB(pid int) (int64, error) {
	v, err := procStatus(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
}

// pinning decides which CPU the servers and the generator run on.
type pinning struct {
	on             bool
	server, client int
	why            string // when off: the reason
}

// choosePinning takes the first two CPUs the harness may run on.
func choosePinning(want bool) pinning {
	if !want {
		return pinning{why: "disabled by -pin=false"}
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return pinning{why: "sched_getaffinity: " + err.Error()}
	}
	var cpus []int
	for i := 0; i < 1024 && len(cpus) < 2; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return pinning{why: fmt.Sprintf("only %d CPU available", len(cpus))}
	}
	return pinning{on: true, server: cpus[0], client: cpus[1]}
}

// eachThread calls f with the id of every thread of the harness. Affinity
// and nice values are per thread on Linux; threads created later inherit
// them from their creator, and so do child processes.
func eachThread(f func(tid int) error) error {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := f(tid); err != nil {
			return err
		}
	}
	return nil
}

// pinSelf moves every thread of the harness to cpu. It also sets GOMAXPROCS
// to 1, since the generator then has one core.
func pinSelf(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	err := eachThread(func(tid int) error {
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("sched_setaffinity(%d): %w", tid, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	runtime.GOMAXPROCS(1)
	return nil
}

// reniceSelf sets the nice value of every thread of the harness (and so of
// the servers it starts).
func reniceSelf(nice int) error {
	return eachThread(func(tid int) error {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("setpriority(%d, %d): %w", tid, nice, err)
		}
		return nil
	})
}

// startOnThread runs start (an exec.Cmd's Start) on a dedicated, locked OS
// thread that stays alive until hold is closed. With cpu >= 0 that thread is
// first pinned to cpu, so the child inherits the mask (the effect of
// `taskset -c cpu`, without needing taskset). Keeping the thread makes
// Pdeathsig (sent when the forking thread dies) mean "when the harness
// dies", and the thread exits locked, so its mask never leaks into the
// harness.
func startOnThread(cpu int, start func() error, hold <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if cpu >= 0 {
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errc <- fmt.Errorf("sched_setaffinity: %w", err)
				return
			}
		}
		err := start()
		errc <- err
		if err == nil {
			<-hold
		}
	}()
	return <-errc
}
