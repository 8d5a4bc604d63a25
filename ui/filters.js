// The timeline's filters: the filter bar, the URL hash that keeps them (and the tab), the token
// or device view banner. Server-side filters go into the event stream's and the loads' query;
// a status class (4xx) and the free text filter the loaded rows in the page.
// May import: the helpers (dom, format, widgets, api, state) and the views a filter change
// reaches: timeline, stream, navigation.

import { api, enc } from './api.js';
import { $, debounce, h } from './dom.js';
import { fmtDateTime } from './format.js';
import { showTab } from './navigation.js';
import { state } from './state.js';
import { connect } from './stream.js';
import { applyClientFilter, clearRecords } from './timeline.js';
import { copyBtn, envBadge } from './widgets.js';

// The filter names; deviceId has no field in the bar (a device's "Pushes →" sets it).
const FILTERS = ['token', 'topic', 'pushType', 'status', 'reason', 'environment', 'outcome', 'deviceId'];

/** The server-side filters as a query string. */
export function serverQuery() {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(state.filters)) p.set(k, v);
  return p.toString();
}

/** Fills the filter bar (and the tab) from the URL hash. */
export function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  const form = $('#filters');
  for (const name of FILTERS) if (form.elements[name]) form.elements[name].value = p.get(name) || '';
  state.filtersExtra = { deviceId: p.get('deviceId') || '' };
  $('#q').value = p.get('q') || '';
  if (p.get('tab')) state.tab = p.get('tab');
}

/** Keeps the tab and the filters in the URL hash, so a reload or a shared link shows the same. */
export function writeHash() {
  const p = new URLSearchParams();
  if (state.tab !== 'timeline') p.set('tab', state.tab);
  for (const [k, v] of Object.entries(state.filters)) p.set(k, v);
  if (state.statusClass) p.set('status', state.statusClass);
  if (state.q) p.set('q', state.q);
  const hash = p.toString();
  history.replaceState(null, '', hash ? `#${hash}` : location.pathname);
}

/** Reads the filter bar; reconnects when the server-side filters changed. */
export function applyFilters() {
  const form = $('#filters');
  const filters = {};
  let statusCls = null;
  for (const name of FILTERS) {
    const el = form.elements[name];
    const v = el ? el.value.trim() : (state.filtersExtra[name] || '');
    if (el) el.classList.toggle('active', Boolean(v));
    if (name === 'status' && el) { el.classList.remove('invalid'); el.title = ''; }
    if (!v) continue;
    if (name === 'status') {
      if (/^\d{1,3}$/.test(v)) filters.status = v;
      else if (/^[2-5]xx$/i.test(v)) statusCls = v.toLowerCase();
      else if (el) {
        // Not a status: said on the field rather than ignored while it looks active.
        el.classList.replace('active', 'invalid');
        el.title = 'a status (400) or a class (4xx): this filters nothing';
      }
      continue;
    }
    filters[name] = v;
  }
  state.q = $('#q').value.trim();
  const changed = JSON.stringify(filters) !== JSON.stringify(state.filters);
  state.filters = filters;
  state.statusClass = statusCls;
  writeHash();
  renderScope();
  if (changed) { clearRecords(); connect(); } else applyClientFilter();
}

/** Sets one filter ('' clears it) and shows the timeline. */
export function setFilter(name, value) {
  const el = $('#filters').elements[name];
  if (el) el.value = value || ''; else state.filtersExtra[name] = value || '';
  showTab('timeline');
  applyFilters();
}

function clearFilters() {
  $('#filters').reset();
  state.filtersExtra = {};
  applyFilters();
}

/** The token view's banner again, after a 410 or a fault on the timeline (its token's state
 * may have changed). */
export function refreshScope() { clearTimeout(scopeTimer); scopeTimer = setTimeout(renderScope, 300); }
let scopeTimer = null;

/** The per-token (or per-device) view banner. */
async function renderScope() {
  const scope = $('#scope');
  const token = state.filters.token, deviceId = state.filters.deviceId;
  if (!token && !deviceId) { scope.hidden = true; scope.replaceChildren(); return; }
  scope.hidden = false;
  const exit = h('button', { type: 'button', class: 'btn ghost small', onclick: () => { setFilter(token ? 'token' : 'deviceId', ''); } }, '× show all');
  if (!token) { scope.replaceChildren(h('b', null, 'Device view'), h('span', { class: 'mono' }, deviceId), exit); return; }
  scope.replaceChildren(h('b', null, 'Token view'), h('span', { class: 'mono', title: token }, token.length > 28 ? `${token.slice(0, 16)}…${token.slice(-8)}` : token), copyBtn(token), exit);
  try {
    const t = await api('GET', `/api/v1/tokens/${enc(token.toLowerCase())}`);
    if (state.filters.token !== token) return;
    const stateCls = t.state === 'active' ? 's-ok' : t.state === 'unregistered' ? 's-err' : 's-warn';
    scope.insertBefore(h('span', null, h('span', { class: 'mono' }, t.deviceId), ' · ', t.topic, ' · ', t.kind, ' · ', envBadge(t.environment), ' ',
      h('span', { class: `badge ${stateCls}` }, t.state), t.unregisteredAt ? ` since ${fmtDateTime(t.unregisteredAt)}` : ''), exit);
  } catch {
    if (state.filters.token === token) scope.insertBefore(h('span', { class: 'muted' }, 'not issued by this emulator'), exit);
  }
}

/** Typing filters after a pause, a select at once. */
export function wireFilters() {
  const debounced = debounce(applyFilters, 250);
  $('#filters').addEventListener('input', (e) => (e.target.tagName === 'SELECT' ? applyFilters() : debounced()));
  $('#filters').addEventListener('submit', (e) => { e.preventDefault(); applyFilters(); });
  $('#clear-filters').addEventListener('click', clearFilters);
}
