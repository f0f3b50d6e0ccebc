package metrics

import (
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/openengine/edge/internal/hist"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
)

// fakeGateway is a gateway's counters that a test moves by hand: read
// returns them as the snapshot a scrape would take.
type fakeGateway struct {
	mu    sync.Mutex
	s     snapshot // guarded by mu
	reads int      // guarded by mu
}

func newFakeGateway(upstreams ...string) *fakeGateway {
	f := &fakeGateway{}
	f.s.loop.RPC.Methods = make([]rpc.MethodCounters, 2)
	for _, n := range upstreams {
		f.s.upstreams = append(f.s.upstreams, upstreamStats{name: n})
	}
	return f
}

// answer counts n requests answered ok after d each.
func (f *fakeGateway) answer(n int, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &f.s.loop.RPC.Methods[1]
	for range n {
		m.Outcomes[rpc.OutcomeOK]++
		m.Duration.Observe(int64(d))
	}
}

func (f *fakeGateway) set(change func(s *snapshot)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.s)
}

func (f *fakeGateway) read() snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	s := f.s
	s.loop.RPC.Methods = append([]rpc.MethodCounters(nil), f.s.loop.RPC.Methods...)
	s.upstreams = append([]upstreamStats(nil), f.s.upstreams...)
	return s
}

// metricsOf returns Metrics that read f (no loops, no rpc server).
func metricsOf(f *fakeGateway, upstreams ...string) *Metrics {
	return &Metrics{read: f.read, history: newHistory(upstreams)}
}

// TestSampleSize: the history's sample is the size its doc states, so the
// memory figure of history.go (HistoryLen samples) stays true.
func TestSampleSize(t *testing.T) {
	if got := unsafe.Sizeof(sample{}); got != sampleBytes {
		t.Fatalf("a sample is %d bytes, history.go says %d", got, sampleBytes)
	}
	if got := unsafe.Sizeof(upSample{}); got != 8 {
		t.Fatalf("an upstream sample is %d bytes, history.go says 8", got)
	}
}

// TestHistoryRing: the ring keeps the newest HistoryLen samples, oldest
// first, whatever number was recorded; each has the counters as read.
func TestHistoryRing(t *testing.T) {
	for _, tt := range []struct {
		name     string
		recorded int
	}{
		{"empty", 0},
		{"one", 1},
		{"part", 42},
		{"exactly full", HistoryLen},
		{"wrapped", HistoryLen + 50},
		{"wrapped twice and more", 2*HistoryLen + 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeGateway("a", "b")
			m := metricsOf(f, "a", "b")
			t0 := time.Unix(1_700_000_000, 0)
			for i := range tt.recorded {
				f.set(func(s *snapshot) {
					s.loop.Conns[loop.TransportWebSocket] = i
					s.upstreams[1].st = upstream.Stats{Up: i % 3, Total: 2}
				})
				s := f.read()
				m.history.record(t0.Add(time.Duration(i)*time.Second), &s)
			}
			samples, ups := m.history.copyOut()
			want := min(tt.recorded, HistoryLen)
			if len(samples) != want || len(ups) != 2*want {
				t.Fatalf("%d samples and %d upstream rows, want %d and %d", len(samples), len(ups), want, 2*want)
			}
			first := tt.recorded - want
			for k, smp := range samples {
				i := first + k
				if smp.at != t0.Add(time.Duration(i)*time.Second).UnixMilli() || smp.conns[loop.TransportWebSocket] != int32(i) {
					t.Fatalf("sample %d: at %d with %d connections, want recording %d", k, smp.at, smp.conns[0], i)
				}
				if u := ups[2*k+1]; u.up != int32(i%3) || u.total != 2 {
					t.Fatalf("sample %d: upstream b %+v, want %d/2", k, u, i%3)
				}
			}
		})
	}
}

