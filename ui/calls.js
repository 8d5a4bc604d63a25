// The Backend calls tab: the apps' calls to their backends (register, bind, unbind, fetch, action),
// newest first, from GET /api/v1/backend-calls and the event stream; filtered by device and
// hook; a click on a call shows its request and answer.
// May import: the helpers (dom, format, widgets, api, clock, state) and navigation.

import { api, enc } from './api.js';
import { emulatorNowMs } from './clock.js';
import { $, h } from './dom.js';
import { fmtDateTime, fmtTime, since } from './format.js';
import { showTab } from './navigation.js';
import { state } from './state.js';
import { headerTable, jsonView, kv, statusPill } from './widgets.js';

const MAX_CALLS = 5000; // backend calls kept in the page
const MAX_CALL_ROWS = 1000; // and shown

const CALL_STATE_CLASS = { pending: 's-info', retrying: 's-warn', done: 's-ok', failed: 's-err', dropped: 's-grey' };
const CALL_RANK = { pending: 0, retrying: 1, done: 2, failed: 2, dropped: 2 };
/** How far a call has got; an event never replaces a call with an older version of it. */
const callProgress = (c) => (c.attempts || 0) * 10 + (CALL_RANK[c.state] ?? 0);
const callTime = (c) => (c.atMs != null ? c.atMs : c.at ? Date.parse(c.at) : NaN);
const callMatches = (c) => (!state.callsFilter.deviceId || c.deviceId === state.callsFilter.deviceId)
  && (!state.callsFilter.hook || c.hook === state.callsFilter.hook);

let callsGeneration = 0, callsLoading = false, callBuffer = [];
const callQueue = new Map();
let callFlushTimer = null;

/** (Re)loads the calls: every device's, or the filtered device's (GET /api/v1/devices/{id}/backend-calls). */
export async function loadCalls() {
  const generation = ++callsGeneration;
  const deviceId = state.callsFilter.deviceId;
  callsLoading = true;
  callBuffer = [];
  let data;
  try {
    // The list is oldest first: read it to its end (a few pages at most: the emulator keeps
    // --max-backend-calls, 10,000 by default) and keep the newest (`trimCalls`).
    const path = deviceId ? `/api/v1/devices/${enc(deviceId)}/backend-calls` : '/api/v1/backend-calls';
    data = { calls: [] };
    let cursor = null;
    for (let page = 0; page < 20; page++) {
      const next = await api('GET', `${path}?limit=10000${cursor ? `&cursor=${enc(cursor)}` : ''}`);
      data.calls.push(...(next.calls || []));
      if (data.calls.length > 2 * MAX_CALLS) data.calls = data.calls.slice(-MAX_CALLS);
      cursor = next.nextCursor;
      if (!cursor) break;
    }
  } catch (e) {
    if (generation !== callsGeneration) return;
    if (deviceId && e.status === 404) {
      data = { calls: [] }; // the device is gone
    } else {
      // Keep what is shown, with the events that came meanwhile.
      callsLoading = false;
      for (const c of callBuffer) mergeCall(c);
      callBuffer = [];
      renderCalls();
      return; // like the other refreshes: the event stream's indicator tells that the emulator is unreachable
    }
  }
  if (generation !== callsGeneration) return;
  // A poll that brings nothing new leaves the rows alone (and what the user selected in them).
  const json = `${deviceId}\n${JSON.stringify(data.calls)}`;
  if (json === state.callsJSON && !callBuffer.length) { callsLoading = false; return; }
  state.callsJSON = json;
  if (deviceId) {
    for (const [id, c] of state.calls) if (c.deviceId === deviceId) state.calls.delete(id);
  } else {
    state.calls.clear();
  }
  for (const c of data.calls || []) {
    if (c.deviceId == null && deviceId) c.deviceId = deviceId;
    state.calls.set(c.id, c);
  }
  callsLoading = false;
  for (const c of callBuffer) mergeCall(c);
  callBuffer = [];
  trimCalls();
  renderCalls();
}

/** A call from the event stream: held while a load is under way, else applied in a batch soon. */
export function enqueueCall(c) {
  state.callEventsSeen = true;
  if (callsLoading) { callBuffer.push(c); return; }
  callQueue.set(c.id, c);
  if (!callFlushTimer) callFlushTimer = setTimeout(flushCalls, 30);
}
function flushCalls() {
  callFlushTimer = null;
  const batch = [...callQueue.values()].sort((a, b) => a.id - b.id);
  callQueue.clear();
  const many = batch.length > 50;
  for (const c of batch) if (mergeCall(c) && !many) updateCallRow(c);
  trimCalls();
  if (many) renderCalls(); else updateCallCounts();
}
/** Takes a call (from an event or a load) unless an equally new version is already here. */
function mergeCall(c) {
  const old = state.calls.get(c.id);
  if (old && callProgress(c) < callProgress(old)) return false;
  state.calls.set(c.id, c);
  return true;
}
function trimCalls() {
  if (state.calls.size <= MAX_CALLS) return;
  const ids = [...state.calls.keys()].sort((a, b) => a - b);
  for (const id of ids.slice(0, state.calls.size - MAX_CALLS)) {
    state.calls.delete(id);
    state.expandedCalls.delete(id);
    const body = state.callBodies.get(id);
    if (body) { body.remove(); state.callBodies.delete(id); }
  }
}

