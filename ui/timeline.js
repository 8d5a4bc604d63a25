// The Notifications tab's timeline: a row per record, the selection, the counts under it, and
// how records reach it: loaded from GET /api/v1/notifications, then live from the event stream
// in batches, so a load test cannot swamp the page.
// May import: the helpers (dom, format, records, widgets, api, clock, state) and the views it hands
// over to: detail (the selected record), filters, info, checks, load, refresh.

import { api } from './api.js';
import { scheduleChecks } from './checks.js';
import { emulatorNowMs } from './clock.js';
import { renderDetail } from './detail.js';
import { $, $$, h } from './dom.js';
import { refreshScope, serverQuery, setFilter } from './filters.js';
import { fmtTime, shortToken } from './format.js';
import { refreshInfo } from './info.js';
import { noteHistory } from './load.js';
import { crossText, crossTitle, progress, searchText, summaryOf } from './records.js';
import { act, scheduleSide } from './refresh.js';
import { state } from './state.js';
import { confirmDialog, crossBadge, envBadge, outcomeBadge, statusPill, toast } from './widgets.js';

const MAX_ROWS = 2000; // records kept in the page

/** The client-side filters: a status class (4xx) and the free text, every word of it. */
function matchesClient(r) {
  if (state.statusClass && String(r.status)[0] !== state.statusClass[0]) return false;
  if (state.q) {
    const hay = searchText(r);
    return state.q.toLowerCase().split(/\s+/).filter(Boolean).every((w) => hay.includes(w));
  }
  return true;
}

function buildRow(r) {
  const sum = summaryOf(r);
  const cross = r.crossAccount === true;
  return h('tr', { class: cross ? 'cross' : null, dataset: { seq: r.sequence, apnsId: r.apnsId } },
    h('td', { class: 'c-time', title: r.receivedAt }, fmtTime(r.receivedAtMs, emulatorNowMs())),
    h('td', { class: 'c-status' }, statusPill(r.status)),
    h('td', { class: 'c-reason', title: cross ? crossTitle(r) : r.reason || '' }, cross ? crossBadge(r) : null, cross && r.reason ? ' ' : null, r.reason || ''),
    h('td', { class: 'c-type' }, r.pushType || '—'),
    h('td', { class: 'c-topic', title: r.topic || '' }, r.topic || '—'),
    h('td', { class: 'c-token', title: r.token }, h('button', { type: 'button', class: 'tok', dataset: { token: r.token }, title: `Everything sent to ${r.token}` }, shortToken(r.token))),
    h('td', { class: 'c-env' }, envBadge(r.environment)),
    h('td', { class: 'c-outcome', title: r.explanation || '' }, outcomeBadge(r.outcome)),
    h('td', { class: 'c-summary', title: [cross ? crossTitle(r) : null, sum.title, sum.body].filter(Boolean).join('\n') },
      cross ? h('span', { class: 'xacct-text' }, `${crossText(r)} · `) : null,
      sum.title ? h('b', null, sum.title) : null, sum.title && sum.body ? ' ' : null, sum.body));
}

/** Writes the rows' times again (the emulator's clock moved days: a row's day shows or goes). */
export function redrawTimes() {
  const now = emulatorNowMs();
  for (const [sequence, tr] of state.rows) {
    const r = state.records.get(sequence), cell = tr.querySelector('td.c-time');
    if (r && cell) cell.textContent = fmtTime(r.receivedAtMs, now);
  }
}

/** Adds or replaces a record's row, in sequence order; `careful` keeps a newer version already shown. */
export function upsert(r, { live = false, careful = false } = {}) {
  const old = state.records.get(r.sequence);
  if (old && careful && progress(r) < progress(old)) return;
  // A record older than every row shown, while older ones are still to load, belongs to them:
  // placed now it would sit out of order above the next "Load 200 older" page.
  const oldest = $('#rows').lastElementChild;
  if (!old && olderCursor && oldest && r.sequence < Number(oldest.dataset.seq)) return;
  state.records.set(r.sequence, r);
  const tr = buildRow(r);
  tr.hidden = !matchesClient(r);
  const existing = state.rows.get(r.sequence);
  state.rows.set(r.sequence, tr);
  if (existing) {
    if (existing.classList.contains('selected')) tr.classList.add('selected');
    existing.replaceWith(tr);
  } else {
    const body = $('#rows');
    let before = body.firstElementChild;
    while (before && Number(before.dataset.seq) > r.sequence) before = before.nextElementSibling;
    body.insertBefore(tr, before);
    if (live) tr.classList.add('fresh');
    trim(); // counts the new row (which goes again at once if it is the oldest)
  }
  if (state.selected === r.sequence) renderDetail();
}

/** Drops the oldest rows past the limit (fewer under load); "Load 200 older" goes on from the
 * oldest row kept. */
