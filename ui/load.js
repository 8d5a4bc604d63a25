// The Load tab: requests and errors per second, connections, backlog, latency and the run's
// summary, live.
// May import: the helpers (dom, format, widgets, api, state), charts and histogram.

import { api, apiText } from './api.js';
import { drawChart, sparkline } from './charts.js';
import { $, debounce, h } from './dom.js';
import { fmtInt, fmtMs, fmtNum, fmtSeconds, fmtTime } from './format.js';
import { fmtBound, histogram, histogramDelta, quantileBound } from './histogram.js';
import { state } from './state.js';
import { outcomeBadge, statusPill } from './widgets.js';

// Requests are counted from the event stream (a record's first event) into per-second buckets
// by when the emulator received them; the last WINDOW seconds are kept. The gauges and the
// run's summary come from GET /api/v1/stats, request latency from the /metrics histogram,
// polled once a second while the tab is shown. Everything is drawn once a second, never per event.
const WINDOW = 120; // seconds of history in the charts
const IDLE_GAP_MS = 5000; // a request after this long without any starts a new run
const LT = {
  buckets: new Map(), // second (browser clock) -> {total, errors, reasons: Map reason -> count, or null}
  seen: new Set(), seenFloor: 0, maxSeq: 0, // record sequences already counted (sequences at or below the floor count as seen)
  lastReceivedMs: 0, // the newest request seen, emulator clock
  runSinceMs: null, runBy: 'page', // null: everything the journal keeps
  offsetMs: 0, // emulator clock minus browser clock, from the last stats answer
  stats: null, statsAt: 0,
  samples: [], // {t, provider, devices, pending}: gauges, one per poll
  latency: [], // {t, count, p50, p90, p99}: request duration over each poll's interval (bucket bounds, seconds)
  delivery: null, // {count, p50, p99}: the delivery-latency histogram over the last poll's interval
  prevDuration: null, prevDelivery: null, // cumulative buckets at the previous poll
  polling: false, peakProvider: 0, peakBacklog: 0,
  nextStatsAt: 0, // the stats walk the run's records: a slow answer spaces the polls out
};
const reasonKey = (r) => r.reason || (r.status === 0 ? 'stream reset (no status)' : `HTTP ${r.status}`);

/** Counts a record the first time the event stream brings it (later events are changes to it). */
export function countRequest(r) {
  const seq = r && r.sequence;
  if (typeof seq !== 'number' || seq <= LT.seenFloor || LT.seen.has(seq)) return;
  LT.seen.add(seq);
  if (seq > LT.maxSeq) LT.maxSeq = seq;
  const received = Number(r.receivedAtMs) || Date.now() + LT.offsetMs;
  // After a pause, a new run; unless one was just started (the button, a reset) and this is its first request.
  const fresh = LT.runSinceMs != null && LT.lastReceivedMs < LT.runSinceMs;
  if (received > LT.lastReceivedMs + IDLE_GAP_MS && !fresh) newRun(received, 'gap');
  if (received > LT.lastReceivedMs) LT.lastReceivedMs = received;
  const second = Math.floor((received - LT.offsetMs) / 1000);
  if (second <= Math.floor(Date.now() / 1000) - WINDOW) return;
  let b = LT.buckets.get(second);
  if (!b) LT.buckets.set(second, b = { total: 0, errors: 0, reasons: null });
  b.total++;
  if (r.status !== 200) {
    b.errors++;
    const key = reasonKey(r);
    if (!b.reasons) b.reasons = new Map();
    b.reasons.set(key, (b.reasons.get(key) || 0) + 1);
  }
}

/** Records loaded as history are not new requests, and tell when the last one came. */
export function noteHistory(records) {
  for (const r of records) {
    if (typeof r.sequence === 'number') LT.seen.add(r.sequence);
    if (r.receivedAtMs > LT.lastReceivedMs) LT.lastReceivedMs = r.receivedAtMs;
  }
}

/** A run's summary counts from `sinceMs` (emulator clock); `by` says what started it. */
function newRun(sinceMs, by) {
  LT.runSinceMs = sinceMs;
  LT.runBy = by;
  LT.stats = null;
  LT.nextStatsAt = 0;
  if (state.tab === 'load') { renderRun(); pollLoad(); }
}

