// The Notifications tab's detail pane: the selected record as the device showed it (a lock
// screen preview), its delivery log, payload, response, provider token, headers and timing,
// and the record exported as a curl command or an .apns file.
// May import: the helpers (dom, format, records, widgets, api, state) and the views its buttons
// lead to: activities, filters, navigation, refresh.

import { showActivitiesOf } from './activities.js';
import { api, apiText, enc } from './api.js';
import { $, h } from './dom.js';
import { setFilter } from './filters.js';
import { bytes, fmtDateTime, fmtDuration, pad, since } from './format.js';
import { showTab } from './navigation.js';
import { alertOf, aps, crossTitle, sizeLimit, str, stripPrivate } from './records.js';
import { act } from './refresh.js';
import { state } from './state.js';
import { copy, copyBtn, crossBadge, envBadge, headerTable, jsonView, kv, outcomeBadge, statusPill, toast } from './widgets.js';

/** A part of the pane that stays open or closed as the user left it. */
function section(key, title, aside, ...body) {
  const d = h('details', { class: 'd-section', dataset: { key }, open: state.openSections[key] },
    h('summary', null, h('h3', null, title), aside ? h('span', { class: 'aside' }, aside) : null),
    h('div', { class: 'd-body' }, body));
  d.addEventListener('toggle', () => { state.openSections[key] = d.open; });
  return d;
}

/** The record as the device's lock screen showed it, or what the push did instead. */
function lockScreen(r) {
  const a = aps(r) || {};
  const alert = alertOf(r);
  const shown = r.display === 'banner' || r.display === 'notificationCenter';
  const when = new Date(r.receivedAtMs);
  const lock = h('div', { class: `lock${alert && !shown ? ' dimmed' : ''}`, id: 'lock-preview' },
    h('div', { class: 'lock-clock' }, `${pad(when.getHours())}:${pad(when.getMinutes())}`),
    h('div', { class: 'lock-date' }, when.toLocaleDateString(undefined, { weekday: 'long', month: 'long', day: 'numeric' })));
  const appName = (r.bundleId || r.topic || 'app').split('.').pop();
  const badge = typeof a.badge === 'number' ? a.badge : null;
  if (alert) {
    const line = (cls, text, loc) => (text ? h('div', { class: cls }, text) : loc ? h('div', { class: cls }, h('span', { class: 'loc', title: 'localized on the device' }, `⟨${loc}⟩`)) : null);
    lock.append(h('div', { class: 'notif' },
      h('div', { class: 'notif-head' },
        h('span', { class: 'app-icon' }, appName.slice(0, 1).toUpperCase(), badge ? h('span', { class: 'app-badge', id: 'preview-badge' }, String(badge)) : null),
        h('span', { class: 'app', title: r.topic || '' }, appName), h('span', null, 'now')),
      line('notif-title', alert.title, alert.titleLoc),
      line('notif-subtitle', alert.subtitle, alert.subtitleLoc),
      line('notif-body', alert.body, alert.bodyLoc)));
    if (!shown) lock.append(h('div', { class: 'lock-note' }, r.status !== 200 ? `Not delivered: ${r.status === 0 ? 'stream reset' : r.status} ${r.reason || ''}` : `Not shown (${r.display || r.outcome})`));
  } else {
    const what = a['content-available'] === 1 ? 'Silent push: wakes the app in the background, nothing on screen.'
      : r.pushType === 'voip' ? 'VoIP push: handed to PushKit, the app reports a call.'
        : r.pushType === 'liveactivity' ? `Live Activity ${str(a.event) || 'update'}.`
          : 'No alert in this payload: nothing on screen.';
    lock.append(h('div', { class: 'lock-silent' }, what));
  }
  const meta = h('div', { class: 'lock-meta' });
  if (badge != null) meta.append(h('span', null, badge === 0 ? 'badge cleared' : `badge ${badge}`));
  if (a.sound != null) {
    const s = typeof a.sound === 'object' ? a.sound : { name: a.sound };
    meta.append(h('span', null, `♪ ${str(s.name) || 'sound'}${s.critical ? ' (critical)' : ''}`));
  }
  for (const key of ['interruption-level', 'thread-id', 'category']) if (a[key] != null) meta.append(h('span', null, `${key.split('-')[0]}: ${str(a[key])}`));
  if (a['mutable-content'] === 1) meta.append(h('span', null, 'mutable'));
  lock.append(meta);
  return lock;
}

