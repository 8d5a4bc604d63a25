// Reading Prometheus histograms from the /metrics text: the buckets, what filled them since the
// last poll, a quantile's bucket bound. Pure functions of their arguments.
// May import: format.

import { fmtSeconds } from './format.js';

/** A Prometheus histogram's cumulative buckets [{le, count}], summed over label sets, by bound. */
export function histogram(text, name) {
  const byBound = new Map();
  const prefix = `${name}_bucket{`;
  for (const line of text.split('\n')) {
    if (!line.startsWith(prefix)) continue;
    const m = /le="([^"]+)"[^}]*\}\s+(\S+)/.exec(line);
    if (!m) continue;
    const le = m[1] === '+Inf' ? Infinity : Number(m[1]);
    byBound.set(le, (byBound.get(le) || 0) + Number(m[2]));
  }
  return [...byBound].map(([le, count]) => ({ le, count })).sort((a, b) => a.le - b.le);
}

/** The buckets filled since `prev` (all of them when the counters were reset meanwhile). */
export function histogramDelta(cur, prev) {
  if (!prev || prev.length !== cur.length || !cur.length || cur[cur.length - 1].count < prev[prev.length - 1].count) return cur;
  return cur.map((b, i) => ({ le: b.le, count: b.count - prev[i].count }));
}

/** The upper bound of the bucket that holds quantile q, or null without observations. */
export function quantileBound(buckets, q) {
  const total = buckets.length ? buckets[buckets.length - 1].count : 0;
  if (!total) return null;
  for (const b of buckets) if (b.count >= q * total) return b.le;
  return Infinity;
}

/** A bucket bound as the page writes a latency: "≤ 1 ms", "> 5 s". */
export function fmtBound(le, buckets) {
  if (le == null) return '—';
  if (le === Infinity) {
    const finite = (buckets || []).filter((b) => b.le !== Infinity);
    return finite.length ? `> ${fmtSeconds(finite[finite.length - 1].le)}` : '> max';
  }
  return `≤ ${fmtSeconds(le)}`;
}
