// The Devices tab's tokens table: every token issued, with its state (GET /api/v1/tokens, the
// first page).
// May import: the helpers (dom, format, widgets, api, state) and filters (a token's pushes).

import { api, freshAnswer } from './api.js';
import { $, h } from './dom.js';
import { setFilter } from './filters.js';
import { fmtDateTime, shortToken } from './format.js';
import { copyBtn, envBadge } from './widgets.js';

export async function refreshTokens() {
  const data = await freshAnswer('tokens', api('GET', '/api/v1/tokens'), (d) => d.tokens);
  if (!data) return;
  const cls = { active: 's-ok', unregistered: 's-err', expired: 's-warn', 'rate-limited': 's-warn' };
  $('#tokens-more').hidden = !data.nextCursor;
  $('#tokens').replaceChildren(...data.tokens.slice().reverse().map((t) => h('tr', null,
    h('td', null, h('button', { type: 'button', class: 'tok', title: `Everything sent to ${t.token}`, onclick: () => setFilter('token', t.token) }, shortToken(t.token)), ' ', copyBtn(t.token)),
    h('td', { class: 'mono' }, t.deviceId), h('td', null, t.topic), h('td', null, t.kind), h('td', null, envBadge(t.environment)),
    h('td', null, h('span', { class: `badge ${cls[t.state] || 's-grey'}` }, t.state), t.unregisteredAt ? h('span', { class: 'muted small' }, ` since ${fmtDateTime(t.unregisteredAt)}`) : null))));
}