/** The payload's size against its push type's limit. */
function sizeBar(r) {
  const limit = sizeLimit(r), size = r.payloadSize || 0;
  const pct = (size / limit) * 100;
  const cls = pct > 100 ? 'err' : pct > 80 ? 'warn' : '';
  const fill = h('div');
  fill.style.width = `${Math.min(100, pct).toFixed(2)}%`;
  return h('div', { class: 'size', id: 'size-bar' },
    h('div', { class: `sizebar ${cls}`, role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': limit, 'aria-valuenow': size }, fill),
    h('div', { class: 'size-label' }, h('span', null, `${bytes(size)} of ${bytes(limit)} (${pct < 1 && size ? '<1' : Math.round(pct)}%)`),
      h('span', null, r.pushType === 'voip' ? 'VoIP limit' : 'limit for this push type')));
}

/** The notification's life as Apple's Push Notifications Console shows it (GET …/log): each
 * state with its time, oldest first, filled in when the answer comes (the pane is drawn at once). */
function deliveryLog(r) {
  const list = h('ol', { class: 'delivery-log', id: 'delivery-log' });
  api('GET', `/api/v1/notifications/${enc(r.apnsId)}/log`).then((answer) => {
    list.replaceChildren(...(answer.log || []).map((entry) => h('li', { dataset: { state: entry.state } },
      h('span', { class: 'mono when' }, fmtDateTime(entry.at)), h('span', { class: 'what' }, entry.console),
      entry.note ? h('span', { class: 'muted note' }, entry.note) : '')));
  }).catch((e) => list.replaceChildren(h('li', { class: 'muted' }, `no log: ${e.message}`)));
  return list;
}

/** The record's request as a curl command (GET …/curl), copied; shown to be selected instead where
 * the page may not write the clipboard (served over http from another host). */
async function copyCurl(r) {
  let text;
  try { text = await apiText(`/api/v1/notifications/${enc(r.apnsId)}/curl`); } catch (e) { toast(e.message, true); return; }
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      toast('cURL command copied: set $APNS_JWT to your provider token');
      return;
    } catch { /* shown below */ }
  }
  const box = h('textarea', { id: 'curl-text', class: 'curl-box mono', readonly: true, rows: text.split('\n').length, 'aria-label': 'curl command' });
  box.value = text;
  const old = $('#curl-text');
  if (old) old.replaceWith(box); else $('#detail .d-actions').after(box);
  box.focus();
  box.select();
}

