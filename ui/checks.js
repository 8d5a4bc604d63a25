// The checks: the header's button (cross-account deliveries and pushes devices ignored, from
// GET /api/v1/checks) and its
// dialog listing the failures, each leading to its record in the timeline.
// May import: the helpers (dom, format, api, state) and the views it leads to: navigation,
// refresh, timeline.

import { api, enc, freshAnswer } from './api.js';
import { $, h } from './dom.js';
import { fmtDateTime } from './format.js';
import { showTab } from './navigation.js';
import { act } from './refresh.js';
import { state } from './state.js';
import { select, updateCounts, upsert } from './timeline.js';

let checksTimer = null;
/** A check soon, once for a burst of events. */
export function scheduleChecks() { clearTimeout(checksTimer); checksTimer = setTimeout(refreshChecks, 100); }
/** Fetches GET /api/v1/checks (a strict mode's 409 is an answer too) and shows it. */
export async function refreshChecks() {
  const data = await freshAnswer('checks', api('GET', '/api/v1/checks', undefined, { allow: [409] }));
  if (!data) return;
  state.checks = data;
  renderChecks();
}

/** The header's button: OK, or how many deliveries went to the wrong account, else how many
 * pushes devices ignored. */
function renderChecks() {
  const el = $('#checks');
  const c = state.checks;
  if (!c) { el.hidden = true; return; }
  const n = c.crossAccountDeliveries || 0;
  const ignored = c.ignoredPushes || 0;
  const failed = n > 0 || ignored > 0 || c.ok === false;
  el.hidden = false;
  el.dataset.state = failed ? 'fail' : 'ok';
  el.dataset.count = String(n);
  el.textContent = n ? `${n.toLocaleString('en-US')} cross-account deliver${n === 1 ? 'y' : 'ies'}`
    : ignored ? `${ignored.toLocaleString('en-US')} ignored push${ignored === 1 ? '' : 'es'}`
    : failed ? `${(c.failures || []).length} failed checks` : 'checks OK';
  if ($('#checks-dialog').open) renderChecksDialog();
}

/** The dialog: the summary and the newest 100 failures. */
function renderChecksDialog() {
  const c = state.checks || { failures: [] };
  const n = c.crossAccountDeliveries || 0;
  const ignored = c.ignoredPushes || 0;
  const failures = (c.failures || []).slice(-100).reverse();
  const crossAccount = n
    ? `${n} push${n === 1 ? ' was' : 'es were'} delivered while another account than the one the payload names was logged in on the device.`
    : 'No cross-account deliveries: every push that named an account (the app backend\'s addresseePointer) reached a device where that account was logged in.';
  const ignoredText = ignored
    ? ` ${ignored} push${ignored === 1 ? ' was' : 'es were'} answered 200 but ignored by the device (Live Activities, widgets).`
    : '';
  $('#checks-summary').textContent = crossAccount + ignoredText
    + (c.strict && (n || ignored) ? ' Strict mode: GET /api/v1/checks answers 409.' : '')
    + (failures.length < n + ignored ? ` The newest ${failures.length}:` : '');
  $('#checks-failures').replaceChildren(...failures.map((f) => h('li', null,
    h('div', null, f.message || f.check || 'failed'),
    h('div', { class: 'small muted' }, fmtDateTime(f.at), f.bundleId ? ` · ${f.bundleId}` : '', ' · ',
      f.apnsId ? h('button', { type: 'button', class: 'tok', title: 'Show the record', onclick: () => { $('#checks-dialog').close(); showRecord(f.sequence, f.apnsId); } }, f.apnsId) : null))));
}

/** Selects a record in the timeline, fetching it when it is not loaded. */
export async function showRecord(sequence, apnsId) {
  showTab('timeline');
  if (!state.rows.has(sequence)) {
    const r = await act(api('GET', `/api/v1/notifications/${enc(apnsId)}`));
    if (!r) return;
    upsert(r);
    updateCounts();
    sequence = r.sequence;
  }
  select(sequence, { scroll: true });
}

export function wireChecks() {
  $('#checks').addEventListener('click', () => { renderChecksDialog(); $('#checks-dialog').showModal(); });
}
