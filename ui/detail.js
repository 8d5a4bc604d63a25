// The Notifications tab's detail pane: the selected record as the device showed it (a lock
// screen preview with its action buttons) and how it presented it, its delivery log, payload,
// response, provider token, headers and timing, and the record exported as a curl command or an
// .apns file.
// May import: the helpers (dom, format, records, presentation, widgets, api, clock, state), notification
// and the views its buttons lead to: activities, filters, navigation, refresh.

import { showActivitiesOf } from './activities.js';
import { api, apiText, enc } from './api.js';
import { emulatorNowMs } from './clock.js';
import { $, h } from './dom.js';
import { setFilter } from './filters.js';
import { bytes, fmtDateTime, fmtDuration, pad, since } from './format.js';
import { showTab } from './navigation.js';
import { actionList, cardLine, notifCard } from './notification.js';
import { SOUND_TEXT, badgeText, heldUntilMs, levelText, responseText, stillListed } from './presentation.js';
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

/** The record as the device's lock screen showed it (with its action buttons), or what the push did instead. */
function lockScreen(r) {
  const a = aps(r) || {};
  const p = r.presentation;
  const alert = alertOf(r);
  const held = r.display === 'scheduledSummary' && heldUntilMs(p) > emulatorNowMs();
  const shown = r.display === 'banner' || r.display === 'notificationCenter' || (r.display === 'scheduledSummary' && !held);
  const when = new Date(r.receivedAtMs);
  const lock = h('div', { class: `lock${alert && !shown ? ' dimmed' : ''}`, id: 'lock-preview' },
    h('div', { class: 'lock-clock' }, `${pad(when.getHours())}:${pad(when.getMinutes())}`),
    h('div', { class: 'lock-date' }, when.toLocaleDateString(undefined, { weekday: 'long', month: 'long', day: 'numeric' })));
  // The badge the device set (a Badges switch that is off leaves it alone); the payload's where the record has none.
  const badge = p && p.badge != null ? p.badge : typeof a.badge === 'number' ? a.badge : null;
  // What the user read is the presentation's text (localized); the payload's where nothing was read.
  const read = p && (p.title || p.subtitle || p.body) ? p : alert;
  if (alert) {
    lock.append(notifCard({ bundleId: r.bundleId || r.topic, title: r.topic || '', when: 'now', badge, badgeId: 'preview-badge' },
      cardLine('notif-title', read.title, alert.titleLoc),
      cardLine('notif-subtitle', read.subtitle, alert.subtitleLoc),
      cardLine('notif-body', read.body, alert.bodyLoc)));
    const actions = actionList(r);
    if (actions) { lock.append(actions); lock.classList.add('tall'); }
    if (!shown) {
      lock.append(h('div', { class: 'lock-note' }, r.status !== 200 ? `Not delivered: ${r.status === 0 ? 'stream reset' : r.status} ${r.reason || ''}`
        : held ? `Held for the scheduled summary at ${fmtDateTime(p.heldUntil)}` : `Not shown (${r.display || r.outcome})`));
    }
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
    const outcome = p && p.sound !== 'played' && p.sound !== 'none' ? ` · ${p.sound}` : '';
    meta.append(h('span', null, `♪ ${str(s.name) || 'sound'}${s.critical ? ' (critical)' : ''}${outcome}`));
  }
  for (const key of ['interruption-level', 'thread-id', 'category']) if (a[key] != null) meta.append(h('span', null, `${key.split('-')[0]}: ${str(a[key])}`));
  if (a['mutable-content'] === 1) meta.append(h('span', null, 'mutable'));
  lock.append(meta);
  return lock;
}