// TestHistoryLatencyFromDeltas: each sample's quantiles are those of the
// requests answered in the latencyWindow before it, not since start: after
// 10 s of 1000 requests/s at 1 ms, then 10 s of 100/s at 100 ms, the last
// sample's p50 is in 100 ms's bucket (since start, it would be 1 ms's), and
// a sample of an idle window is 0.
func TestHistoryLatencyFromDeltas(t *testing.T) {
	f := newFakeGateway()
	m := metricsOf(f)
	t0 := time.Unix(1_700_000_000, 0)
	at := 0
	step := func(n int, d time.Duration) {
		f.answer(n, d)
		s := f.read()
		m.history.record(t0.Add(time.Duration(at)*time.Second), &s)
		at++
	}
	for range 10 {
		step(1000, time.Millisecond)
	}
	for range 10 {
		step(100, 100*time.Millisecond)
	}
	for range 6 {
		step(0, 0)
	}
	samples, _ := m.history.copyOut()
	if p50 := samples[9].p50; p50 <= 0.0005 || p50 > 0.001 {
		t.Errorf("at 9 s, p50 %v, want in (0.5 ms, 1 ms]", p50)
	}
	if p50, p99 := samples[19].p50, samples[19].p99; p50 <= 0.05 || p50 > 0.1 || p99 <= 0.05 || p99 > 0.1 {
		t.Errorf("at 19 s, p50 %v p99 %v, want both in (50 ms, 100 ms]", p50, p99)
	}
	var total hist.Hist
	total.Add(&f.read().loop.RPC.Methods[1].Duration)
	if since := total.Quantile(.5); since > 0.001 {
		t.Fatalf("the test's premise: p50 since start is %v, want at most 1 ms", since)
	}
	if last := samples[len(samples)-1]; last.p50 != 0 || last.p99 != 0 {
		t.Errorf("after 6 idle seconds, p50 %v p99 %v, want 0", last.p50, last.p99)
	}
}

// historyDoc is /api/history as the page reads it.
type historyDoc struct {
	Instance map[string]any   `json:"instance"`
	Interval int64            `json:"interval"`
	Samples  []map[string]any `json:"samples"`
}

// TestHistoryJSON: /api/history is the instance, the interval and the
// samples oldest first, each with the fields of /api/stats (requests
// summed over every outcome but cancelled, connections, closes by code and
// the upstreams by name), and no instance of its own.
func TestHistoryJSON(t *testing.T) {
	f := newFakeGateway("accounts")
	m := metricsOf(f, "accounts")
	m.SetInstance(Instance{Listen: []string{"ws://127.0.0.1:8080/", "tcp://127.0.0.1:9000"}, Admin: "127.0.0.1:9090", Version: "edge v1.2.3"})
	t0 := time.UnixMilli(1_700_000_000_000)
	for i := range 3 {
		f.set(func(s *snapshot) {
			c := &s.loop.RPC.Methods[0]
			c.Outcomes[rpc.OutcomeOK] += 10
			c.Outcomes[rpc.OutcomeCancelled] += 2
			c.Outcomes[rpc.OutcomeTimeout]++
			s.loop.Conns = [loop.NumTransports]int{loop.TransportWebSocket: 40 + i, loop.TransportNDJSON: 2}
			s.loop.Closes[0] += 5
			s.loop.SlowConsumers = uint64(i)
			s.inFlight = 7
			s.loop.RPC.Subscriptions = 3
			s.upstreams[0].st = upstream.Stats{Up: 1, Total: 2}
		})
		s := f.read()
		m.history.record(t0.Add(time.Duration(i)*time.Second), &s)
	}
	rec := httptest.NewRecorder()
	m.HistoryHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/history", nil))
	if ct := rec.Header().Get("Content-Type"); rec.Code != 200 || ct != "application/json" {
		t.Fatalf("status %d, Content-Type %q", rec.Code, ct)
	}
	var doc historyDoc
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if doc.Interval != 1000 || len(doc.Samples) != 3 {
		t.Fatalf("interval %d with %d samples, want 1000 and 3: %s", doc.Interval, len(doc.Samples), rec.Body)
	}
	if doc.Instance["admin"] != "127.0.0.1:9090" || doc.Instance["version"] != "edge v1.2.3" ||
		len(doc.Instance["listen"].([]any)) != 2 || doc.Instance["listen"].([]any)[1] != "tcp://127.0.0.1:9000" {
		t.Errorf("instance %v", doc.Instance)
	}
	last, _ := json.Marshal(doc.Samples[2])
	want := `{"closes":{"1000":15,"1001":0,"1002":0,"1003":0,"1006":0,"1007":0,"1008":0,"1009":0,"4401":0,"other":0},` +
		`"connections":{"ndjson":2,"ws":42},"inFlight":7,"latency":{"p50":0,"p99":0},` +
		`"outcomes":{"busy":0,"cancelled":6,"error":0,"ok":30,"rate_limited":0,"timeout":3,"unavailable":0},` +
		`"requests":33,"slowConsumers":2,"subscriptions":3,"time":1700000002000,"upstreams":[{"name":"accounts","total":2,"up":1}]}`
	if string(last) != want {
		t.Errorf("the last sample\n got %s\nwant %s", last, want)
	}
	for i, s := range doc.Samples {
		if s["time"] != float64(t0.Add(time.Duration(i)*time.Second).UnixMilli()) {
			t.Errorf("sample %d at %v, want oldest first a second apart", i, s["time"])
		}
		if _, ok := s["instance"]; ok {
			t.Errorf("sample %d repeats the instance", i)
		}
	}
}

