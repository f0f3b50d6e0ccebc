package main

import (
	"math"
	"path/filepath"
	"time"

	"github.com/openengine/edge/bench/load"
)

// Record is one line of results.jsonl: one workload x variant x peer.
type Record struct {
	Run      string         `json:"run"`
	Workload string         `json:"workload"`
	Variant  string         `json:"variant"`
	Peer     string         `json:"peer"`
	Params   map[string]any `json:"params,omitempty"`
	Started  time.Time      `json:"started"`
	OK       bool           `json:"ok"`
	Skipped  bool           `json:"skipped,omitempty"` // not run: a tool it needs is missing (Error says which); not a failure
	Error    string         `json:"error,omitempty"`
	Notes    []string       `json:"notes,omitempty"`

	// Throughput is operations per second in the measured window: requests,
	// deliveries, upgrades or messages, as Unit says.
	Throughput float64       `json:"throughput,omitempty"`
	Unit       string        `json:"unit,omitempty"`
	Ops        int64         `json:"ops,omitempty"`
	Seconds    float64       `json:"seconds,omitempty"`
	Errors     int64         `json:"errors,omitempty"`
	Latency    *load.Latency `json:"latency,omitempty"`
	SendLag    *load.Latency `json:"send_lag,omitempty"`

	Server *Usage `json:"server,omitempty"` // the server process over the window (P1: the proxy; none for direct)
	Client *Usage `json:"client,omitempty"` // the load generator (this harness) over the window
	// Upstream is P1's upstream edge (behind the proxy, or alone for
	// direct) over the window, and UpstreamSyscalls its system calls.
	Upstream         *Usage    `json:"upstream,omitempty"`
	UpstreamSyscalls *Syscalls `json:"upstream_syscalls,omitempty"`
	// NATS and Workers are C1's NATS server and its workers (summed; each
	// one's in Extra) over the window.
	NATS    *Usage `json:"nats,omitempty"`
	Workers *Usage `json:"workers,omitempty"`

	// Syscalls are the server's system calls over the window (perf stat);
	// SyscallsOff says why they were not counted in this run.
	Syscalls    *Syscalls `json:"syscalls,omitempty"`
	SyscallsOff string    `json:"syscalls_off,omitempty"`

	// Idle connections (W3).
	Conns          int     `json:"conns,omitempty"`
	RSSBaseKiB     int64   `json:"rss_base_kib,omitempty"`
	RSSKiB         int64   `json:"rss_kib,omitempty"`
	RSSPerConnKiB  float64 `json:"rss_per_conn_kib,omitempty"`
	HeapPerConnKiB float64 `json:"heap_per_conn_kib,omitempty"` // live heap at the last GC (gctrace, MB resolution)

	Pinned     bool   `json:"pinned"`
	ServerCPUs string `json:"server_cpus,omitempty"`

	// Extra holds workload-specific results (the load package's structs).
	Extra any `json:"extra,omitempty"`
}

// Usage is a process's resource use over the measured window.
type Usage struct {
	UserS   float64 `json:"user_s"`
	SysS    float64 `json:"sys_s"`
	Util    float64 `json:"util"`                // CPU seconds per second (1 = one core busy)
	UsPerOp float64 `json:"us_per_op,omitempty"` // CPU microseconds per operation
	RSSKiB  int64   `json:"rss_kib,omitempty"`
	// The generator only: the longest one of its threads waited, runnable,
	// for a CPU in the window (the machine was busy; maxRunWait).
	RunWaitS float64 `json:"run_wait_s,omitempty"`
}

// sampler takes the server's and the harness's CPU times at the edges of a
// measured window (load.Hooks).
type sampler struct {
	// pids are the server's processes: CPU times, reads and writes and
	// system calls are their sums, the RSS is the first one's (nginx: the
	// worker, then the master).
	pids []int
	perf *perfRecorder // nil: no profile
	stat *perfStat     // nil: no syscall count
	// pprof: fetch a Go CPU profile of pprofSeconds into pprofPath over the
	// window (edge with -pprof).
	pprofAddr    string
	pprofPath    string
	pprofSeconds int
	pprofDone    <-chan error
	t0, t1       time.Time
	s0, s1       cpuTimes
	c0, c1       cpuTimes
	w0, w1       map[string]time.Duration // selfRunWaits at the window's edges
	rss          int64
	io0, io1     ioCalls // with stat: reads and writes at the window's edges
	ioErr        error
	ops          int64 // the operations usage divided by
	err          error
}

