package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// panel is one grouped bar chart: vals[g][s] is series s in group g (NaN:
// no value).
type panel struct {
	title  string
	unit   string
	groups []string
	series []string
	vals   [][]float64
}

var palette = map[string]string{
	"edge": "#d62728", baseEdge: "#ff9896", "raw": "#7f7f7f", "geth": "#1f77b4", "centrifuge": "#2ca02c",
	"nbio": "#9467bd", "gorilla": "#ff7f0e", "direct": "#17becf", "nginx": "#009639",
}

var spare = []string{"#17becf", "#bcbd22", "#8c564b", "#e377c2", "#1f77b4", "#2ca02c"}

func color(series string, i int) string {
	if c, ok := palette[series]; ok {
		return c
	}
	return spare[i%len(spare)]
}

// svgChart draws panels stacked vertically, with one legend. Hand-written
// SVG: a bar chart needs no plotting library.
func svgChart(title string, panels []panel) []byte {
	const (
		width  = 960
		panelH = 300
		left   = 80
		right  = 20
		top    = 60
		gap    = 70
	)
	var series []string
	for _, p := range panels {
		for _, s := range p.series {
			if !contains(series, s) {
				series = append(series, s)
			}
		}
	}
	height := top + len(panels)*(panelH+gap) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, esc(title))
	// Legend.
	x := left
	for i, s := range series {
		fmt.Fprintf(&b, `<rect x="%d" y="36" width="12" height="12" fill="%s"/><text x="%d" y="46">%s</text>`+"\n", x, color(s, i), x+16, esc(s))
		x += 24 + 8*len(s)
	}
	for pi, p := range panels {
		y0 := top + pi*(panelH+gap) + 30 // top of the plot area
		plotH := panelH - 40
		plotW := width - left - right
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", left, y0-10, esc(p.title))
		maxV := 0.0
		for _, row := range p.vals {
			for _, v := range row {
				if !math.IsNaN(v) && v > maxV {
					maxV = v
				}
			}
		}
		top := niceCeil(maxV)
		// Axis and grid.
		for t := 0; t <= 4; t++ {
			v := top * float64(t) / 4
			y := float64(y0+plotH) - float64(plotH)*float64(t)/4
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+plotW, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, compact(v))
		}
		fmt.Fprintf(&b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>`+"\n", y0+plotH/2, y0+plotH/2, esc(p.unit))
		if len(p.groups) == 0 {
			continue
		}
		gw := float64(plotW) / float64(len(p.groups))
		bw := gw * 0.8 / float64(max(len(p.series), 1))
		for gi, g := range p.groups {
			gx := float64(left) + gw*float64(gi) + gw*0.1
			for si, s := range p.series {
				v := math.NaN()
				if gi < len(p.vals) && si < len(p.vals[gi]) {
					v = p.vals[gi][si]
				}
				bx := gx + bw*float64(si)
				if math.IsNaN(v) {
					fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="9" fill="#999">n/a</text>`+"\n", bx+bw/2, y0+plotH-4)
					continue
				}
				h := 0.0
				if top > 0 {
					h = float64(plotH) * v / top
				}
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
					bx, float64(y0+plotH)-h, bw*0.92, h, color(s, indexOf(series, s)), esc(g), esc(s), compact(v))
				if bw >= 18 {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`+"\n", bx+bw*0.46, float64(y0+plotH)-h-3, compact(v))
				}
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", gx+gw*0.4, y0+plotH+16, esc(g))
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, y0+plotH, left+plotW, y0+plotH)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func esc(s string) string { return html.EscapeString(s) }

func contains(ss []string, s string) bool { return indexOf(ss, s) >= 0 }

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// niceCeil rounds v up to 1, 2, 4, 6 or 8 times a power of ten (so that
// quarter ticks stay round).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// compact formats a number in at most about four characters: 950, 12.3k, 4.5M.
func compact(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trimZero(fmt.Sprintf("%.1f", v/1e9)) + "G"
	case a >= 1e6:
		return trimZero(fmt.Sprintf("%.1f", v/1e6)) + "M"
	case a >= 1e4:
		return trimZero(fmt.Sprintf("%.0f", v/1e3)) + "k"
	case a >= 1e3:
		return trimZero(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return trimZero(fmt.Sprintf("%.1f", v))
	case a == 0:
		return "0"
	}
	return trimZero(fmt.Sprintf("%.2f", v))
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
