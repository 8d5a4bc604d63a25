// The Devices tab's validators, as Apple's Push Notifications Console has them: what APNs would
// make of a device token (POST /api/v1/validate/token) and of a provider token on a new
// connection (POST /api/v1/validate/jwt).
// May import: the helpers (dom, widgets, api).

import { api } from './api.js';
import { $, h } from './dom.js';
import { kv, statusPill, toast } from './widgets.js';

/** A verdict: its status and reason, the explanation, then what it names. */
function showVerdict(target, v, pairs) {
  $(target).replaceChildren(
    h('div', { class: 'd-head' }, statusPill(v.status), h('span', { class: 'reason' }, v.reason || 'OK'), v.verdict ? h('span', { class: 'muted' }, v.verdict) : null),
    h('p', { class: `explain ${v.accepted ? 'ok' : 'err'}` }, v.explanation),
    kv(pairs));
}

async function validateToken(form) {
  const f = new FormData(form);
  let v;
  try { v = await api('POST', '/api/v1/validate/token', { token: f.get('token').trim(), bundleId: f.get('bundleId').trim(), environment: f.get('environment') }); } catch (e) { toast(e.message, true); return; }
  const t = v.issued;
  showVerdict('#validate-token-result', v, [['Topic judged', v.topic], ['Device', v.deviceId],
    t ? ['Issued for', `${t.bundleId} (${t.kind}), ${t.environment}`] : ['Issued for', 'never issued'], t ? ['State', t.state] : null,
    v.timestamp ? ['timestamp', String(v.timestamp)] : null]);
}

async function validateJWT(form) {
  const f = new FormData(form);
  const body = { jwt: f.get('jwt').trim(), environment: f.get('environment') };
  if (f.get('topic').trim()) body.topic = f.get('topic').trim();
  let v;
  try { v = await api('POST', '/api/v1/validate/jwt', body); } catch (e) { toast(e.message, true); return; }
  const k = v.key;
  showVerdict('#validate-jwt-result', v, [['kid', v.kid], ['iss (team)', v.iss], ['iat', v.iat == null ? null : `${v.iat} (${v.ageSeconds} s ago)`],
    ['Key', v.keyRegistered ? `registered, team ${v.teamId}` : 'not registered'],
    k ? ['Restricted to', [k.environment, (k.topics || []).join(', ')].filter(Boolean).join('; ') || 'nothing (team-scoped, both environments)'] : null]);
}

export function wireValidators() {
  for (const [id, run] of [['#validate-token', validateToken], ['#validate-jwt', validateJWT]]) {
    $(id).addEventListener('submit', (e) => { e.preventDefault(); run(e.target); });
  }
}
