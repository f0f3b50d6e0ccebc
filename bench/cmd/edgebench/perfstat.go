package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// syscallEvents are the tracepoints perf stat counts on a server: every
// system call's entry, and the calls that wait for events (gnet waits with
// epoll_wait, Go's netpoller with epoll_pwait). Hardware counters are not
// needed (and not available in every VM); these tracepoints are.
//
// Reads and writes come from /proc/PID/io instead (procIO), which the
// kernel keeps anyway and which agreed with the read and write tracepoints
// within 0.5% on every server: a syscalls:sys_enter_X tracepoint costs the
// server time on every call X, and reads and writes are most of its
// calls. On the 2-core VM this was written on, raw_syscalls:sys_enter cost
// the server about 0.3 us per call, and a read or a write about 0.3 us
// more with its own tracepoint counted too.
var syscallEvents = []string{
	"raw_syscalls:sys_enter",
	"syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_epoll_pwait", "syscalls:sys_enter_epoll_pwait2",
}

// Syscalls are a server's system calls over the measured window: the total
// and the epoll waits counted by perf stat, the reads and writes by the
// kernel's I/O accounting (/proc/PID/io; -1 when it could not be read).
type Syscalls struct {
	Total      int64 `json:"total"`
	Reads      int64 `json:"reads"`
	Writes     int64 `json:"writes"`
	EpollWaits int64 `json:"epoll_waits"`
	// Per operation (the operations the server CPU us/op divides by); 0
	// when the workload has no per-operation figure (W3, W5).
	PerOp           float64          `json:"per_op,omitempty"`
	ReadsPerOp      float64          `json:"reads_per_op,omitempty"`
	WritesPerOp     float64          `json:"writes_per_op,omitempty"`
	EpollWaitsPerOp float64          `json:"epoll_waits_per_op,omitempty"`
	ByCall          map[string]int64 `json:"by_call,omitempty"` // the calls perf counted one by one, when made: epoll_wait, epoll_pwait
}

// newSyscalls builds the record's figures from perf stat's counts (by event
// name), the window's reads and writes (nil: unknown) and its operations.
func newSyscalls(counts map[string]int64, rw *ioCalls, ops int64) (*Syscalls, error) {
	total, ok := counts[syscallEvents[0]]
	if !ok {
		return nil, fmt.Errorf("no %s count in perf stat's output", syscallEvents[0])
	}
	s := &Syscalls{Total: total, Reads: -1, Writes: -1, ByCall: map[string]int64{}}
	for ev, n := range counts {
		if call, ok := strings.CutPrefix(ev, "syscalls:sys_enter_"); ok && n > 0 {
			s.ByCall[call] = n
			if strings.HasPrefix(call, "epoll_") {
				s.EpollWaits += n
			}
		}
	}
	if rw != nil {
		s.Reads, s.Writes = rw.reads, rw.writes
	}
	if ops > 0 {
		f := float64(ops)
		s.PerOp, s.EpollWaitsPerOp = float64(s.Total)/f, float64(s.EpollWaits)/f
		if rw != nil {
			s.ReadsPerOp, s.WritesPerOp = float64(s.Reads)/f, float64(s.Writes)/f
		}
	}
	return s, nil
}

// parsePerfStat reads the counts of `perf stat -x,` output (one line per
// event: value,unit,event,time enabled,percent running,...), by event name.
// "<not counted>" (the event was enabled while none of the process's
// threads ran) is 0; "<not supported>" is an error.
func parsePerfStat(r io.Reader) (map[string]int64, error) {
	counts := map[string]int64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 3 || f[2] == "" {
			continue
		}
		ev, v := f[2], f[0]
		var n float64
		switch v {
		case "<not counted>":
		case "<not supported>":
			return nil, fmt.Errorf("perf stat: %s not supported", ev)
		default:
			var err error
			if n, err = strconv.ParseFloat(v, 64); err != nil {
				return nil, fmt.Errorf("perf stat: bad count %q for %s", v, ev)
			}
		}
		counts[ev] += int64(n)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(counts) == 0 {
		return nil, errors.New("perf stat: no counts in its output")
	}
	return counts, nil
}

// probePerfStat checks that perf stat can count events here the way the
// phases use it (started disabled, driven through a control descriptor),
// on a process of its own (`perf stat ... true`). It returns the events to
// count: all of syscallEvents, or only the total when the epoll
// tracepoints are refused.
func probePerfStat() ([]string, error) {
	if _, err := exec.LookPath("perf"); err != nil {
		return nil, errors.New("perf not found (apt-get install linux-perf)")
	}
	try := func(events []string) error {
		ctlR, ctlW, err := os.Pipe()
		if err != nil {
			return err
		}
		defer ctlR.Close()
		defer ctlW.Close()
		ackR, ackW, err := os.Pipe()
		if err != nil {
			return err
		}
		defer ackR.Close()
		defer ackW.Close()
		cmd := exec.Command("perf", append(perfStatArgs(events), "true")...)
		cmd.ExtraFiles = []*os.File{ctlR, ackW}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("perf stat refused: %v: %s", err, firstLine(strings.TrimSpace(string(out))))
		}
		return nil
	}
	if err := try(syscallEvents); err == nil {
		return syscallEvents, nil
	}
	if err := try(syscallEvents[:1]); err != nil {
		return nil, err
	}
	return syscallEvents[:1], nil
}

