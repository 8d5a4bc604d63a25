// The Fault rules tab: the rules (GET /api/v1/faults) with their counts, the form that adds one,
// delete one or all.
// May import: the helpers (dom, format, widgets, api, state) and refresh.

import { api, enc, freshAnswer } from './api.js';
import { $, $$, h } from './dom.js';
import { shortToken } from './format.js';
import { act, refreshSide } from './refresh.js';
import { state } from './state.js';
import { confirmDialog, statusClass, toast } from './widgets.js';

/** A rule's match as chips; none matches every push. */
function describeMatch(m) {
  const parts = Object.entries(m || {}).map(([k, v]) => h('span', { class: 'chip', title: `${k}: ${v}` }, `${k} `, h('b', { class: k === 'token' ? 'mono' : null }, k === 'token' ? shortToken(v) : String(v))));
  return parts.length ? parts : h('span', { class: 'muted' }, 'every push');
}

/** What a rule does, in words. */
function describeAction(a) {
  const parts = [];
  if (a.status) parts.push(h('span', { class: `pill ${statusClass(a.status)}` }, String(a.status)), ' ', a.reason || '');
  if (a.rstStream != null) parts.push(`RST_STREAM code ${a.rstStream}`);
  if (a.goAway) parts.push(`GOAWAY${a.goAway.reason ? ` ${a.goAway.reason}` : ''} (code ${a.goAway.errorCode ?? 0}${a.goAway.lastStreamId != null ? `, last stream ${a.goAway.lastStreamId}` : ''})`);
  if (a.close) parts.push('close the connection');
  if (a.maxConcurrentStreams != null) parts.push(`MAX_CONCURRENT_STREAMS ${a.maxConcurrentStreams}`);
  if (a.delayMs) parts.push(`${parts.length ? ' after ' : 'delay '}${a.delayMs} ms${a.jitterMs ? ` ±${a.jitterMs}` : ''}`);
  return parts;
}

/** Fetches the rules and re-renders when they changed. */
export async function refreshFaults() {
  const data = await freshAnswer('faults', api('GET', '/api/v1/faults'), (d) => d.faults);
  if (!data) return;
  state.faults = data.faults;
  $('#faults').replaceChildren(...state.faults.map((f) => h('tr', { dataset: { id: f.id } },
    h('td', { class: 'id' }, f.id), h('td', null, describeMatch(f.match)), h('td', null, describeAction(f.action || {})),
    h('td', null, [f.times != null ? `${f.times}×` : 'always', f.after ? `after ${f.after}` : null, f.probability != null ? `p=${f.probability}` : null].filter(Boolean).join(', ')),
    h('td', { class: 'num' }, String(f.matched)), h('td', { class: 'num' }, String(f.fired)),
    h('td', { class: 'num' }, h('button', { type: 'button', class: 'btn small danger-outline', title: `Delete rule ${f.id}`,
      onclick: () => act(api('DELETE', `/api/v1/faults/${enc(f.id)}`), `Rule ${f.id} deleted`) }, 'Delete')))));
  $('#faults-empty').hidden = state.faults.length > 0;
  $('#faults-table').hidden = state.faults.length === 0;
  $('#count-faults').textContent = state.faults.length;
}

/** The form shows only the fields of the chosen kind of action. */
export function updateFaultForm() {
  const form = $('#fault-form');
  const kind = form.elements.kind.value;
  for (const label of $$('label[data-for]', form)) label.hidden = label.dataset.for !== kind;
}

/** "Add rule": the form as a rule for POST /api/v1/faults. */
async function submitFault(e) {
  e.preventDefault();
  const f = e.target.elements;
  const num = (name) => (f[name].value.trim() === '' ? undefined : Number(f[name].value));
  const match = {};
  for (const k of ['token', 'topic', 'pushType', 'environment']) if (f[k].value.trim()) match[k] = f[k].value.trim();
  const action = {};
  switch (f.kind.value) {
    case 'respond': action.status = num('status'); if (f.reason.value.trim()) action.reason = f.reason.value.trim(); break;
    case 'unavailable': action.unavailable = true; break;
    case 'rst': action.rstStream = num('rstCode') ?? 2; break;
    case 'goaway': action.goAway = { errorCode: num('goAwayCode') ?? 0 }; if (f.goAwayReason.value.trim()) action.goAway.reason = f.goAwayReason.value.trim(); break;
    case 'close': action.close = true; break;
    default: break;
  }
  if (num('delayMs')) action.delayMs = num('delayMs');
  const rule = { match, action };
  for (const k of ['times', 'after', 'probability']) if (num(k) !== undefined) rule[k] = num(k);
  $('#fault-error').textContent = '';
  try {
    const created = await api('POST', '/api/v1/faults', rule);
    toast(`Rule ${created.id} added`);
  } catch (err) {
    $('#fault-error').textContent = err.message;
  }
  refreshSide();
}

export function wireFaults() {
  $('#fault-form').addEventListener('submit', submitFault);
  $('#fault-form').elements.kind.addEventListener('change', updateFaultForm);
  $('#delete-faults').addEventListener('click', async () => {
    if (await confirmDialog('Delete every fault rule?', 'Delete all')) act(api('DELETE', '/api/v1/faults'), 'All fault rules deleted');
  });
}