function callResult(c) {
  const parts = [];
  if (c.status != null) parts.push(statusPill(c.status));
  if (c.state && !(c.state === 'done' && c.status != null)) {
    parts.push(parts.length ? ' ' : null, h('span', { class: `badge ${CALL_STATE_CLASS[c.state] || 's-grey'}`, dataset: { field: 'state' } }, c.state));
  }
  if (c.error) parts.push(' ', h('span', { class: 'call-error', title: c.error }, c.error));
  return parts.length ? parts : h('span', { class: 'muted' }, '—');
}

/** What stands where an answer's body would: a failed or dropped call will get none. */
function noAnswer(c) {
  if (c.status != null) return 'empty body';
  if (c.state === 'failed' || c.state === 'dropped') return c.error ? `no answer (${c.error})` : 'no answer';
  return 'no answer yet';
}

function parsedResponse(text) {
  if (typeof text !== 'string') return text;
  try { return JSON.parse(text); } catch { return text; }
}

function callDetail(c) {
  const headers = c.headers && typeof c.headers === 'object'
    ? (Array.isArray(c.headers) ? c.headers : Object.entries(c.headers).map(([name, value]) => ({ name, value: String(value) }))) : [];
  const finished = c.finishedAt ? `${fmtDateTime(c.finishedAt)}${since(c.at, c.finishedAt)}` : null;
  return h('div', { class: 'call-view' },
    kv([['Request', h('span', { class: 'mono', style: 'word-break:break-all' }, `${c.method || ''} ${c.url || ''}`.trim())],
      ['Queued', c.at ? fmtDateTime(c.at) : null], ['Finished', finished], ['State', c.state], ['Attempts', c.attempts],
      ['Account', c.userId], ['Token', c.token ? h('span', { class: 'mono', style: 'word-break:break-all' }, c.token) : null],
      c.error ? ['Error', h('span', { class: 'call-error' }, c.error)] : null]),
    h('div', { class: 'two' },
      h('div', null, h('div', { class: 'small muted' }, 'request headers'), headerTable(headers),
        h('div', { class: 'small muted', style: 'margin-top:8px' }, 'request body'),
        c.body == null ? h('div', { class: 'muted' }, 'no body') : h('div', { class: 'call-body' }, jsonView(c.body))),
      h('div', null, h('div', { class: 'small muted' }, c.status != null ? `answer: ${c.status}` : 'answer'),
        c.response == null || c.response === '' ? h('div', { class: 'muted' }, noAnswer(c))
          : h('div', { class: 'call-response' }, jsonView(parsedResponse(c.response))))));
}

/** One call: its row and, when expanded, its details, in a <tbody> of its own. */
function callBody(c) {
  const open = state.expandedCalls.has(c.id);
  const t = callTime(c);
  const request = `${c.method || ''} ${c.url || ''}`.trim();
  const body = h('tbody', { class: `call${open ? ' open' : ''}`, dataset: { id: c.id, hook: c.hook || '', state: c.state || '' } },
    h('tr', { class: 'call-row', title: 'Click (or Enter) for the request and the answer', tabindex: 0 },
      h('td', { class: 'k-time', title: c.at || '' }, isNaN(t) ? '—' : fmtTime(t, emulatorNowMs())),
      h('td', { class: 'mono k-device', title: c.deviceId || '' }, c.deviceId || '—'),
      h('td', { class: 'k-app', title: c.bundleId || '' }, c.bundleId || '—'),
      h('td', null, h('span', { class: 'hook', dataset: { field: 'hook' } }, c.hook || '—')),
      h('td', { class: 'k-request', title: request }, c.method ? h('span', { class: 'method', dataset: { field: 'method' } }, c.method) : null, c.method ? ' ' : null,
        h('span', { class: 'url', dataset: { field: 'url' } }, c.url || '')),
      h('td', { class: 'k-result' }, callResult(c)),
      h('td', { class: 'num' }, c.attempts != null ? String(c.attempts) : '—'),
      h('td', { class: 'num' }, c.durationMs != null ? `${c.durationMs} ms` : '—'),
      h('td', { class: 'k-user', title: c.userId || '' }, c.userId ?? '—')));
  if (open) body.append(h('tr', { class: 'call-detail' }, h('td', { colspan: 9 }, callDetail(c))));
  return body;
}