/** After a reset of the emulator: nothing counted, peaks forgotten, a new run. */
export function loadReset() {
  LT.seen.clear();
  LT.seenFloor = LT.maxSeq = LT.lastReceivedMs = 0;
  LT.peakProvider = LT.peakBacklog = 0;
  LT.prevDuration = LT.prevDelivery = null;
  newRun(Date.now() + LT.offsetMs, 'reset');
}
/** GET /api/v1/stats: the gauges, the run's summary and the emulator's clock. */
async function pollStats() {
  const since = LT.runSinceMs == null ? 0 : Math.floor(LT.runSinceMs);
  const asked = Date.now();
  const stats = await api('GET', `/api/v1/stats?since=${since}`);
  const answered = Date.now();
  LT.nextStatsAt = asked + Math.max(1000, 5 * (answered - asked)) - 100;
  const serverNow = Date.parse(stats.now);
  if (!isNaN(serverNow)) LT.offsetMs = serverNow - (asked + answered) / 2;
  if (stats.lastAt && Date.parse(stats.lastAt) > LT.lastReceivedMs) LT.lastReceivedMs = Date.parse(stats.lastAt);
  LT.samples.push({ t: answered, provider: stats.providerConnections, devices: stats.deviceConnections, pending: stats.pendingDeliveries });
  while (LT.samples.length && LT.samples[0].t < answered - WINDOW * 1000) LT.samples.shift();
  LT.peakProvider = Math.max(LT.peakProvider, stats.providerConnections || 0);
  LT.peakBacklog = Math.max(LT.peakBacklog, stats.pendingDeliveries || 0);
  if (since === (LT.runSinceMs == null ? 0 : Math.floor(LT.runSinceMs))) { LT.stats = stats; LT.statsAt = answered; }
}

/** /metrics: request and delivery latency over the interval since the last poll. */
async function pollMetrics() {
  const text = await apiText('/metrics');
  const t = Date.now();
  const duration = histogram(text, 'apns_emulator_request_duration_seconds');
  const delivery = histogram(text, 'apns_emulator_delivery_latency_seconds');
  if (LT.prevDuration) {
    const d = histogramDelta(duration, LT.prevDuration);
    const count = d.length ? d[d.length - 1].count : 0;
    LT.latency.push({ t, count, buckets: d, p50: quantileBound(d, 0.5), p90: quantileBound(d, 0.9), p99: quantileBound(d, 0.99) });
    while (LT.latency.length && LT.latency[0].t < t - WINDOW * 1000) LT.latency.shift();
  }
  if (LT.prevDelivery) {
    const d = histogramDelta(delivery, LT.prevDelivery);
    LT.delivery = { count: d.length ? d[d.length - 1].count : 0, buckets: d, p50: quantileBound(d, 0.5), p99: quantileBound(d, 0.99) };
  }
  LT.prevDuration = duration;
  LT.prevDelivery = delivery;
}

/** One poll of both, never two at once; stats less often when they answer slowly. */
async function pollLoad() {
  if (LT.polling) return;
  LT.polling = true;
  try {
    await Promise.all([Date.now() >= LT.nextStatsAt ? pollStats().catch(() => {}) : null, pollMetrics().catch(() => {})]);
  } finally {
    LT.polling = false;
  }
  if (state.tab === 'load') renderPolled();
}

/** A figure's text, and its value in data-value for tests and scripts. */
function setValue(id, text, value) {
  const el = $(id);
  el.textContent = text;
  el.dataset.value = value == null ? '' : String(value);
  return el;
}

/** Once a second: the counts of the last complete second, the requests chart, the errors by reason. */
function renderLoad() {
  const nowSecond = Math.floor(Date.now() / 1000);
  const seconds = [];
  for (let s = nowSecond - WINDOW; s < nowSecond; s++) seconds.push(s);
  const last = LT.buckets.get(nowSecond - 1) || { total: 0, errors: 0 };
  let peak = 0;
  const all = [], errors = [], reasons = new Map();
  seconds.forEach((s, i) => {
    const b = LT.buckets.get(s);
    const t = (s + 1) * 1000;
    all.push([t, b ? b.total : 0]);
    errors.push([t, b ? b.errors : 0]);
    if (!b) return;
    peak = Math.max(peak, b.total);
    if (b.reasons) for (const [k, n] of b.reasons) {
      let e = reasons.get(k);
      if (!e) reasons.set(k, e = { total: 0, series: new Array(WINDOW).fill(0) });
      e.total += n;
      e.series[i] = n;
    }
  });
  setValue('#load-rps', fmtInt(last.total), last.total);
  $('#load-rps-peak').textContent = peak ? `last second · peak ${fmtInt(peak)}/s` : 'last second';
  setValue('#load-eps', fmtInt(last.errors), last.errors).classList.toggle('bad', last.errors > 0);
  $('#load-eps-share').textContent = last.total ? `${Math.round((last.errors / last.total) * 100)}% of the last second` : 'non-200 answers';
  const chart = $('#chart-rps');
  drawChart(chart, { t0: (nowSecond - WINDOW) * 1000, t1: nowSecond * 1000, yMax: Math.max(5, peak),
    series: [{ cls: 'k-all', points: all, area: true }, { cls: 'k-err', points: errors, area: true }] });
  chart.dataset.latest = String(last.total);
  chart.dataset.peak = String(peak);
  chart.dataset.points = String(all.filter(([, v]) => v > 0).length);

  const rows = [...reasons].sort((a, b) => b[1].total - a[1].total);
  const max = Math.max(1, ...rows.map(([, e]) => Math.max(...e.series)));
  $('#load-reasons tbody').replaceChildren(...rows.slice(0, 10).map(([k, e]) => h('tr', { dataset: { reason: k, count: e.total } },
    h('td', { class: 'reason' }, k), h('td', { class: 'spark-cell' }, sparkline(e.series, max)),
    h('td', { class: 'num' }, fmtInt(e.total)), h('td', { class: 'num' }, fmtInt(e.series[WINDOW - 1])))));
  $('#load-reasons').hidden = rows.length === 0;
  $('#load-reasons-empty').hidden = rows.length > 0;
  const filtered = Object.entries(state.filters);
  const note = $('#load-filtered');
  note.hidden = filtered.length === 0;
  note.textContent = filtered.length ? `live counts only for ${filtered.map(([k, v]) => `${k}=${v}`).join(' ')} (the timeline's filters)` : '';
}