// TestStatsNamesInstance: /api/stats names the instance SetInstance set,
// with any URL's userinfo masked, and an empty one before.
func TestStatsNamesInstance(t *testing.T) {
	f := newFakeGateway()
	m := metricsOf(f)
	get := func() map[string]any {
		rec := httptest.NewRecorder()
		m.serveStats(rec, httptest.NewRequest("GET", "/api/stats", nil))
		var doc struct {
			Instance map[string]any `json:"instance"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			t.Fatalf("%v: %s", err, rec.Body)
		}
		return doc.Instance
	}
	if in := get(); len(in["listen"].([]any)) != 0 || in["admin"] != "" || in["version"] != "" {
		t.Errorf("before SetInstance: %v", in)
	}
	m.SetInstance(Instance{Listen: []string{"wss://user:pw-secret@127.0.0.1:8443/rpc"}, Admin: "127.0.0.1:9090", Version: "edge (devel)"})
	in := get()
	if l := in["listen"].([]any); len(l) != 1 || l[0] != "wss://user:***@127.0.0.1:8443/rpc" || in["admin"] != "127.0.0.1:9090" || in["version"] != "edge (devel)" {
		t.Errorf("after SetInstance: %v", in)
	}
}

// TestSamplerOneHertz: the sampler reads the gateway once at Start and
// then once a second, on a fake clock; Close stops it (its goroutine gone,
// or synctest.Test would not return) and keeps what it took.
func TestSamplerOneHertz(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeGateway()
		m := metricsOf(f)
		start := time.Now()
		m.Start()
		m.Start() // a second Start starts nothing more
		time.Sleep(4*HistoryInterval + HistoryInterval/2)
		synctest.Wait()
		samples, _ := m.history.copyOut()
		if len(samples) != 5 || f.reads != 5 {
			t.Fatalf("after 4.5 s, %d samples of %d reads, want 5 and 5", len(samples), f.reads)
		}
		for i, s := range samples {
			if want := start.Add(time.Duration(i) * HistoryInterval).UnixMilli(); s.at != want {
				t.Errorf("sample %d at %d, want %d", i, s.at, want)
			}
		}
		m.Close()
		m.Close()
		time.Sleep(10 * HistoryInterval)
		synctest.Wait()
		if after, _ := m.history.copyOut(); len(after) != 5 || f.reads != 5 {
			t.Fatalf("after Close, %d samples of %d reads, want 5 still", len(after), f.reads)
		}
		m.Start() // no Start after Close
		time.Sleep(2 * HistoryInterval)
		synctest.Wait()
		if f.reads != 5 {
			t.Fatalf("a Start after Close read the gateway: %d reads", f.reads)
		}
	})
}

// TestCloseWithoutStart: Close on metrics never started returns at once
// (in the bubble, a Close that waited for a sampler would deadlock, which
// synctest reports), and a Start after it starts nothing.
func TestCloseWithoutStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeGateway()
		m := metricsOf(f)
		m.Close()
		m.Start()
		time.Sleep(2 * HistoryInterval)
		synctest.Wait()
		if f.reads != 0 {
			t.Fatalf("%d reads after Close then Start, want 0", f.reads)
		}
	})
}

// BenchmarkHistoryRecord: adding a sample to a full ring, what the sampler
// does once a second after reading the loops (which BenchmarkScrape's
// snapshot covers).
func BenchmarkHistoryRecord(b *testing.B) {
	f := newFakeGateway("a", "b")
	m := metricsOf(f, "a", "b")
	s := f.read()
	t0 := time.Unix(1_700_000_000, 0)
	for i := range HistoryLen {
		m.history.record(t0.Add(time.Duration(i)*time.Second), &s)
	}
	i := HistoryLen
	b.ReportAllocs()
	for b.Loop() {
		m.history.record(t0.Add(time.Duration(i)*time.Second), &s)
		i++
	}
}

// BenchmarkServeHistory: /api/history with a full ring and two upstreams,
// what a page costs the server once, when it opens.
func BenchmarkServeHistory(b *testing.B) {
	f := newFakeGateway("a", "b")
	m := metricsOf(f, "a", "b")
	t0 := time.Unix(1_700_000_000, 0)
	for i := range HistoryLen {
		f.answer(100, time.Millisecond)
		s := f.read()
		m.history.record(t0.Add(time.Duration(i)*time.Second), &s)
	}
	req := httptest.NewRequest("GET", "/api/history", nil)
	var size int
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		m.serveHistory(rec, req)
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/response")
}
