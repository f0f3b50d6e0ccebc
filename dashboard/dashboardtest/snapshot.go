package dashboardtest

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Snapshot is what one render of the page showed, read through the page's
// stable hooks (see static/dashboard.js).
type Snapshot struct {
	State     string            `json:"state"`   // <body data-state>: loading, live or disconnected
	Status    string            `json:"status"`  // the status line's text
	Updates   int               `json:"updates"` // renders so far, one a poll
	Metrics   map[string]Metric `json:"metrics"` // by data-metric name
	Upstreams []Upstream        `json:"upstreams"`
	Title     string            `json:"title"`    // the document's title
	Instance  map[string]string `json:"instance"` // the header's instance fields by data-instance name: name, listen, admin, version
	Points    map[string]int    `json:"points"`   // by chart (data-chart): the points of its longest line, counted in its path
	Samples   int               `json:"samples"`  // <body data-samples>: the samples the page holds
}

// Metric is one shown value: the formatted text and the number behind it,
// nil while the page has none (before the second poll, for a rate).
type Metric struct {
	Text  string   `json:"text"`
	Value *float64 `json:"value"`
}

// Upstream is one row of the upstream health card.
type Upstream struct {
	Name   string `json:"name"`
	Health string `json:"health"` // up, degraded or down
	Up     int    `json:"up"`
	Total  int    `json:"total"`
}

// Value returns the number behind the metric named name, and whether the
// page shows one.
func (s Snapshot) Value(name string) (float64, bool) {
	m, ok := s.Metrics[name]
	if !ok || m.Value == nil {
		return 0, false
	}
	return *m.Value, true
}

// Text returns the text the page shows for the metric named name.
func (s Snapshot) Text(name string) string {
	return s.Metrics[name].Text
}

// String lists the render's state and every metric's text, for failure
// messages and logs.
func (s Snapshot) String() string {
	names := make([]string, 0, len(s.Metrics))
	for n := range s.Metrics {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "render %d, %s (%q), title %q, %d samples", s.Updates, s.State, s.Status, s.Title, s.Samples)
	for _, n := range slices.Sorted(maps.Keys(s.Instance)) {
		fmt.Fprintf(&b, " instance %s=%q", n, s.Instance[n])
	}
	for _, n := range slices.Sorted(maps.Keys(s.Points)) {
		fmt.Fprintf(&b, " chart %s=%d points", n, s.Points[n])
	}
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%q", n, s.Metrics[n].Text)
	}
	for _, u := range s.Upstreams {
		fmt.Fprintf(&b, " upstream %s %d/%d %s", u.Name, u.Up, u.Total, u.Health)
	}
	return b.String()
}

// snapshotJS reads a Snapshot out of the page once it has rendered more than
// %d times, and is null before, so that a poll on it waits for a new render.
const snapshotJS = `(() => {
  const body = document.body;
  const updates = Number(body?.dataset.updates || 0);
  if (updates <= %d) return null;
  const metrics = {};
  for (const e of document.querySelectorAll("[data-metric]")) {
    metrics[e.dataset.metric] = { text: e.textContent, value: e.dataset.value === undefined ? null : Number(e.dataset.value) };
  }
  const upstreams = [...document.querySelectorAll("[data-upstream]")].map((r) => ({
    name: r.dataset.upstream, health: r.dataset.health, up: Number(r.dataset.up), total: Number(r.dataset.total),
  }));
  const instance = {};
  for (const e of document.querySelectorAll("[data-instance]")) instance[e.dataset.instance] = e.textContent;
  const points = {};
  for (const e of document.querySelectorAll("svg[data-chart]")) {
    const counts = [...e.querySelectorAll("path.series:not(.area)")].map((p) => (p.getAttribute("d").match(/[ML]/g) || []).length);
    points[e.dataset.chart] = Math.max(0, ...counts);
  }
  return { state: body.dataset.state, status: document.getElementById("status")?.textContent ?? "", updates, metrics, upstreams,
    title: document.title, instance, points, samples: Number(body.dataset.samples || 0) };
})()`
