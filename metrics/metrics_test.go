package metrics

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/internal/hist"
	"github.com/openengine/edge/internal/testgw"
)

// TestMain fails the run if a history sampler outlives the tests.
func TestMain(m *testing.M) { testgw.Main(m) }

// TestLatencyWindow: /api/stats' quantiles cover the requests since the
// newest earlier snapshot request at least latencyWindow old, else since
// the oldest one kept, else since start.
func TestLatencyWindow(t *testing.T) {
	m := &Metrics{}
	t0 := time.Unix(1000, 0)
	cum := func(n uint64) hist.Hist { var h hist.Hist; h.Counts[0] = n; return h }
	steps := []struct {
		name string
		at   time.Duration
		cum  uint64
		want uint64
	}{
		{"first: since start", 0, 10, 10},
		{"1 s later: since the first", time.Second, 15, 5},
		{"4 s: since the first still", 4 * time.Second, 30, 20},
		{"6 s: since the one at 1 s, the newest 5 s old", 6 * time.Second, 40, 25},
		{"7 s: since the one at 1 s again", 7 * time.Second, 41, 26},
		{"20 s: since the one at 7 s", 20 * time.Second, 50, 9},
	}
	for _, s := range steps {
		w := m.window(t0.Add(s.at), cum(s.cum))
		if got := w.Count(); got != s.want {
			t.Errorf("%s: %d requests in the window, want %d", s.name, got, s.want)
		}
	}
}

func TestLabelEscaped(t *testing.T) {
	var buf bytes.Buffer
	k := &textSink{w: &buf}
	k.family("edge_x_total", "Help.", counter, "upstream")
	k.value(3, "a\"b\\c\nd")
	want := "# HELP edge_x_total Help.\n# TYPE edge_x_total counter\n" + `edge_x_total{upstream="a\"b\\c\nd"} 3` + "\n"
	if got := buf.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if strings.Count(buf.String(), "# TYPE") != 1 {
		t.Errorf("TYPE written more than once")
	}
}