// perfStatArgs are perf stat's arguments before the target: CSV, counters
// created disabled (-D -1), enabled and disabled through fd 3 (commands)
// and fd 4 (acknowledgements).
func perfStatArgs(events []string) []string {
	return []string{"stat", "-x,", "-D", "-1", "--control", "fd:3,4", "-e", strings.Join(events, ",")}
}

// perfStat counts a server's system calls over the measured window: perf
// stat attaches to the server before the window with its counters disabled
// (attaching takes tens of milliseconds, more on a busy machine), the
// sampler's hooks enable and disable them at the window's edges through
// perf's control descriptor (a pipe write, which does not stall an
// open-loop sender), and stop interrupts perf (SIGINT) and reads its CSV
// output. perf inherits the harness's CPU: the generator's.
type perfStat struct {
	cmd    *exec.Cmd
	out    string   // the CSV output file
	ctl    *os.File // write end of perf's command pipe
	acks   chan struct{}
	stderr *bytes.Buffer // written by the stderr copier; read only once acks is closed

	// Used by one goroutine at a time: the phase's, which runs the hooks
	// and then stop.
	sent    int  // commands written, each answered by one ack
	enabled bool // "enable" was sent: there is a window to report
}

// startPerfStat attaches perf stat to pid with its counters disabled and
// waits until perf answers a command, so that its counters exist before
// the window opens. out receives the CSV output.
func startPerfStat(pids []int, events []string, out string) (*perfStat, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	p := &perfStat{out: out, ctl: ctlW, acks: make(chan struct{}, 4), stderr: new(bytes.Buffer)}
	p.cmd = exec.Command("perf", append(perfStatArgs(events), "-p", pidList(pids), "-o", out)...)
	p.cmd.ExtraFiles = []*os.File{ctlR, ackW}
	stderr, err := p.cmd.StderrPipe()
	if err == nil {
		err = p.cmd.Start()
	}
	ctlR.Close()
	ackW.Close()
	if err != nil {
		ctlW.Close()
		ackR.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(p.stderr, io.LimitReader(stderr, 64<<10))
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		// perf writes "ack\n\x00" (the C string's terminator included).
		sc := bufio.NewScanner(ackR)
		for sc.Scan() {
			if strings.Trim(sc.Text(), "\x00") == "ack" {
				p.acks <- struct{}{}
			}
		}
		ackR.Close()
		wg.Wait() // stderr complete before acks closes
		close(p.acks)
	}()
	// "disable" is a no-op on disabled counters: its ack says perf is ready.
	if err := p.command("disable"); err == nil {
		err = p.waitAcks(10 * time.Second)
	}
	if err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

func (p *perfStat) command(c string) error {
	if _, err := p.ctl.Write([]byte(c + "\n")); err != nil {
		return err
	}
	p.sent++
	return nil
}

// waitAcks waits for the answers to every command sent.
func (p *perfStat) waitAcks(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for ; p.sent > 0; p.sent-- {
		select {
		case _, ok := <-p.acks:
			if !ok {
				return fmt.Errorf("perf stat exited: %s", p.stderrLine())
			}
		case <-t.C:
			return errors.New("perf stat did not answer its control commands")
		}
	}
	return nil
}

// stderrLine is perf's last line of complaint; only after acks is closed.
func (p *perfStat) stderrLine() string {
	var last string
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "Events ") {
			last = l
		}
	}
	if last == "" {
		last = "no message"
	}
	return last
}

// enable starts counting (the window's start). It does not wait for perf.
func (p *perfStat) enable() {
	if p.command("enable") == nil {
		p.enabled = true
	}
}

// disable stops counting (the window's end). It does not wait for perf.
func (p *perfStat) disable() { p.command("disable") }

// stop waits until perf has carried out the commands, interrupts it and
// returns its counts: nil when the window never opened.
func (p *perfStat) stop() (map[string]int64, error) {
	err := p.waitAcks(5 * time.Second)
	p.kill()
	if err != nil || !p.enabled {
		return nil, err
	}
	f, err := os.Open(p.out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parsePerfStat(f)
}

// kill interrupts perf (SIGINT: it prints its counts and exits), then
// SIGKILL after 10 s; this process only, by its pid.
func (p *perfStat) kill() {
	p.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		for range p.acks {
		}
		p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	p.ctl.Close()
}
