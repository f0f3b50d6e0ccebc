// The dashboard: on load, draws the last five minutes the server kept
// (api/history, one sample a second), then polls api/stats every second,
// keeps the last five minutes of samples, and renders the current values and
// a chart for each card. The header and the title name the instance (its
// listen address, admin address and version), so that the tabs of several
// edges are told apart.
//
// For tests and scripts the page keeps stable hooks: every current value is an
// element with data-metric="<name>", its formatted text as content and the raw
// number in data-value; each upstream is a row with data-upstream="<name>" and
// data-health="up|degraded|down"; the instance's fields are elements with
// data-instance="name|listen|admin|version"; <body> carries data-state
// ("loading|live|disconnected"), data-updates, the count of renders, and
// data-samples, the samples the page holds.

import * as fmt from "./format.js";
import { plot } from "./plot.js";

const POLL_MS = 1000;
const TIMEOUT_MS = 3000;
const WINDOW_MS = 5 * 60 * 1000; // history kept and the widest chart
const MIN_SPAN_MS = 60 * 1000; // the narrowest chart, while history is short
const GAP_MS = 2.5 * POLL_MS; // samples further apart are not joined by a line

const OUTCOMES = ["error", "cancelled", "busy", "rate_limited", "timeout", "unavailable"];
const CLOSE_NAMES = {
  1000: "normal",
  1001: "going away",
  1002: "protocol error",
  1003: "unsupported data",
  1006: "abnormal",
  1007: "invalid payload",
  1008: "slow or rate-limited",
  1009: "message too big",
  1011: "internal error",
  1013: "try again later",
};
const COLORS = 8; // series colour classes s0..s7 in style.css

const history = []; // derived samples, oldest first, at most WINDOW_MS apart
let previous = null; // the last stats document, for rates
let clockOffset = 0; // server time minus this browser's clock, in ms
let updates = 0;
let disconnectedAt = null;
let instanceName = ""; // the first listener's host:port, once the server named it
let titleRest = ""; // the title's current values, after the instance
const colorOf = new Map(); // "close:1000", "upstream:db" -> colour index, stable for the page's life

function colour(key) {
  if (!colorOf.has(key)) {
    const kind = key.split(":")[0];
    const used = [...colorOf.keys()].filter((k) => k.startsWith(kind + ":")).length;
    colorOf.set(key, used % COLORS);
  }
  return colorOf.get(key);
}

// num reads a number out of the stats document, null when absent.
function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

// derive turns one stats document into a sample, with per-second rates from
// the previous one. A counter that went down (the server restarted) gives no
// rate for that step.
function derive(s, p) {
  const dt = p ? (s.time - p.time) / 1000 : 0;
  const per = (cur, old) => {
    if (!p || !(dt > 0) || num(cur) === null || num(old) === null || cur < old) return null;
    return (cur - old) / dt;
  };
  const outcomes = s.outcomes || {};
  const notOk = (o) => (o ? OUTCOMES.reduce((sum, k) => sum + (num(o[k]) || 0), 0) : null);
  const ws = num(s.connections?.ws);
  const ndjson = num(s.connections?.ndjson);
  const closes = {};
  for (const [code, total] of Object.entries(s.closes || {})) {
    closes[code] = { total: num(total), rate: per(total, p?.closes?.[code] ?? 0) };
  }
  const upstreams = {};
  for (const u of s.upstreams || []) {
    upstreams[u.name] = { up: num(u.up), total: num(u.total) };
  }
  return {
    t: s.time,
    ws,
    ndjson,
    connections: ws === null && ndjson === null ? null : (ws || 0) + (ndjson || 0),
    requests: num(s.requests),
    rate: per(s.requests, p?.requests),
    failedRate: per(notOk(outcomes), notOk(p?.outcomes)),
    outcomeRates: Object.fromEntries(OUTCOMES.map((k) => [k, per(outcomes[k], p?.outcomes?.[k])])),
    p50: num(s.latency?.p50),
    p99: num(s.latency?.p99),
    inFlight: num(s.inFlight),
    subscriptions: num(s.subscriptions),
    slow: num(s.slowConsumers),
    slowRate: per(s.slowConsumers, p?.slowConsumers),
    closes,
    upstreams,
  };
}

