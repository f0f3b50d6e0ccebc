package metrics

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/internal/hist"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
)

// This file measures the scrape cost of the two libraries the issue
// names, on the same snapshot: VictoriaMetrics/metrics' writer API (what
// /metrics uses, textSink) and prometheus/client_golang with a custom
// Collector that turns the snapshot into const metrics at scrape time
// (promSink), gathered by a Registry and encoded as text by expfmt, as
// promhttp does. The hot path is edge's own plain counters with either.

// promSink is the client_golang side of the comparison.
type promSink struct {
	ch    chan<- prometheus.Metric
	descs map[string]*prometheus.Desc
	d     *prometheus.Desc
	vt    prometheus.ValueType
}

func (p *promSink) family(name, help string, k kind, labels ...string) {
	d := p.descs[name]
	if d == nil {
		d = prometheus.NewDesc(name, help, labels, nil)
		p.descs[name] = d
	}
	p.d, p.vt = d, prometheus.GaugeValue
	if k == counter {
		p.vt = prometheus.CounterValue
	}
}

func (p *promSink) value(v float64, values ...string) {
	p.ch <- prometheus.MustNewConstMetric(p.d, p.vt, v, values...)
}

func (p *promSink) hist(h *hist.Hist, values ...string) {
	buckets := make(map[float64]uint64, len(hist.Bounds))
	var cum uint64
	for i, b := range hist.Bounds {
		cum += h.Counts[i]
		buckets[b] = cum
	}
	cum += h.Counts[len(hist.Bounds)]
	p.ch <- prometheus.MustNewConstHistogram(p.d, cum, float64(h.SumNanos)/1e9, buckets, values...)
}

// promCollector is an unchecked Collector (it describes nothing) emitting
// a snapshot.
type promCollector struct {
	snap    snapshot
	methods []string
	descs   map[string]*prometheus.Desc // the Registry collects one scrape at a time here
}

func (c *promCollector) Describe(chan<- *prometheus.Desc) {}

func (c *promCollector) Collect(ch chan<- prometheus.Metric) {
	c.snap.emit(&promSink{ch: ch, descs: c.descs}, c.methods)
}

// benchSnapshot is a busy gateway's snapshot: the built-in registry (32
// methods) with 12 of them called, every outcome of them non-zero, and
// three upstreams.
func benchSnapshot(b *testing.B) (snapshot, []string) {
	pool := backend.NewPool(1, time.Second)
	b.Cleanup(pool.Close)
	srv, err := rpc.NewServer(rpc.Config{Handler: backend.NewMemory(), Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	var s snapshot
	s.loop.RPC = *srv.NewCounters()
	for i := range 12 {
		m := &s.loop.RPC.Methods[i*2]
		for o := range m.Outcomes {
			m.Outcomes[o] = uint64(1000*i + o)
		}
		for j := range m.Duration.Counts {
			m.Duration.Counts[j] = uint64(i + j)
		}
		m.Duration.SumNanos = int64(i) * 1e9
	}
	for i := range s.loop.Rejected {
		s.loop.Rejected[i] = uint64(i)
	}
	for i := range 3 {
		u := upstreamStats{name: fmt.Sprintf("svc%d", i)}
		u.st.Up, u.st.Total = 2, 2
		for o := range u.st.Outcomes {
			u.st.Outcomes[o] = uint64(o * 10)
		}
		u.st.Duration.Counts[3] = 100
		s.upstreams = append(s.upstreams, u)
	}
	return s, srv.MethodNames()
}

// BenchmarkScrape measures one scrape of edge's own metrics ("edge") and
// of edge's plus the Go runtime and process metrics each library offers
// ("all"), encoded as the Prometheus text format into a buffer.
func BenchmarkScrape(b *testing.B) {
	s, methods := benchSnapshot(b)
	for _, all := range []bool{false, true} {
		suffix := "/edge"
		if all {
			suffix = "/all"
		}
		b.Run("victoria"+suffix, func(b *testing.B) {
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				s.emit(&textSink{w: &buf}, methods)
				if all {
					vm.WriteProcessMetrics(&buf)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/scrape")
		})
		b.Run("prometheus"+suffix, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(&promCollector{snap: s, methods: methods, descs: map[string]*prometheus.Desc{}})
			if all {
				reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			}
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				mfs, err := reg.Gather()
				if err != nil {
					b.Fatal(err)
				}
				enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
				for _, mf := range mfs {
					if err := enc.Encode(mf); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/scrape")
		})
	}
}

var _ = upstream.NumOutcomes
