package metrics

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/openengine/edge/internal/hist"
)

// textSink writes the Prometheus text format (version 0.0.4) with
// VictoriaMetrics/metrics' writer API: each sample is one Write* call. The
// # HELP and # TYPE lines are written here, once per family: the library
// writes them only behind its process-wide ExposeMetadata switch, and then
// before every sample, which a labelled family must not repeat.
type textSink struct {
	w      io.Writer
	name   string   // current family
	labels []string // its label names
	k      kind
	line   []byte // scratch: a sample's name and labels
}

func (t *textSink) family(name, help string, k kind, labels ...string) {
	t.name, t.labels, t.k = name, labels, k
	typ := [...]string{counter: "counter", gauge: "gauge", histogram: "histogram"}[k]
	io.WriteString(t.w, "# HELP "+name+" "+help+"\n# TYPE "+name+" "+typ+"\n")
}

// series returns the family's sample name suffix with its labels and an
// extra one (le) if set.
func (t *textSink) series(suffix string, values []string, extraName, extraValue string) string {
	b := append(t.line[:0], t.name...)
	b = append(b, suffix...)
	if len(values) > 0 || extraName != "" {
		b = append(b, '{')
		for i, v := range values {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, t.labels[i], v)
		}
		if extraName != "" {
			if len(values) > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, extraName, extraValue)
		}
		b = append(b, '}')
	}
	t.line = b
	return string(b)
}

func (t *textSink) value(v float64, values ...string) {
	name := t.series("", values, "", "")
	switch {
	case t.k == gauge:
		vm.WriteGaugeFloat64(t.w, name, v)
	case v == float64(uint64(v)):
		vm.WriteCounterUint64(t.w, name, uint64(v))
	default:
		vm.WriteCounterFloat64(t.w, name, v)
	}
}

func (t *textSink) hist(h *hist.Hist, values ...string) {
	var cum uint64
	for i, n := range h.Counts {
		cum += n
		le := "+Inf"
		if i < len(hist.Bounds) {
			le = strconv.FormatFloat(hist.Bounds[i], 'g', -1, 64)
		}
		vm.WriteCounterUint64(t.w, t.series("_bucket", values, "le", le), cum)
	}
	vm.WriteCounterFloat64(t.w, t.series("_sum", values, "", ""), float64(h.SumNanos)/1e9)
	vm.WriteCounterUint64(t.w, t.series("_count", values, "", ""), cum)
}

// appendLabel appends name="value" with the text format's escaping.
func appendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, '=', '"')
	b = append(b, labelEscaper.Replace(value)...)
	return append(b, '"')
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// serveMetrics writes edge's metrics, then the Go runtime's and the
// process's (VictoriaMetrics/metrics' WriteProcessMetrics).
func (m *Metrics) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	var buf bytes.Buffer
	s := m.snapshot()
	s.emit(&textSink{w: &buf}, m.methods)
	vm.WriteProcessMetrics(&buf)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}
