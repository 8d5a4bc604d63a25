// Drawing the Load tab's charts as SVG: time series with axes, and sparklines.
// May import: format.

import { fmtNum } from './format.js';

const SVGNS = 'http://www.w3.org/2000/svg';

function svgEl(tag, attrs, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, String(v));
  for (const kid of kids) if (kid != null) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}

/** The round number (1, 2, 2.5, 5 times a power of ten) at or above v. */
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** An SVG path through [t, v] points; null values and gaps longer than maxGap (ms) break it. */
function pathOf(points, x, y, maxGap) {
  let d = '', prevT = null;
  for (const [t, v] of points) {
    if (v == null || !isFinite(t)) { prevT = null; continue; }
    d += `${prevT == null || t - prevT > maxGap ? 'M' : 'L'}${x(t).toFixed(1)} ${y(v).toFixed(1)}`;
    prevT = t;
  }
  return d;
}

/**
 * Draws time series into an <svg> sized by CSS: x from t0 to t1 (browser ms), y linear from 0
 * to a round maximum, or logarithmic over `log` ([lo, hi], with `ticks`). A series is
 * {cls, points: [[t, v]], area, dots}.
 */
export function drawChart(svg, { t0, t1, series, yMax = 1, log = null, ticks = null, yFmt = fmtNum, maxGap = 2500 }) {
  const w = Math.max(160, Math.round(svg.getBoundingClientRect().width) || 300);
  const hgt = Math.max(40, Math.round(svg.getBoundingClientRect().height) || 120);
  const left = 46, right = 8, top = 6, bottom = 16;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (w - left - right);
  let y, tickValues;
  if (log) {
    const [lo, hi] = log.map(Math.log10);
    y = (v) => top + (1 - (Math.log10(Math.min(log[1], Math.max(log[0], v))) - lo) / (hi - lo)) * (hgt - top - bottom);
    tickValues = ticks;
  } else {
    const max = niceCeil(yMax);
    y = (v) => top + (1 - Math.min(v, max) / max) * (hgt - top - bottom);
    tickValues = hgt >= 90 ? [0, max / 2, max] : [0, max];
  }
  const kids = [];
  for (const v of tickValues) {
    kids.push(svgEl('line', { class: 'grid-line', x1: left, x2: w - right, y1: y(v).toFixed(1), y2: y(v).toFixed(1) }),
      svgEl('text', { class: 'axis', x: left - 5, y: (y(v) + 3.5).toFixed(1), 'text-anchor': 'end' }, yFmt(v)));
  }
  const span = (t1 - t0) / 1000;
  for (const [t, label, anchor] of [[t0, span >= 120 ? `−${span / 60} min` : `−${span} s`, 'start'], [(t0 + t1) / 2, span >= 120 ? `−${span / 120} min` : `−${span / 2} s`, 'middle'], [t1, 'now', 'end']]) {
    kids.push(svgEl('text', { class: 'axis', x: x(t).toFixed(1), y: hgt - 3, 'text-anchor': anchor }, label));
  }
  const base = y(log ? log[0] : 0).toFixed(1);
  for (const s of series) {
    const points = s.points.filter(([t]) => t >= t0 && t <= t1);
    const d = pathOf(points, x, y, maxGap);
    if (s.area && d) {
      const known = points.filter(([, v]) => v != null);
      kids.push(svgEl('path', { class: `area ${s.cls}`, d: `${d}L${x(known[known.length - 1][0]).toFixed(1)} ${base}L${x(known[0][0]).toFixed(1)} ${base}Z` }));
    }
    kids.push(svgEl('path', { class: `line ${s.cls}`, d }));
    const last = [...points].reverse().find(([, v]) => v != null);
    if (s.dots && last) kids.push(svgEl('circle', { class: `dot ${s.cls}`, cx: x(last[0]).toFixed(1), cy: y(last[1]).toFixed(1), r: 2.5 }));
  }
  svg.setAttribute('viewBox', `0 0 ${w} ${hgt}`);
  svg.replaceChildren(...kids);
}

/** A small line of one series, scaled to `max`, for a table cell. */
export function sparkline(values, max) {
  const w = 180, hgt = 20, n = values.length;
  let d = '';
  values.forEach((v, i) => { d += `${i ? 'L' : 'M'}${((i / Math.max(1, n - 1)) * w).toFixed(1)} ${(hgt - 1 - (v / max) * (hgt - 2)).toFixed(1)}`; });
  return svgEl('svg', { class: 'spark', viewBox: `0 0 ${w} ${hgt}`, preserveAspectRatio: 'none', 'aria-hidden': 'true' },
    svgEl('path', { class: 'area k-err', d: `${d}L${w} ${hgt}L0 ${hgt}Z` }), svgEl('path', { class: 'line k-err', d, 'vector-effect': 'non-scaling-stroke' }));
}
