package loop

import (
	"bytes"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// idleBatch is how many connections BenchmarkIdleConns holds at once: far
// below the 20,000-descriptor limit (each takes two in the process).
const idleBatch = 1000

// openIdle connects n raw sockets to s, upgrades each to WebSocket and
// waits for every 101: n idle connections the server holds open. It
// returns the client descriptors.
func openIdle(tb testing.TB, s *Server, d *rawDialer, n int) []int {
	tb.Helper()
	req := upgradeRequest()
	fds := make([]int, n)
	for i := range fds {
		fds[i] = d.dial(tb)
		if _, err := unix.Write(fds[i], req); err != nil {
			tb.Fatal(err)
		}
	}
	buf := make([]byte, 512)
	for _, fd := range fds {
		got := 0
		for !bytes.Contains(buf[:got], []byte("\r\n\r\n")) {
			m, err := unix.Read(fd, buf[got:])
			if err != nil || m == 0 {
				tb.Fatalf("read after %q: %v", buf[:got], err)
			}
			got += m
		}
	}
	return fds
}

// BenchmarkIdleConns measures what an idle WebSocket connection costs the
// server (issue 21): per op, idleBatch connections are accepted, upgraded
// and held, the live heap is read after a GC, and they are closed.
// heap-B/conn is the live heap each one holds while idle; allocs/conn and
// B/conn what its accept and upgrade allocate (the client's raw sockets
// allocate little: a slice of descriptors per op). W3 in bench measures the
// same in RSS.
func BenchmarkIdleConns(b *testing.B) {
	s := startLoopServer(b, Config{})
	d := newRawDialer(b, s)
	var held, mallocs, bytes uint64
	var opened uint64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		before := liveHeap()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		b.StartTimer()
		fds := openIdle(b, s, d, idleBatch)
		opened += idleBatch
		waitConns(b, s, opened, idleBatch)
		b.StopTimer()
		runtime.ReadMemStats(&m1)
		mallocs += m1.Mallocs - m0.Mallocs
		bytes += m1.TotalAlloc - m0.TotalAlloc
		held += liveHeap() - before
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		waitConns(b, s, opened, 0)
		b.StartTimer()
	}
	n := float64(b.N * idleBatch)
	b.ReportMetric(float64(held)/n, "heap-B/conn")
	b.ReportMetric(float64(mallocs)/n, "allocs/conn")
	b.ReportMetric(float64(bytes)/n, "B/conn")
}