/** The payload as an .apns file for `xcrun simctl push` or a drop on the Simulator (GET …/apns). */
async function downloadApns(r) {
  let text;
  try { text = await apiText(`/api/v1/notifications/${enc(r.apnsId)}/apns`); } catch (e) { toast(e.message, true); return; }
  const url = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
  const link = h('a', { href: url, download: `${r.apnsId}.apns`, style: 'display:none' });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** Shows the selected record, or how to select one. */
export function renderDetail(resetScroll) {
  const pane = $('#detail');
  const r = state.records.get(state.selected);
  const top = pane.scrollTop;
  if (!r) {
    pane.replaceChildren(h('div', { class: 'placeholder' }, h('div', null, 'Select a notification to see it as the device did.'),
      h('div', { class: 'small' }, 'Use ', h('kbd', null, 'j'), h('kbd', null, 'k'), ' or the arrow keys to move through the list.')));
    return;
  }
  const device = r.deviceId;
  const explainCls = r.status >= 200 && r.status < 300 ? (r.outcome === 'delivered' ? 'ok' : 'warn') : 'err';
  const jwt = r.jwt;
  const claims = jwt && jwt.claims && typeof jwt.claims === 'object' ? jwt.claims : null;
  const resp = r.response || {};
  const uniqueHeader = (resp.headers || []).find((x) => x.name === 'apns-unique-id');
  const canTap = device && r.status === 200 && (r.display === 'banner' || r.display === 'notificationCenter');

  pane.replaceChildren(
    h('div', { class: 'd-head' }, statusPill(r.status), h('span', { class: 'reason' }, r.reason || (r.status === 200 ? 'OK' : '')), outcomeBadge(r.outcome),
      h('span', { class: 'muted' }, r.pushType || ''), envBadge(r.environment)),
    // replaceChildren writes a null as the text "null": nothing is an empty string here.
    r.crossAccount ? h('div', { class: 'd-cross', id: 'cross-account' }, crossBadge(r, true)) : '',
    h('div', { class: 'd-sub' }, h('span', { class: 'mono', title: 'apns-id' }, r.apnsId), copyBtn(r.apnsId), h('span', null, fmtDateTime(r.receivedAt)), h('span', null, `#${r.sequence}`)),
    h('div', { class: 'd-actions' },
      h('button', { type: 'button', class: 'btn small', title: 'Everything sent to this token (t)', onclick: () => setFilter('token', r.token) }, 'All pushes to this token'),
      canTap ? h('button', { type: 'button', class: 'btn small', title: 'The user taps the notification', onclick: async () => {
        const t = await act(api('POST', `/api/v1/devices/${enc(device)}/tap`, { apnsId: r.apnsId }));
        if (t) toast(`Tapped: ${t.callbacks.join(', ') || 'no callbacks'}${t.launched ? ' (app launched)' : ''}`);
      } }, 'Tap it on the device') : null,
      r.pushType === 'liveactivity' && device ? h('button', { type: 'button', class: 'btn small', title: 'The Live Activities on the device as it shows them now', onclick: () => showActivitiesOf(device) }, 'Live Activities on the device →') : null,
      h('button', { type: 'button', class: 'btn small ghost', id: 'copy-curl', title: 'A curl command that sends this request again ($APNS_JWT for the provider token)', onclick: () => copyCurl(r) }, 'Copy cURL'),
      h('button', { type: 'button', class: 'btn small ghost', id: 'download-apns', title: 'The payload as an .apns file for xcrun simctl push or the Simulator', onclick: () => downloadApns(r) }, 'Download .apns'),
      h('button', { type: 'button', class: 'btn small ghost', onclick: () => copy(JSON.stringify(stripPrivate(r), null, 2)) }, 'Copy record JSON')),
    section('device', 'On the device', device || 'no device',
      h('div', { class: 'device-view' }, lockScreen(r),
        h('div', null,
          kv([['Outcome', outcomeBadge(r.outcome)], ['Display', r.display], ['Callbacks', r.callbacks && r.callbacks.length ? r.callbacks.map((c) => h('span', { class: 'chip mono' }, c)) : null],
            ['Stored', r.stored ? 'yes (held until the device was reachable)' : 'no'], ['Device', device], ['App', r.bundleId], ['Token', h('span', { class: 'mono', style: 'word-break:break-all' }, r.token)],
            ['Delivered', r.deliveredAt ? fmtDateTime(r.deliveredAt) : null],
            'userId' in r && (r.deliveredAt || r.userId != null) ? ['Account', r.userId != null ? h('span', { class: 'account', id: 'record-user' }, r.userId) : h('span', { class: 'muted', id: 'record-user' }, 'nobody logged in')] : null,
            r.addressee != null ? ['Addressee', h('span', { class: r.crossAccount ? 'account xacct-text' : 'account', id: 'record-addressee' }, r.addressee)] : null]),
          h('p', { class: `explain ${explainCls}`, id: 'explanation' }, r.explanation || ''),
          r.crossAccount ? h('p', { class: 'explain err' }, `${crossTitle(r)}: the push reached the wrong account. Typically the app backend still had this device's token bound to ${r.addressee ?? 'that account'} (a logout or account switch it did not act on, or one token bound to two accounts).`) : null))),
    section('log', 'Delivery log', 'as the Push Notifications Console shows it', deliveryLog(r)),
    section('payload', 'Payload', `${bytes(r.payloadSize)}${typeof r.payload === 'string' ? ' · not JSON' : ''}`, sizeBar(r), h('div', { id: 'payload-json' }, jsonView(r.payload))),
    section('response', 'Response', `${r.status === 0 ? 'none' : r.status}${r.respondedAt ? '' : ' · pending'}`,
      kv([['Status', statusPill(r.status)], ['Reason', r.reason], ['apns-id', h('span', { class: 'mono' }, r.apnsId)],
        ['apns-unique-id', uniqueHeader ? h('span', { class: 'mono' }, uniqueHeader.value) : r.uniqueId ? h('span', { class: 'mono' }, r.uniqueId) : null],
        r.timestamp ? ['timestamp', `${r.timestamp} (${fmtDateTime(r.timestamp)})`] : null,
        resp.body ? ['Body', h('span', { class: 'mono' }, JSON.stringify(resp.body))] : null])),
    section('jwt', 'Provider token', jwt ? (jwt.verified ? 'verified' : 'not verified') : 'none',
      jwt ? [kv([['Verified', h('span', { class: `badge ${jwt.verified ? 's-ok' : 's-err'}` }, jwt.verified ? 'signature verified' : 'not verified')],
        ['Team', r.teamId], ['Key', r.keyId], claims && typeof claims.iat === 'number' ? ['Issued', `${fmtDateTime(claims.iat * 1000)} (${fmtDuration((r.receivedAtMs / 1000) - claims.iat)} before the push)`] : null]),
      h('div', { class: 'two' }, h('div', null, h('div', { class: 'small muted' }, 'header'), jsonView(jwt.header)),
        h('div', null, h('div', { class: 'small muted' }, 'claims'), jsonView(jwt.claims)))] : h('div', { class: 'muted' }, 'No provider token was sent.')),
    section('headers', 'Request headers', `${(r.headers || []).length}`, headerTable(r.headers),
      h('div', { class: 'small muted', style: 'margin:10px 0 3px' }, 'response headers'), headerTable(resp.headers)),
    section('timing', 'Timing and connection', null,
      kv([['Received', fmtDateTime(r.receivedAt)], ['Responded', r.respondedAt ? fmtDateTime(r.respondedAt) + since(r.receivedAt, r.respondedAt) : 'not yet'],
        ['Delivered', r.deliveredAt ? fmtDateTime(r.deliveredAt) + since(r.receivedAt, r.deliveredAt) : null],
        ['Connection', `#${r.connectionId}, stream ${r.streamId}`], ['Priority', String(r.priority)],
        ['Expiration', r.expiration == null ? 'none' : r.expiration === 0 ? '0 (deliver once, now)' : `${r.expiration} (${fmtDateTime(r.expiration * 1000)})`],
        ['Collapse id', r.collapseId],
        ['Fault rule', r.fault ? h('button', { type: 'button', class: 'tok', onclick: () => showTab('faults') }, r.fault) : null]])));
  pane.scrollTop = resetScroll ? 0 : top;
}
