// A small time-series chart drawn as SVG: one line per series over a time
// window, a y axis from zero to a round number above the highest point, and
// a break in a line wherever samples are missing (the page was disconnected).

const SVG = "http://www.w3.org/2000/svg"; // the SVG namespace name, never fetched
const MARGIN = { top: 8, right: 8, bottom: 16, left: 48 };

function el(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// niceCeil returns the smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5,
// 6 or 8 times a power of ten) that is at least v, for the axis top.
export function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) {
    if (v <= m * p * (1 + 1e-9)) return m * p;
  }
  return 10 * p;
}

// plot draws series into svg, replacing what was there.
//   series: [{ points: [[timeMs, value|null], ...], color: index }]
//   from, to: the window in unix milliseconds; gapMs: a longer step between
//   two samples breaks the line; format: formats an axis value;
//   axis: [left label, right label]; min: the least axis top.
export function plot(svg, { series, from, to, gapMs, format, axis, min = 0 }) {
  const box = svg.getBoundingClientRect();
  const w = Math.max(box.width, 120);
  const h = Math.max(box.height, 60);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const x0 = MARGIN.left, x1 = w - MARGIN.right;
  const y0 = h - MARGIN.bottom, y1 = MARGIN.top;

  let high = min;
  for (const s of series) {
    for (const [t, v] of s.points) if (t >= from && v !== null && v > high) high = v;
  }
  const top = niceCeil(high * 1.1);
  const x = (t) => x0 + ((t - from) / (to - from)) * (x1 - x0);
  const y = (v) => y0 - (v / top) * (y0 - y1);

  const parts = [];
  for (const f of [0, 0.5, 1]) {
    const gy = y(top * f);
    parts.push(el("line", { class: "grid", x1: x0, x2: x1, y1: gy, y2: gy }));
  }
  parts.push(el("text", { class: "tick", x: x0 - 6, y: y(top) + 4, "text-anchor": "end" }, format(top)));
  parts.push(el("text", { class: "tick", x: x0 - 6, y: y0 + 4, "text-anchor": "end" }, format(0)));
  parts.push(el("text", { class: "tick", x: x0, y: h - 2 }, axis[0]));
  parts.push(el("text", { class: "tick", x: x1, y: h - 2, "text-anchor": "end" }, axis[1]));

  series.forEach((s) => {
    const runs = segments(s.points, from, gapMs).map((run) => run.map(([t, v]) => [x(t), y(v)]));
    if (runs.length === 0) return;
    const cls = `series s${s.color}`;
    if (series.length === 1) {
      // Shade under a lone line: each run closed down to the axis.
      const area = runs.map((r) => `M${r[0][0]},${y0}` + line(r, "L") + `L${r[r.length - 1][0]},${y0}Z`);
      parts.push(el("path", { class: `${cls} area`, d: area.join("") }));
    }
    parts.push(el("path", { class: cls, d: runs.map((r) => line(r, "M")).join("") }));
  });
  svg.replaceChildren(...parts);
}

// segments splits points into runs of known values inside the window, a new
// run starting wherever a value is missing or two samples are over gapMs apart.
function segments(points, from, gapMs) {
  const runs = [];
  let run = null;
  let last = null;
  for (const [t, v] of points) {
    if (t < from || v === null) {
      run = null;
      continue;
    }
    if (run === null || t - last > gapMs) {
      run = [];
      runs.push(run);
    }
    run.push([t, v]);
    last = t;
  }
  return runs;
}

// line is the path data through pixel points, starting with the command
// first. A lone point gets a zero-length segment, which the round line cap
// draws as a dot.
function line(points, first) {
  const d = points.map(([px, py], i) => `${i === 0 ? first : "L"}${px.toFixed(1)},${py.toFixed(1)}`).join("");
  return points.length === 1 ? d + "h0" : d;
}
