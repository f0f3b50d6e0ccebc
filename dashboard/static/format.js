// Number formatting for the dashboard: short, with units, the same width
// whatever the magnitude. Every function takes a number, or null/undefined
// for "no value yet", which formats as an em dash.

const NONE = "\u2014";

function known(n) {
  return typeof n === "number" && Number.isFinite(n);
}

// trim formats n with at most three significant digits: 0.42, 4.2, 42, 420.
function trim(n) {
  const a = Math.abs(n);
  if (a === 0) return "0";
  if (a >= 100) return String(Math.round(n));
  if (a >= 10) return stripZero(n.toFixed(1));
  if (a >= 1) return stripZero(n.toFixed(2));
  return stripZero(n.toPrecision(2));
}

function stripZero(s) {
  return s.includes(".") ? s.replace(/\.?0+$/, "") : s;
}

// count formats a count: 42, 1.2k, 340k, 1.5M, 2.1G. Counts under a
// thousand are whole numbers.
export function count(n) {
  if (!known(n)) return NONE;
  const a = Math.abs(n);
  if (a < 1e3) return String(Math.round(n));
  if (a < 999.5e3) return trim(n / 1e3) + "k";
  if (a < 999.5e6) return trim(n / 1e6) + "M";
  return trim(n / 1e9) + "G";
}

// rate formats a per-second rate: 0.5/s, 12/s, 3.4k/s.
export function rate(n) {
  if (!known(n)) return NONE;
  if (Math.abs(n) < 1e3) return trim(n) + "/s";
  return count(n) + "/s";
}

// latency formats a duration given in seconds: 250 µs, 4.2 ms, 120 ms, 1.5 s.
export function latency(seconds) {
  if (!known(seconds)) return NONE;
  const a = Math.abs(seconds);
  if (a === 0) return "0 ms";
  if (a < 1e-3) return trim(seconds * 1e6) + " \u00b5s";
  if (a < 1) return trim(seconds * 1e3) + " ms";
  return trim(seconds) + " s";
}

// clock formats a unix time in milliseconds as the local hh:mm:ss.
export function clock(ms) {
  if (!known(ms)) return NONE;
  const d = new Date(ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((v) => String(v).padStart(2, "0")).join(":");
}

// span formats a duration in seconds for an axis: 30s, 2m, 5m, 1m30s.
export function span(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60);
  return s % 60 === 0 ? m + "m" : m + "m" + (s % 60) + "s";
}