/** How the device presented it (docs/device-model.md §14l): what the user read, heard and could press, and their answer. */
function presentationSection(r) {
  const p = r.presentation;
  if (!p) return '';
  const field = (name, ...text) => h('span', { dataset: { field: name } }, ...text);
  const listed = stillListed(r, emulatorNowMs());
  const actions = p.actions || [];
  const held = heldUntilMs(p);
  return section('presentation', 'Presentation', p.userResponse ? 'answered' : listed ? 'listed, not answered' : `display ${r.display || 'none'}`,
    h('div', { id: 'presentation' }, kv([
      ['Title', p.title == null ? null : field('title', p.title)],
      ['Subtitle', p.subtitle == null ? null : field('subtitle', p.subtitle)],
      ['Body', p.body == null ? null : field('body', p.body)],
      ['Category', p.category == null ? 'none' : field('category', p.category, p.categoryRegistered ? ` · ${actions.length} action${actions.length === 1 ? '' : 's'}` : ' · not registered by the app: no buttons')],
      ['Interruption', field('level', levelText(p))],
      ['Sound', field('sound', SOUND_TEXT[p.sound] || p.sound)],
      ['Screen', p.screenLit ? 'lit' : 'not lit'],
      ['Badge', field('badge', badgeText(p.badge))],
      ['Group', field('thread', p.threadId != null ? `thread ${p.threadId}` : "the app's own group (no thread-id)")],
      ['Summary arg', p.summaryArg == null ? null : `${p.summaryArg}${p.summaryArgCount != null ? ` (counts as ${p.summaryArgCount})` : ''}`],
      ['Held until', p.heldUntil ? field('heldUntil', fmtDateTime(p.heldUntil), held > emulatorNowMs() ? ' (waiting for the summary)' : ' (in the summary)') : 'not held'],
      p.relevanceScore != null ? ['Relevance', String(p.relevanceScore)] : null,
      p.sender != null ? ['Sender', p.sender] : null,
      ['Response', p.userResponse ? field('response', responseText(p), ` at ${fmtDateTime(p.userResponse.at)}`)
        : field('response', listed ? 'none yet: answer it with the buttons under the preview' : 'none')],
    ])));
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

/** The id that names this record alone: a provider retrying a push sends its apns-id again,
 * and an apns-id names the newest record with it; the apns-unique-id (sandbox) is the record's own. */
const recordID = (r) => r.uniqueId || r.apnsId;

/** The notification's life as Apple's Push Notifications Console shows it (GET …/log): each
 * state with its time, oldest first, filled in when the answer comes (the pane is drawn at once). */
function deliveryLog(r) {
  const list = h('ol', { class: 'delivery-log', id: 'delivery-log' });
  api('GET', `/api/v1/notifications/${enc(recordID(r))}/log`).then((answer) => {
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
  try { text = await apiText(`/api/v1/notifications/${enc(recordID(r))}/curl`); } catch (e) { toast(e.message, true); return; }
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
  try { text = await apiText(`/api/v1/notifications/${enc(recordID(r))}/apns`); } catch (e) { toast(e.message, true); return; }
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
  // Once answered (or when held for the summary) there is nothing on screen to tap.
  const canTap = device && r.status === 200 && (r.presentation ? stillListed(r, emulatorNowMs()) : r.display === 'banner' || r.display === 'notificationCenter');

  pane.replaceChildren(
    h('div', { class: 'd-head' }, statusPill(r.status), h('span', { class: 'reason' }, r.reason || (r.status === 200 ? 'OK' : '')), outcomeBadge(r.outcome),
      h('span', { class: 'muted' }, r.pushType || ''), envBadge(r.environment)),
    // replaceChildren writes a null as the text "null": nothing is an empty string here.
    r.crossAccount ? h('div', { class: 'd-cross', id: 'cross-account' }, crossBadge(r, true)) : '',
    h('div', { class: 'd-sub' }, h('span', { class: 'mono', title: 'apns-id' }, r.apnsId), copyBtn(r.apnsId), h('span', null, fmtDateTime(r.receivedAt)), h('span', null, `#${r.sequence}`)),
    h('div', { class: 'd-actions' },
      // A broadcast has no device token, and its request is not a device push to copy.
      r.broadcast ? null : h('button', { type: 'button', class: 'btn small', title: 'Everything sent to this token (t)', onclick: () => setFilter('token', r.token) }, 'All pushes to this token'),
      canTap ? h('button', { type: 'button', class: 'btn small', title: 'The user taps the notification', onclick: async () => {
        const t = await act(api('POST', `/api/v1/devices/${enc(device)}/tap`, { apnsId: r.apnsId }));
        if (t) toast(`Tapped: ${t.callbacks.join(', ') || 'no callbacks'}${t.launched ? ' (app launched)' : ''}`);
      } }, 'Tap it on the device') : null,
      r.pushType === 'liveactivity' && device ? h('button', { type: 'button', class: 'btn small', title: 'The Live Activities on the device as it shows them now', onclick: () => showActivitiesOf(device) }, 'Live Activities on the device →') : null,
      r.broadcast ? null : h('button', { type: 'button', class: 'btn small ghost', id: 'copy-curl', title: 'A curl command that sends this request again ($APNS_JWT for the provider token)', onclick: () => copyCurl(r) }, 'Copy cURL'),
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
    presentationSection(r),
    section('log', 'Delivery log', 'as the Push Notifications Console shows it', deliveryLog(r)),
    section('payload', 'Payload', `${bytes(r.payloadSize)}${r.payloadTruncated ? ` · cut: the first ${bytes(byteLength(r.payload))} kept` : typeof r.payload === 'string' ? ' · not JSON' : ''}`, sizeBar(r), h('div', { id: 'payload-json' }, jsonView(r.payload))),
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

/** The UTF-8 size of a payload as the journal keeps it (text when it is not whole JSON). */
function byteLength(payload) {
  return new TextEncoder().encode(typeof payload === 'string' ? payload : JSON.stringify(payload)).length;
}