function setMetric(name, value, format) {
  for (const e of document.querySelectorAll(`[data-metric="${name}"]`)) {
    e.textContent = format(value);
    if (value === null) delete e.dataset.value;
    else e.dataset.value = String(value);
  }
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function renderOutcomes(sample) {
  const list = document.getElementById("outcomes");
  list.replaceChildren(
    ...OUTCOMES.map((k) => {
      const li = document.createElement("li");
      const v = sample.outcomeRates[k];
      li.className = v ? "hot" : "";
      const b = document.createElement("b");
      b.dataset.metric = "outcome-" + k.replaceAll("_", "-");
      b.textContent = fmt.rate(v);
      if (v !== null) b.dataset.value = String(v);
      li.append(k.replaceAll("_", " ") + " ", b);
      return li;
    }),
  );
}

function renderCloses(sample) {
  const codes = Object.keys(sample.closes).sort();
  const body = document.getElementById("close-rows");
  if (codes.length === 0) return;
  body.replaceChildren(
    ...codes.map((code) => {
      const c = sample.closes[code];
      const tr = document.createElement("tr");
      const name = cell("", "code");
      const sw = document.createElement("i");
      sw.className = `swatch s${colour("close:" + code)}`;
      name.append(sw, code);
      const total = cell(fmt.count(c.total));
      total.dataset.metric = "closes-" + code;
      if (c.total !== null) total.dataset.value = String(c.total);
      tr.append(name, cell(CLOSE_NAMES[code] || "", "muted"), total, cell(fmt.rate(c.rate)));
      return tr;
    }),
  );
}

function renderUpstreams(sample) {
  const names = Object.keys(sample.upstreams);
  const body = document.getElementById("upstream-rows");
  if (names.length === 0) return;
  body.replaceChildren(
    ...names.map((n) => {
      const u = sample.upstreams[n];
      const health = u.up > 0 && u.up >= u.total ? "up" : u.up > 0 ? "degraded" : "down";
      const tr = document.createElement("tr");
      tr.dataset.upstream = n;
      tr.dataset.health = health;
      tr.dataset.up = String(u.up);
      tr.dataset.total = String(u.total);
      const dot = cell("", "dot-cell");
      const d = document.createElement("i");
      d.className = "dot " + health;
      dot.append(d);
      const name = cell("", "name");
      const sw = document.createElement("i");
      sw.className = `swatch s${colour("upstream:" + n)}`;
      name.append(sw, n);
      tr.append(dot, name, cell(`${fmt.count(u.up)}/${fmt.count(u.total)}`), cell(health, "health " + health));
      return tr;
    }),
  );
}

// series picks one value out of every sample in history.
function series(pick, color) {
  return { points: history.map((s) => [s.t, pick(s)]), color };
}

// keyed makes one series for each key any sample in history has, under pick.
function keyed(kind, keysOf, pick) {
  const keys = new Set();
  for (const s of history) for (const k of keysOf(s)) keys.add(k);
  return [...keys].sort().map((k) => series((s) => pick(s, k), colour(kind + ":" + k)));
}

function renderCharts() {
  const to = Date.now() + clockOffset;
  const oldest = history.length ? history[0].t : to;
  const span = Math.min(WINDOW_MS, Math.max(MIN_SPAN_MS, to - oldest));
  const from = to - span;
  const axis = ["\u2212" + fmt.span(span / 1000), "now"];
  const charts = {
    connections: { series: [series((s) => s.ws, 0), series((s) => s.ndjson, 1)], format: fmt.count, min: 1 },
    requests: { series: [series((s) => s.rate, 0), series((s) => s.failedRate, 3)], format: fmt.rate, min: 1 },
    latency: { series: [series((s) => s.p50, 0), series((s) => s.p99, 2)], format: fmt.latency, min: 0.001 },
    "in-flight": { series: [series((s) => s.inFlight, 0)], format: fmt.count, min: 1 },
    subscriptions: { series: [series((s) => s.subscriptions, 0)], format: fmt.count, min: 1 },
    "slow-consumers": { series: [series((s) => s.slowRate, 3)], format: fmt.rate, min: 1 },
    closes: {
      series: keyed("close", (s) => Object.keys(s.closes), (s, k) => s.closes[k]?.rate ?? null),
      format: fmt.rate,
      min: 1,
    },
    upstreams: {
      series: keyed("upstream", (s) => Object.keys(s.upstreams), (s, k) => s.upstreams[k]?.up ?? null),
      format: fmt.count,
      min: 1,
    },
  };
  for (const svg of document.querySelectorAll("svg[data-chart]")) {
    const c = charts[svg.dataset.chart];
    if (c) plot(svg, { ...c, from, to, gapMs: GAP_MS, axis });
  }
}

// METRICS are the fixed values the cards show: data-metric name, the field of
// a sample, and its format.
const METRICS = [
  ["connections", "connections", fmt.count],
  ["connections-ws", "ws", fmt.count],
  ["connections-ndjson", "ndjson", fmt.count],
  ["requests-rate", "rate", fmt.rate],
  ["requests-total", "requests", fmt.count],
  ["requests-failed-rate", "failedRate", fmt.rate],
  ["latency-p50", "p50", fmt.latency],
  ["latency-p99", "p99", fmt.latency],
  ["in-flight", "inFlight", fmt.count],
  ["subscriptions", "subscriptions", fmt.count],
  ["slow-consumers", "slow", fmt.count],
  ["slow-consumers-rate", "slowRate", fmt.rate],
];

function renderValues(s) {
  for (const [name, field, format] of METRICS) setMetric(name, s[field], format);
  renderOutcomes(s);
  renderCloses(s);
  renderUpstreams(s);
  setTitle(`${fmt.count(s.connections)} conn \u00b7 ${fmt.rate(s.rate)}`);
}

// setTitle sets the page's title: the instance first, so that a narrow tab
// still tells this edge from another, then what is given.
function setTitle(rest) {
  titleRest = rest;
  document.title = [instanceName, "edge", rest].filter(Boolean).join(" \u00b7 ");
}

// hostOf is the host:port of a listener's URL: what follows the scheme, up to
// the path.
function hostOf(url) {
  return String(url).replace(/^[a-z]+:\/\//i, "").replace(/\/.*$/, "");
}

// showInstance names the instance in the header and the title, from the
// instance object of api/stats or api/history.
function showInstance(inst) {
  if (!inst || typeof inst !== "object") return;
  const listen = Array.isArray(inst.listen) ? inst.listen.map(String) : [];
  const fields = {
    name: listen.length ? hostOf(listen[0]) : "gateway dashboard",
    listen: listen.join(" "),
    admin: String(inst.admin || ""),
    version: String(inst.version || ""),
  };
  for (const [k, v] of Object.entries(fields)) {
    for (const e of document.querySelectorAll(`[data-instance="${k}"]`)) if (e.textContent !== v) e.textContent = v;
  }
  document.getElementById("instance").hidden = !(fields.listen || fields.admin || fields.version);
  if (listen.length && instanceName !== fields.name) {
    instanceName = fields.name;
    setTitle(titleRest);
  }
}

function setState(state, text) {
  document.body.dataset.state = state;
  document.getElementById("status").textContent = text;
}

// accept adds a stats document (of api/stats, or a sample of api/history) to
// the history; a live one is rendered as the current values.
function accept(stats, live = true) {
  if (typeof stats?.time !== "number") throw new Error("stats without a time");
  showInstance(stats.instance);
  if (previous && stats.time < previous.time) {
    // The server's clock went back: start the rates afresh and drop the
    // samples that now lie in the future.
    previous = null;
    while (history.length && history[history.length - 1].t >= stats.time) history.pop();
  }
  if (previous && stats.time === previous.time) return; // the same document again
  const sample = derive(stats, previous);
  previous = stats;
  clockOffset = stats.time - Date.now();
  history.push(sample);
  while (history.length && history[0].t < sample.t - WINDOW_MS) history.shift();
  document.body.dataset.samples = String(history.length);
  if (!live) return;
  disconnectedAt = null;
  renderValues(sample);
  setState("live", `live \u00b7 ${fmt.clock(stats.time)}`);
}

// loadHistory takes the samples the server kept of the last five minutes
// (api/history, oldest first, each an api/stats document), so that the
// charts start with what happened before the page was opened. A server
// without it (404) or a failed fetch leaves the page to its own polls, the
// first of which says what is wrong.
async function loadHistory() {
  try {
    const r = await fetch("api/history", { cache: "no-store", signal: AbortSignal.timeout(TIMEOUT_MS) });
    if (!r.ok) return;
    const h = await r.json();
    showInstance(h?.instance);
    for (const s of Array.isArray(h?.samples) ? h.samples : []) accept(s, false);
  } catch (err) {
    // left to the polls
  }
}

function fail(err) {
  if (disconnectedAt === null) disconnectedAt = Date.now() + clockOffset;
  const why = err?.name === "TimeoutError" ? "no answer" : err?.message || String(err);
  setState("disconnected", `disconnected since ${fmt.clock(disconnectedAt)} (${why}) \u00b7 retrying`);
}

async function poll() {
  const started = Date.now();
  try {
    const r = await fetch("api/stats", { cache: "no-store", signal: AbortSignal.timeout(TIMEOUT_MS) });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    accept(await r.json());
  } catch (err) {
    fail(err);
  }
  renderCharts();
  document.body.dataset.updates = String(++updates);
  setTimeout(poll, Math.max(0, POLL_MS - (Date.now() - started)));
}

window.addEventListener("resize", renderCharts);
loadHistory().then(poll);