/** After each poll: gauges, latency, and the run's summary. */
function renderPolled() {
  const s = LT.samples[LT.samples.length - 1];
  if (s) {
    setValue('#load-provider', fmtInt(s.provider), s.provider).dataset.peak = String(LT.peakProvider);
    $('#load-provider-peak').textContent = `open now · peak ${fmtInt(LT.peakProvider)}`;
    setValue('#load-devices', fmtInt(s.devices), s.devices);
    setValue('#load-backlog', fmtInt(s.pending), s.pending).dataset.peak = String(LT.peakBacklog);
    $('#load-backlog-peak').textContent = `pending deliveries · peak ${fmtInt(LT.peakBacklog)}`;
  }
  const now = Date.now(), t0 = now - WINDOW * 1000;
  const conn = $('#chart-connections'), backlog = $('#chart-backlog');
  const recent = LT.samples.filter((x) => x.t >= t0);
  drawChart(conn, { t0, t1: now, maxGap: 6000, yMax: Math.max(4, ...recent.map((x) => x.provider)), series: [{ cls: 'k-conn', points: recent.map((x) => [x.t, x.provider]), dots: true }] });
  drawChart(backlog, { t0, t1: now, maxGap: 6000, yMax: Math.max(10, ...recent.map((x) => x.pending)), series: [{ cls: 'k-backlog', points: recent.map((x) => [x.t, x.pending]), dots: true }] });
  conn.dataset.max = String(Math.max(0, ...recent.map((x) => x.provider)));
  backlog.dataset.max = String(Math.max(0, ...recent.map((x) => x.pending)));

  const lat = LT.latency.filter((x) => x.t >= t0);
  const latest = [...lat].reverse().find((x) => x.count > 0);
  setValue('#load-p99', latest ? fmtBound(latest.p99, latest.buckets) : '—', latest ? latest.p99 : null);
  const figures = [];
  if (latest) {
    for (const q of ['p50', 'p90', 'p99']) figures.push(h('span', { class: `figure k-${q}`, dataset: { quantile: q, value: latest[q] } }, h('b', null, q), ' ', fmtBound(latest[q], latest.buckets)));
    figures.push(h('span', { class: 'muted small' }, `over ${fmtInt(latest.count)} requests${latest === lat[lat.length - 1] ? ' in the last second' : ' (the last busy second)'}`));
  } else figures.push(h('span', { class: 'muted' }, 'No requests in the last 2 minutes that this page saw (it counts from when it opened).'));
  const dl = LT.delivery;
  if (dl && dl.count) figures.push(h('span', { class: 'muted small', title: 'apns_emulator_delivery_latency_seconds: response → device ack, device sockets only' },
    `device ack p50 ${fmtBound(dl.p50, dl.buckets)}, p99 ${fmtBound(dl.p99, dl.buckets)}`));
  $('#load-latency').replaceChildren(...figures);
  const latencyChart = $('#chart-latency');
  const point = (q) => lat.map((x) => [x.t, x.count ? x[q] : null]);
  drawChart(latencyChart, { t0, t1: now, log: [0.0001, 5], ticks: [0.0001, 0.001, 0.01, 0.1, 1], yFmt: fmtSeconds, maxGap: 2500,
    series: ['p50', 'p90', 'p99'].map((q) => ({ cls: `k-${q}`, points: point(q), dots: true })) });
  latencyChart.dataset.samples = String(lat.filter((x) => x.count > 0).length);
  renderRun();
}