func (s *sampler) hooks() load.Hooks {
	return load.Hooks{OnStart: s.start, OnEnd: s.end}
}

func (s *sampler) start() {
	if s.perf != nil {
		s.perf.start(s.pids)
	}
	if s.pprofAddr != "" && s.pprofPath != "" {
		s.pprofDone = cpuProfile(s.pprofAddr, s.pprofSeconds, s.pprofPath)
	}
	if s.stat != nil {
		s.stat.enable()
		s.io0, s.ioErr = procIOs(s.pids)
	}
	s.t0 = time.Now()
	s.c0, s.w0 = selfCPU(), selfRunWaits()
	s.s0, s.err = procCPUs(s.pids)
}

func (s *sampler) end() {
	s.t1 = time.Now()
	s.c1, s.w1 = selfCPU(), selfRunWaits()
	var err error
	if s.s1, err = procCPUs(s.pids); err != nil && s.err == nil {
		s.err = err
	}
	if s.stat != nil {
		var err error
		if s.io1, err = procIOs(s.pids); err != nil && s.ioErr == nil {
			s.ioErr = err
		}
		s.stat.disable()
	}
	s.rss, _ = rssKiB(s.pids[0])
	if s.perf != nil {
		s.perf.stop()
	}
}

// readsWrites returns the server's reads and writes over the window (with
// stat), or nil and why not.
func (s *sampler) readsWrites() (*ioCalls, error) {
	if s.ioErr != nil {
		return nil, s.ioErr
	}
	if s.t1.IsZero() {
		return nil, nil
	}
	return &ioCalls{s.io1.reads - s.io0.reads, s.io1.writes - s.io0.writes}, nil
}

// usage returns the server's and the client's use per op.
func (s *sampler) usage(ops int64) (server, client *Usage) {
	s.ops = ops
	if s.t1.IsZero() || s.err != nil {
		return nil, nil
	}
	secs := s.t1.Sub(s.t0).Seconds()
	mk := func(d cpuTimes) *Usage {
		u := &Usage{UserS: d.user.Seconds(), SysS: d.sys.Seconds()}
		u.Util = (u.UserS + u.SysS) / secs
		if ops > 0 {
			u.UsPerOp = (u.UserS + u.SysS) * 1e6 / float64(ops)
		}
		return u
	}
	server, client = mk(s.s1.sub(s.s0)), mk(s.c1.sub(s.c0))
	client.RunWaitS = maxRunWait(s.w0, s.w1).Seconds()
	server.RSSKiB = s.rss
	return server, client
}

// instrument attaches what opts asks for to the sampler's server over the
// window: a Go CPU profile from pprofAddr (when not ""), perf record, perf
// stat. Their files are logs/<base>.*. A problem is noted in rec.
func (s *sampler) instrument(out, base string, window time.Duration, pprofAddr string, perf bool, statEvents []string, rec *Record, note string) {
	logs := filepath.Join(out, "logs", base)
	if pprofAddr != "" && window > 0 {
		s.pprofAddr, s.pprofPath = pprofAddr, logs+".pprof"
		s.pprofSeconds = int(math.Ceil(window.Seconds()))
	}
	if perf {
		s.perf = &perfRecorder{data: logs + ".perf.data"}
	}
	if statEvents != nil {
		st, err := startPerfStat(s.pids, statEvents, logs+".perfstat.csv")
		if err != nil {
			rec.Notes = append(rec.Notes, note+"perf stat: "+err.Error())
		}
		s.stat = st
	}
}

// finish stops the instruments after the run and returns the window's
// system calls (nil when not counted). Problems are noted in rec.
func (s *sampler) finish(rec *Record, note string) *Syscalls {
	var sc *Syscalls
	if st := s.stat; st != nil {
		counts, err := st.stop()
		if err == nil && counts != nil {
			rw, ioErr := s.readsWrites()
			if ioErr != nil {
				rec.Notes = append(rec.Notes, note+"reads and writes not counted: "+ioErr.Error())
			}
			sc, err = newSyscalls(counts, rw, s.ops)
		}
		if err != nil {
			rec.Notes = append(rec.Notes, note+"perf stat: "+err.Error())
		}
	}
	if s.pprofDone != nil {
		if err := <-s.pprofDone; err != nil {
			rec.Notes = append(rec.Notes, note+"pprof: "+err.Error())
		}
	}
	if s.perf != nil {
		s.perf.stop()
		if err := s.perf.report(); err != nil {
			rec.Notes = append(rec.Notes, note+"perf: "+err.Error())
		}
	}
	return sc
}
