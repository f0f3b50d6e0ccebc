package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// perfRecorder samples a server with `perf record` over the measured window
// (-perf): cpu-clock at 999 Hz with call graphs, then writes a flat
// `perf report` next to the data. perf runs on the generator's CPU.
type perfRecorder struct {
	data string // output path of perf.data
	cmd  *exec.Cmd
	err  error
}

func (p *perfRecorder) start(pids []int) {
	p.cmd = exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-g",
		"-p", pidList(pids), "-o", p.data)
	p.cmd.Stdout, p.cmd.Stderr = nil, nil
	if p.err = p.cmd.Start(); p.err != nil {
		p.cmd = nil
	}
}

func (p *perfRecorder) stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

// pidList is perf's -p argument: comma-separated pids.
func pidList(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// report writes <data>.txt: the flat profile of the server's own samples.
func (p *perfRecorder) report() error {
	if p.err != nil {
		return p.err
	}
	out, err := os.Create(p.data + ".txt")
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("perf", "report", "-i", p.data, "--stdio", "--no-children", "-g", "none",
		"--sort", "dso,symbol", "-F", "overhead,dso,sym", "--percent-limit", "0.3")
	cmd.Stdout = out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("perf report: %w", err)
	}
	return nil
}

// heapStats forces a GC in edge (/debug/pprof/heap?gc=1) and returns the
// live heap and the goroutine stacks in use, in bytes, from the MemStats
// block of the debug=1 output.
func heapStats(addr string) (heap, stack int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/debug/pprof/heap?gc=1&debug=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	heap, stack = -1, -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			heap, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "# Stack = "); ok {
			f, _, _ := strings.Cut(v, " ")
			stack, _ = strconv.ParseInt(f, 10, 64)
		}
	}
	if heap < 0 || stack < 0 {
		return 0, 0, fmt.Errorf("pprof heap: no MemStats in the answer")
	}
	return heap, stack, sc.Err()
}

// heapProfile saves edge's heap profile (/debug/pprof/heap, as of its
// last GC) to path, for go tool pprof -sample_index=inuse_space.
func heapProfile(addr, path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/debug/pprof/heap", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof heap: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// cpuProfile fetches a CPU profile of the given length from edge's pprof
// endpoint into path. It runs in the background; wait for the result on the
// returned channel.
func cpuProfile(addr string, seconds int, path string) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+20)*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET",
			fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("pprof profile: %s", resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return done
}