/** The run's summary card. */
function renderRun() {
  const st = LT.stats;
  const serverNow = st ? Date.parse(st.now) : NaN;
  const lastAt = st && st.lastAt ? Date.parse(st.lastAt) : NaN;
  const active = st && st.requests > 0 && serverNow - lastAt < IDLE_GAP_MS;
  $('#load-run-title').textContent = active ? 'Current run' : 'Last run';
  $('#load-run').dataset.state = !st ? 'loading' : active ? 'running' : 'idle';
  const by = { button: 'Start new run', gap: 'first request after a pause', reset: 'reset', page: '' }[LT.runBy];
  $('#load-run-since').textContent = LT.runSinceMs == null ? 'everything the journal keeps'
    : `since ${fmtTime(LT.runSinceMs)}${by ? ` (${by})` : ''}`;
  setValue('#run-requests', st ? fmtInt(st.requests) : '…', st ? st.requests : '');
  $('#run-duration').textContent = st && st.requests ? fmtMs(st.durationMs) : '—';
  $('#run-rps').textContent = st && st.requestsPerSecond != null ? fmtInt(st.requestsPerSecond) : '—';
  const none = () => h('span', { class: 'muted' }, 'none');
  const entries = (o) => Object.entries((st && o && st[o]) || {});
  const status = entries('byStatus').sort((a, b) => Number(a[0]) - Number(b[0]));
  $('#run-status').replaceChildren(...(status.length ? status.map(([k, n]) => h('span', { class: 'run-item', dataset: { status: k, count: n } }, statusPill(Number(k)), ' ', fmtInt(n))) : [none()]));
  const reasons = entries('byReason').sort((a, b) => b[1] - a[1]);
  $('#run-reasons').replaceChildren(...(reasons.length ? reasons.map(([k, n]) => h('span', { class: 'run-item', dataset: { reason: k, count: n } }, h('b', null, k), ' ', fmtInt(n))) : [none()]));
  const outcomes = entries('byOutcome').sort((a, b) => b[1] - a[1]);
  $('#run-outcomes').replaceChildren(...(outcomes.length ? outcomes.map(([k, n]) => h('span', { class: 'run-item', dataset: { outcome: k, count: n } }, outcomeBadge(k), ' ', fmtInt(n))) : [none()]));
  const dl = st && st.deliveryLatencyMs;
  $('#run-latency').replaceChildren(...(dl && dl.count
    ? [...['p50', 'p90', 'p99', 'max'].map((q) => h('span', { class: 'run-item', dataset: { quantile: q, value: dl[q] } }, h('b', null, q), ` ${fmtMs(dl[q])}`)),
      h('span', { class: 'muted' }, `of ${fmtInt(dl.count)} delivered`)]
    : [none()]));
  $('#run-incomplete').hidden = !(st && st.journalMayBeIncomplete);
}

/** When the tab is shown: draw now, then once a second. */
export function loadShown() {
  renderLoad();
  renderRun();
  pollLoad();
}

/** Each second: forget what left the window, the tab's badge, and while shown a redraw and a poll. */
function loadTick() {
  const second = Math.floor(Date.now() / 1000);
  for (const k of LT.buckets.keys()) if (k < second - WINDOW) LT.buckets.delete(k);
  if (LT.seen.size > 200000) {
    LT.seenFloor = LT.maxSeq - 100000;
    for (const seq of LT.seen) if (seq <= LT.seenFloor) LT.seen.delete(seq);
  }
  const last = LT.buckets.get(second - 1);
  const badge = $('#count-rps');
  badge.hidden = !last;
  badge.textContent = last ? `${fmtNum(last.total)}/s` : '';
  if (state.tab === 'load' && !document.hidden) { renderLoad(); pollLoad(); }
}

/** Starts the tick and the first stats poll; wires Start new run and redraws on a resize. */
export function startLoad() {
  $('#load-new-run').addEventListener('click', () => newRun(Date.now() + LT.offsetMs, 'button'));
  // Just after each second ends, so the last complete second is counted.
  const schedule = () => setTimeout(() => { loadTick(); schedule(); }, 1200 - (Date.now() % 1000));
  schedule();
  pollStats().catch(() => {}); // the emulator's clock, and when the last request came
  window.addEventListener('resize', debounce(() => { if (state.tab === 'load') { renderLoad(); renderPolled(); } }, 150));
}
