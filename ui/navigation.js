// Moving around the page: the tabs (the URL hash keeps the shown one) and the keyboard shortcuts.
// May import: the helpers (dom, state) and the views a tab or a key shows: calls, devices,
// filters, load, refresh, timeline.

import { renderCalls } from './calls.js';
import { showDevices } from './devices.js';
import { $, $$ } from './dom.js';
import { setFilter, writeHash } from './filters.js';
import { loadShown } from './load.js';
import { refreshSide } from './refresh.js';
import { state } from './state.js';
import { move, select, showQueued } from './timeline.js';

const TABS = ['timeline', 'devices', 'channels', 'faults', 'backend', 'load'];
/** Shows a tab (the timeline for an unknown one) and brings it up to date. */
export function showTab(tab) {
  if (!TABS.includes(tab)) tab = 'timeline';
  state.tab = tab;
  for (const b of $$('.tabs button')) b.setAttribute('aria-selected', String(b.dataset.tab === tab));
  for (const p of $$('.panel')) p.hidden = p.id !== `panel-${tab}`;
  writeHash();
  if (tab === 'timeline') showQueued();
  if (tab === 'backend' && state.callsDirty) renderCalls();
  if (tab === 'devices') showDevices();
  if (tab === 'load') loadShown();
  if (tab !== 'timeline') refreshSide();
}

/** j/k and the arrows move through the timeline, / searches, t toggles the token view, 1–6 pick a tab, Esc closes. */
function onKey(e) {
  const t = e.target;
  const typing = t instanceof HTMLInputElement || t instanceof HTMLSelectElement || t instanceof HTMLTextAreaElement;
  if (e.key === 'Escape') {
    if (typing) { t.blur(); return; }
    if (state.selected != null) select(null);
    return;
  }
  if (typing || e.ctrlKey || e.metaKey || e.altKey || $$('dialog').some((d) => d.open)) return;
  const key = e.key;
  // On a focused tab, the arrow keys move along the tabs (the WAI-ARIA tabs pattern).
  if (t instanceof HTMLElement && t.getAttribute('role') === 'tab' && (key === 'ArrowRight' || key === 'ArrowLeft')) {
    e.preventDefault();
    const next = TABS[(TABS.indexOf(t.dataset.tab) + (key === 'ArrowRight' ? 1 : TABS.length - 1)) % TABS.length];
    showTab(next);
    $(`#tab-${next}`).focus();
    return;
  }
  if (/^[1-6]$/.test(key)) { showTab(TABS[Number(key) - 1]); return; }
  if (state.tab !== 'timeline') return;
  if (key === 'j' || key === 'ArrowDown') { e.preventDefault(); move(1); }
  else if (key === 'k' || key === 'ArrowUp') { e.preventDefault(); move(-1); }
  else if (key === 'Home') { e.preventDefault(); move(-Infinity); }
  else if (key === 'End') { e.preventDefault(); move(Infinity); }
  else if (key === '/') { e.preventDefault(); $('#q').focus(); }
  else if (key === 't') { const r = state.records.get(state.selected); if (r) setFilter('token', state.filters.token === r.token ? '' : r.token); }
}

export function wireNavigation() {
  for (const b of $$('.tabs button')) b.addEventListener('click', () => showTab(b.dataset.tab));
  document.addEventListener('keydown', onKey);
}
