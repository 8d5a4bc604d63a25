// The header's facts from GET /api/v1/info: version, listener addresses, the tabs' counts, uptime.
// May import: the helpers (dom, format, api, state).

import { api } from './api.js';
import { $, h } from './dom.js';
import { fmtDuration } from './format.js';
import { state } from './state.js';

export async function refreshInfo() {
  try {
    const info = await api('GET', '/api/v1/info');
    state.info = info;
    state.infoAt = Date.now();
    $('#version').textContent = `v${info.version}`;
    const a = info.addresses || {};
    const parts = [['sandbox', a.sandbox], ['production', a.production], ['h2c sandbox', a.h2cSandbox], ['h2c production', a.h2cProduction], ['device', a.device]]
      .filter(([, v]) => v).map(([k, v]) => h('span', { title: `${k}: ${v}` }, `${k} `, h('b', null, v)));
    if (a.caFile) parts.push(h('span', { title: `CA to trust: ${a.caFile}` }, 'CA ', h('b', null, a.caFile.split('/').pop())));
    $('#addresses').replaceChildren(...parts);
    const c = info.counts || {};
    $('#count-notifications').textContent = c.notifications ?? 0;
    $('#count-devices').textContent = c.devices ?? 0;
    $('#count-faults').textContent = c.faultRules ?? 0;
    tickUptime();
  } catch { /* the event stream shows the connection state */ }
}

/** Counts the uptime on between two answers. */
export function tickUptime() {
  if (!state.info) return;
  $('#uptime').textContent = `up ${fmtDuration(state.info.uptimeSeconds + (Date.now() - state.infoAt) / 1000)}`;
}