/** Builds the shown calls again (only while the tab is shown; else marks them out of date). */
export function renderCalls() {
  if (state.tab !== 'backend') { state.callsDirty = true; updateCallCounts(); return; }
  state.callsDirty = false;
  const list = [...state.calls.values()].filter(callMatches).sort((a, b) => b.id - a.id).slice(0, MAX_CALL_ROWS);
  for (const body of state.callBodies.values()) body.remove();
  state.callBodies.clear();
  const table = $('#calls');
  for (const c of list) {
    const body = callBody(c);
    state.callBodies.set(c.id, body);
    table.append(body);
  }
  updateCallCounts();
}

/** An event changed one call: replace its <tbody>, or put a new one in its place (newest first). */
function updateCallRow(c) {
  if (state.tab !== 'backend') { state.callsDirty = true; return; }
  const existing = state.callBodies.get(c.id);
  if (!callMatches(c)) {
    if (existing) { existing.remove(); state.callBodies.delete(c.id); }
    return;
  }
  const body = callBody(c);
  if (existing) existing.replaceWith(body);
  else {
    let before = $('#calls > tbody');
    while (before && Number(before.dataset.id) > c.id) before = before.nextElementSibling;
    $('#calls').insertBefore(body, before);
    body.classList.add('fresh');
  }
  state.callBodies.set(c.id, body);
  while (state.callBodies.size > MAX_CALL_ROWS) {
    const last = $('#calls > tbody:last-of-type');
    state.callBodies.delete(Number(last.dataset.id));
    last.remove();
  }
}

function toggleCall(id) {
  if (state.expandedCalls.has(id)) state.expandedCalls.delete(id); else state.expandedCalls.add(id);
  const c = state.calls.get(id);
  if (c) updateCallRow(c);
}

function updateCallCounts() {
  $('#count-calls').textContent = state.calls.size;
  if (state.tab !== 'backend') return;
  const shown = state.callBodies.size;
  const matching = [...state.calls.values()].filter(callMatches).length;
  $('#calls-empty').hidden = shown > 0;
  $('#calls').hidden = shown === 0;
  const f = state.callsFilter;
  const filtered = Boolean((f.deviceId || f.hook) && state.calls.size);
  $('#calls-empty-what').textContent = filtered ? 'No backend calls match the filter.' : 'No backend calls yet.';
  $('#calls-empty-hint').hidden = filtered;
  $('#calls-shown').textContent = shown ? `${shown} shown${matching > shown ? ` of ${matching}` : ''}${matching !== state.calls.size ? ` (${state.calls.size} loaded)` : ''} · click a call for its request and answer` : '';
}

/** The device filter offers every device (and the filtered one, when it is gone). */
export function fillCallDevices() {
  const select = $('#calls-filter').elements.deviceId;
  if (document.activeElement === select) return; // not from under the user's pointer; the next refresh catches up
  const current = state.callsFilter.deviceId;
  const ids = state.devices.map((d) => d.deviceId);
  if (current && !ids.includes(current)) ids.push(current);
  select.replaceChildren(h('option', { value: '' }, 'every device'), ...ids.map((id) => h('option', { value: id, selected: id === current }, id)));
  select.value = current;
}

function setCallsFilter(changes) {
  const deviceChanged = changes.deviceId !== undefined && changes.deviceId !== state.callsFilter.deviceId;
  Object.assign(state.callsFilter, changes);
  const form = $('#calls-filter');
  form.elements.hook.value = state.callsFilter.hook;
  fillCallDevices();
  for (const el of [form.elements.deviceId, form.elements.hook]) el.classList.toggle('active', Boolean(el.value));
  if (deviceChanged) loadCalls();
  renderCalls();
}

/** A device's "Backend calls →": this tab, filtered to the device. */
export function showCallsOf(deviceId) {
  showTab('backend');
  setCallsFilter({ deviceId });
}

/** After a reset of the emulator: no calls, none queued. */
export function forgetCalls() {
  callQueue.clear(); state.calls.clear(); state.expandedCalls.clear(); state.callsJSON = null; renderCalls();
}

/** The filter and a click on a call, which opens or closes its details. */
export function wireCalls() {
  $('#calls-filter').addEventListener('change', (e) => setCallsFilter({ [e.target.name]: e.target.value }));
  $('#calls-filter').addEventListener('submit', (e) => e.preventDefault());
  $('#calls').addEventListener('click', (e) => {
    const row = e.target.closest('tr.call-row');
    if (row) toggleCall(Number(row.parentElement.dataset.id));
  });
  // Rows are reachable with Tab; Enter opens or closes one, as a click does.
  $('#calls').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && e.target.matches('tr.call-row')) toggleCall(Number(e.target.parentElement.dataset.id));
  });
}