function trim() {
  const limit = rowLimit();
  let trimmed = false;
  while (state.rows.size > limit) {
    const last = $('#rows').lastElementChild;
    const seq = Number(last.dataset.seq);
    last.remove();
    state.rows.delete(seq);
    state.records.delete(seq);
    trimmed = true;
  }
  const oldest = $('#rows').lastElementChild;
  if (trimmed && oldest) olderCursor = cursorBefore(Number(oldest.dataset.seq));
}

/** The list's cursor for the records before `seq`: what GET's `nextCursor` says after a page
 * ending at `seq` (base64url of "notifications:<seq>"). */
function cursorBefore(seq) {
  return btoa(`notifications:${seq}`).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** Empties the table (the filters changed, the records were reset). */
export function clearRecords() {
  olderCursor = null;
  state.records.clear();
  state.rows.clear();
  $('#rows').replaceChildren();
  select(null);
}

/** Hides the rows the client-side filters do not match. */
export function applyClientFilter() {
  for (const [seq, tr] of state.rows) tr.hidden = !matchesClient(state.records.get(seq));
  updateCounts();
}

function visibleRows() { return $$('#rows > tr:not([hidden])'); }

/** The count under the table and, when nothing is shown, why (and how to send a push). */
export function updateCounts() {
  const shown = visibleRows().length;
  showLoadOlder();
  $('#shown').textContent = `${shown} shown${shown !== state.records.size ? ` of ${state.records.size} loaded` : ''}`
    + (busy && state.tab === 'timeline' ? ` · under load: the newest ${BUSY_ROWS}, once a second` : '');
  const empty = $('#empty');
  empty.replaceChildren();
  empty.hidden = shown > 0;
  if (shown > 0) return;
  const filtered = Object.keys(state.filters).length || state.q || state.statusClass;
  if (filtered) {
    // A status class (4xx) and the search box look only at the rows loaded; the other filters
    // ask the server, which searches the whole journal.
    const pageOnly = (state.q || state.statusClass) && state.records.size > 0;
    empty.append(h('div', null, pageOnly
      ? `Nothing among the ${state.records.size} newest rows loaded matches: a status class (4xx) and the search look only at those. An exact status (400) or a reason filter searches the whole journal.`
      : 'Nothing matches these filters.'));
    return;
  }
  empty.append(h('div', null, 'Waiting for pushes. New notifications appear here as they arrive.'));
  const info = state.info;
  const app = state.devices.flatMap((d) => d.apps).find((a) => a.token);
  if (info && info.addresses && app) {
    const host = app.environment === 'production' ? info.addresses.production : info.addresses.sandbox;
    const key = state.keys.find((k) => k.source && k.source !== 'api');
    const keyArg = key ? `${key.teamId}:${key.keyId}:${key.source}` : 'TEAMID:KEYID:AuthKey.p8';
    if (host) empty.append(h('div', { class: 'small' }, 'Send one with the built-in provider:'),
      h('pre', null, `apns-emulator send --host ${host} --ca ${info.addresses.caFile || 'certs/ca.pem'} \\\n  --key ${keyArg} --topic ${app.bundleId} \\\n  --token ${app.token} '{"aps":{"alert":"Hello"}}'`));
  }
}

/** Selects a record (null: none) and shows it in the detail pane. */
export function select(seq, { scroll = false } = {}) {
  const prev = state.rows.get(state.selected);
  if (prev) prev.classList.remove('selected');
  state.selected = seq;
  const tr = state.rows.get(seq);
  if (tr) {
    tr.classList.add('selected');
    if (scroll) tr.scrollIntoView({ block: 'nearest' });
  }
  renderDetail(true);
  refreshSelected(seq);
}

/** The selected record read again: a filtered stream stops telling of a record once it no longer
 * matches (a stored one delivered, under outcome=stored), so the page's copy may be older than
 * the journal's. */
async function refreshSelected(seq) {
  const r = state.records.get(seq);
  if (!r || !r.apnsId) return;
  let fresh;
  try { fresh = await api('GET', `/api/v1/notifications/${encodeURIComponent(r.uniqueId || r.apnsId)}`); } catch { return; }
  if (fresh && fresh.sequence === seq && state.records.has(seq)) upsert(fresh, { careful: true });
}

/** Under a filter the server applies, the rows whose outcome may still change (waiting in the
 * store, held, pending) are read again: the filtered stream stops telling of a record once it
 * no longer matches, so such a row kept its old outcome. One that no longer matches goes. Up to
 * 20 (called on the stream's ping, every 15 s), each asked with the filter and its apns-id; more,
 * the filtered journal is read again. */
export async function recheckFilteredRows() {
  const query = serverQuery();
  if (!query) return;
  const all = [...state.records.values()]
    .filter((r) => r.apnsId && ['stored', 'pending', 'deferred', 'throttled'].includes(r.outcome));
  // Many rows that may have changed (devices brought online together): the filtered journal read
  // again at once, not row by row over minutes.
  if (all.length > 20) return loadRecords();
  const waiting = all.sort((a, b) => b.sequence - a.sequence);
  const generation = loadGeneration;
  for (const r of waiting) {
    let data;
    try { data = await api('GET', `/api/v1/notifications?${query}&apnsId=${encodeURIComponent(r.apnsId)}&limit=20`); } catch { return; }
    if (generation !== loadGeneration || !state.rows.has(r.sequence)) continue;
    const fresh = data.notifications.find((x) => x.sequence === r.sequence);
    if (fresh) { upsert(fresh, { careful: true }); continue; }
    state.rows.get(r.sequence).remove();
    state.rows.delete(r.sequence);
    state.records.delete(r.sequence);
    if (state.selected === r.sequence) select(null);
  }
  if (waiting.length) updateCounts();
}

/** Moves the selection `delta` rows down among the shown ones (up when negative). */
export function move(delta) {
  const rows = visibleRows();
  if (!rows.length) return;
  const i = rows.findIndex((tr) => Number(tr.dataset.seq) === state.selected);
  const next = i < 0 ? rows[0] : rows[Math.max(0, Math.min(rows.length - 1, i + delta))];
  select(Number(next.dataset.seq), { scroll: true });
}

// Events are applied in batches, so a load test pushing thousands per second cannot swamp the page:
// every 30 ms while the timeline is shown, every second while another tab is. While events pour in
// (more than BUSY a second), a shown timeline keeps only the newest BUSY_ROWS rows, without the
// fresh-row highlight, and a hidden one builds no rows: the newest MAX_ROWS records wait for the
// timeline to be shown or the stream to calm down. At most CHUNK rows are built in one go.
const queue = new Map();
let flushTimer = null, infoTimer = null, arrived = 0, busy = false, lastFlushAt = 0;
const pendingFlags = { added: false, side: false, cross: false };
const BUSY = 400; // records per second: more is a load
const CHUNK = 400; // rows built in one go; the rest right after, so the page can breathe
const BUSY_ROWS = 200; // rows kept while the timeline is shown under load: laying out more costs too much
const rowLimit = () => (busy && state.tab === 'timeline' ? BUSY_ROWS : MAX_ROWS);
/** Queues a live record; the flags say what else its arrival should refresh. */
function enqueue(r) {
  const old = state.records.get(r.sequence) || queue.get(r.sequence);
  if (!old) pendingFlags.added = true;
  if (r.fault || r.status === 410) pendingFlags.side = true;
  if (r.crossAccount && !(old || {}).crossAccount) pendingFlags.cross = true;
  queue.set(r.sequence, r);
  arrived++;
  if (!flushTimer) flushTimer = setTimeout(flush, state.tab !== 'timeline' || busy ? 1000 : 30);
}

/** Keeps the newest MAX_ROWS queued records: older ones would leave the table as soon as the newer ones enter it. */
function trimQueue() {
  if (queue.size <= MAX_ROWS * 1.5) return;
  const keep = [...queue.keys()].sort((a, b) => b - a)[MAX_ROWS - 1];
  for (const seq of queue.keys()) if (seq < keep) queue.delete(seq);
}

/** Applies the queued records, CHUNK at a time, and tells whether the page is under load. */
function flush() {
  clearTimeout(flushTimer);
  flushTimer = null;
  const { added, side, cross } = pendingFlags;
  pendingFlags.added = pendingFlags.side = pendingFlags.cross = false;
  if (added && !infoTimer) infoTimer = setTimeout(() => { infoTimer = null; refreshInfo(); }, 500);
  if (side) { scheduleSide(); if (state.filters.token) refreshScope(); }
  if (cross) scheduleChecks();
  const now = performance.now(), elapsed = now - lastFlushAt;
  if (elapsed >= 25) { // not for the rest of a batch that is applied in chunks
    busy = (arrived * 1000) / elapsed > BUSY;
    arrived = 0;
    lastFlushAt = now;
  }
  if (state.tab !== 'timeline' && busy) {
    trimQueue();
    flushTimer = setTimeout(flush, 1000);
    return;
  }
  let batch = [...queue.values()].sort((a, b) => a.sequence - b.sequence);
  queue.clear();
  if (batch.length > rowLimit()) batch = batch.slice(-rowLimit());
  if (batch.length > CHUNK) {
    for (const r of batch.slice(CHUNK)) queue.set(r.sequence, r);
    batch = batch.slice(0, CHUNK);
    flushTimer = setTimeout(flush, 0);
  }
  const live = batch.length <= 50;
  for (const r of batch) upsert(r, { live });
  updateCounts();
  if (busy && !flushTimer) flushTimer = setTimeout(flush, 1000); // to notice the end of the load
}

let loadGeneration = 0, loading = false, buffered = [];

// Where the journal's older records go on from the oldest row loaded (GET's nextCursor); null when
// the page holds the oldest, or while a live load keeps only the newest rows.
let olderCursor = null;

/** The "Load 200 older" button: there is more, and room for it among the rows the page keeps. */
function showLoadOlder() {
  const full = state.rows.size + 200 > MAX_ROWS;
  $('#load-older').hidden = !olderCursor || busy || full;
  $('#older-cap').hidden = !olderCursor || busy || !full;
}

/** The next 200 older matching records, after the rows shown (the search looks at them too). */
async function loadOlder() {
  const cursor = olderCursor;
  if (!cursor) return;
  const generation = loadGeneration;
  let data;
  try {
    const query = serverQuery();
    data = await api('GET', `/api/v1/notifications?limit=200&cursor=${encodeURIComponent(cursor)}${query ? `&${query}` : ''}`);
  } catch (e) {
    toast(`Could not load older notifications: ${e.message}`, true);
    return;
  }
  if (generation !== loadGeneration || cursor !== olderCursor) return;  // reloaded meanwhile
  const body = $('#rows');
  for (const r of data.notifications) {
    if (state.rows.has(r.sequence)) continue;
    const tr = buildRow(r);
    tr.hidden = !matchesClient(r);
    state.records.set(r.sequence, r);
    state.rows.set(r.sequence, tr);
    body.append(tr);
  }
  olderCursor = data.nextCursor || null;
  updateCounts();
}

/** (Re)loads the newest 200 matching records; events that arrive meanwhile are merged after. */
export async function loadRecords() {
  const generation = ++loadGeneration;
  loading = true;
  buffered = [];
  let data;
  try {
    const query = serverQuery();
    data = await api('GET', `/api/v1/notifications?limit=200${query ? `&${query}` : ''}`);
  } catch (e) {
    if (generation === loadGeneration) { loading = false; toast(`Could not load notifications: ${e.message}`, true); }
    return;
  }
  if (generation !== loadGeneration) return;
  const keep = state.selected;
  state.records.clear();
  state.rows.clear();
  const body = $('#rows');
  const fragment = document.createDocumentFragment();
  for (const r of data.notifications) {
    const tr = buildRow(r);
    tr.hidden = !matchesClient(r);
    state.records.set(r.sequence, r);
    state.rows.set(r.sequence, tr);
    fragment.append(tr);
  }
  body.replaceChildren(fragment);
  olderCursor = data.nextCursor || null;
  noteHistory(data.notifications);
  loading = false;
  for (const r of buffered) upsert(r, { live: true, careful: true });
  if (buffered.some((r) => r.crossAccount)) scheduleChecks();
  buffered = [];
  if (keep != null && state.rows.has(keep)) select(keep);
  else if (keep != null) select(null);
  updateCounts();
}

/** A record from the event stream: held while a load is under way, merged after it. */
export function receiveRecord(r) {
  if (loading) buffered.push(r);
  else enqueue(r);
}

/** Shows the records that waited in the queue while another tab was shown. */
export function showQueued() {
  if (queue.size) { arrived = 0; flush(); }
}

/** After a reset of the emulator: no records, none queued. */
export function forgetRecords() {
  queue.clear(); clearRecords(); $('#count-notifications').textContent = 0; updateCounts();
}

/** A click on a row selects it, on its token shows the token view; Delete records… asks first. */
export function wireTimeline() {
  $('#load-older').addEventListener('click', () => loadOlder());
  $('#rows').addEventListener('click', (e) => {
    const tok = e.target.closest('.tok');
    if (tok) { setFilter('token', tok.dataset.token); return; }
    const tr = e.target.closest('tr');
    if (tr) select(Number(tr.dataset.seq));
  });
  $('#delete-records').addEventListener('click', async () => {
    // The search text and a status class narrow only the rows loaded here, not the journal's
    // delete: deleting with them set would remove records the page does not show.
    if (state.q || state.statusClass) {
      toast(`Delete goes by the journal's filters only; the ${state.q ? 'search' : 'status class'} narrows just the rows shown. Clear it (or use an exact status) first.`, true);
      return;
    }
    const q = serverQuery();
    const scope = q ? `matching ${[...new URLSearchParams(q)].map(([k, v]) => `${k}=${v}`).join(', ')}` : '';
    if (!await confirmDialog(q ? `Delete every record in the journal ${scope}?` : 'Delete every notification record?', 'Delete')) return;
    const done = await act(api('DELETE', `/api/v1/notifications${q ? `?${q}` : ''}`));
    if (done) { toast(`${done.deleted} records deleted`); loadRecords(); }
  });
}
