// A device card's switches and Notification Center (GET /api/v1/devices/{id}/notification-center):
// the Focus, the scheduled summary (its times, the next one, how many wait for it), the ring
// switch and the lock; the groups by app and thread-id, most recent first, each as a stack with
// its newest notification on top and its summary line; the summarized notifications and those
// waiting for the summary. Fetched like the Live Activities: the first devices, each 4 s while the
// Devices tab is open, and soon after a push to one of them.
// May import: the helpers (dom, format, liveactivity, presentation, api, clock, state), notification, and
// the views its controls lead to: navigation, refresh, timeline.

import { api, enc, freshAnswer } from './api.js';
import { emulatorNowMs, lockFace } from './clock.js';
import { $$, h } from './dom.js';
import { fmtDuration, pad } from './format.js';
import { appName } from './liveactivity.js';
import { showTab } from './navigation.js';
import { cardLine, notifCard } from './notification.js';
import { deviceClock, focusTitle, utcOffset } from './presentation.js';
import { act } from './refresh.js';
import { state } from './state.js';
import { select } from './timeline.js';
import { toast } from './widgets.js';

// As many devices as have their Live Activities fetched; groups drawn on the phone (all are in the table).
const MAX_CENTER_DEVICES = 50;
const MAX_PHONE_GROUPS = 5;

/** Fetches the Notification Center of the first devices shown and re-renders those that changed. */
export async function refreshCenters(only) {
  const first = state.devices.slice(0, MAX_CENTER_DEVICES).map((d) => d.deviceId);
  const ids = only ? first.filter((id) => id === only) : first;
  await Promise.all(ids.map(async (id) => {
    const data = await freshAnswer(`center:${id}`, api('GET', `/api/v1/devices/${enc(id)}/notification-center`));
    if (!data) return;
    state.centers.set(id, data);
    const device = state.devices.find((d) => d.deviceId === id);
    const line = $$('#devices .device-attention').find((el) => el.dataset.device === id);
    if (line && device) line.replaceWith(attentionLine(device));
    const box = $$('#devices .nc').find((el) => el.dataset.device === id);
    if (box) box.replaceWith(centerSection(id));
  }));
  for (const id of state.centers.keys()) if (!state.devices.some((d) => d.deviceId === id)) state.centers.delete(id);
}

let timer = null;
const touched = new Set();
/** A record for a device came: its Notification Center again soon (once for a burst). */
export function noteCenterRecord(r) {
  if (state.tab !== 'devices' || !r.deviceId) return;
  touched.add(r.deviceId);
  clearTimeout(timer);
  timer = setTimeout(() => { for (const id of touched) refreshCenters(id); touched.clear(); }, 250);
}

/** The device's switches: Focus, scheduled summary, ring switch and lock (the last two can be flipped here). */
export function attentionLine(d) {
  const base = `/api/v1/devices/${enc(d.deviceId)}`;
  const center = state.centers.get(d.deviceId);
  const f = d.focus, s = d.scheduledSummary;
  const waiting = center ? (center.waitingForSummary || []).length : null;
  const next = center && center.nextSummaryAt;
  const toggle = (field, label, title) => h('label', { class: 'small', title },
    h('input', { type: 'checkbox', checked: !!d[field], dataset: { field, device: d.deviceId },
      onchange: (e) => act(api('PATCH', base, { [field]: e.target.checked }), `${label} ${e.target.checked ? 'on' : 'off'}`) }), ` ${label}`);
  return h('div', { class: 'device-attention', dataset: { device: d.deviceId } },
    h('span', { class: 'muted small' }, 'Focus'),
    f ? h('span', { class: 'badge s-focus', dataset: { field: 'focus' }, title: focusTitle(f) }, `☾ ${f.name}`)
      : h('span', { class: 'badge s-grey', dataset: { field: 'focus' }, title: 'No Focus: set one with PATCH /api/v1/devices/{id} {"focus": …}' }, 'off'),
    f ? h('button', { type: 'button', class: 'btn small ghost', dataset: { action: 'focus-off' }, onclick: () => act(api('PATCH', base, { focus: null }), 'Focus off') }, 'Turn off') : null,
    h('span', { class: 'muted small sep' }, 'Scheduled summary'),
    s ? h('span', { class: 'summary-state', dataset: { field: 'scheduledSummary' }, title: `apps: ${(s.apps || []).join(', ') || 'none'}` },
      h('b', null, (s.times || []).join(' · ')), ` ${utcOffset(s.utcOffsetMinutes)}`,
      next ? h('span', { dataset: { field: 'nextSummary' } }, ` · next ${deviceClock(next, s.utcOffsetMinutes)} (in ${fmtDuration((Date.parse(next) - emulatorNowMs()) / 1000)})`) : null,
      waiting != null ? h('span', { dataset: { field: 'waiting' } }, ` · ${waiting} waiting`) : null)
      : h('span', { class: 'badge s-grey', dataset: { field: 'scheduledSummary' } }, 'off'),
    h('span', { class: 'spacer' }),
    toggle('muted', 'Silent', 'The ring/silent switch on silent: no sounds, except critical alerts'),
    toggle('locked', 'Locked', 'Actions that need authentication are refused until it is unlocked'));
}

/** "now", "4m ago", or the time of day. */
function ago(iso) {
  const at = Date.parse(iso || '');
  if (isNaN(at)) return '';
  const s = (emulatorNowMs() - at) / 1000;
  if (s < 60) return 'now';
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  const d = new Date(at);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** Shows an entry's record in the Notifications tab, when the page has it. */
function openRecord(apnsId) {
  const r = [...state.records.values()].find((x) => x.apnsId === apnsId);
  if (!r) { toast('That record is not among those loaded in the Notifications tab (its filters).', true); return; }
  showTab('timeline');
  select(r.sequence, { scroll: true });
}

/** The card of a listed notification (an entry of the route's answer). */
function entryCard(n, badge) {
  const p = n.presentation || {};
  return notifCard({ bundleId: n.bundleId, title: n.bundleId, when: ago(n.deliveredAt), badge },
    cardLine('notif-title', p.title), cardLine('notif-subtitle', p.subtitle), cardLine('notif-body', p.body));
}

/** The phone's Notification Center at the emulator's time: a stack per group, its newest notification on top. */
function phone(c) {
  const groups = c.groups || [];
  const offset = c.scheduledSummary ? c.scheduledSummary.utcOffsetMinutes || 0 : undefined;
  const face = lockFace(offset);
  return h('div', { class: 'lock nc-lock', dataset: offset === undefined ? {} : { utcOffset: offset } },
    h('div', { class: 'lock-clock' }, face.clock),
    h('div', { class: 'lock-date' }, c.focus ? `☾ ${c.focus.name}` : face.date),
    groups.slice(0, MAX_PHONE_GROUPS).map((g) => h('div', { class: 'nc-stack', dataset: { bundle: g.bundleId, thread: g.threadId ?? '' },
      title: `${g.bundleId} · ${g.threadId == null ? 'no thread-id' : `thread ${g.threadId}`} · ${g.count}`, onclick: () => openRecord(g.notifications[0].apnsId) },
    // The cards under the newest show as an edge below it.
    h('div', { class: `nc-cards${g.count > 1 ? ' stacked' : ''}` }, entryCard(g.notifications[0], (c.badges || {})[g.bundleId])),
    g.summary ? h('div', { class: 'nc-summary', dataset: { field: 'summary' } }, g.summary) : null)),
    groups.length > MAX_PHONE_GROUPS ? h('div', { class: 'lock-silent' }, `+${groups.length - MAX_PHONE_GROUPS} more groups`) : null,
    groups.length ? null : h('div', { class: 'lock-silent' }, 'No notifications.'));
}

/** Every group: app, thread, count, summary line and its notifications newest first. */
function groupTable(groups) {
  return h('table', { class: 'grid nc-groups' },
    h('thead', null, h('tr', null, ['App', 'Thread', 'Count', 'Summary line', 'Newest first'].map((x) => h('th', { class: x === 'Count' ? 'num' : null }, x)))),
    h('tbody', null, groups.map((g) => h('tr', { dataset: { bundle: g.bundleId, thread: g.threadId ?? '' } },
      h('td', { class: 'bundle' }, g.bundleId),
      h('td', { class: 'mono' }, g.threadId ?? h('span', { class: 'muted' }, 'none')),
      h('td', { class: 'num', dataset: { field: 'count' } }, String(g.count)),
      h('td', { dataset: { field: 'summary' } }, g.summary || h('span', { class: 'muted' }, '—')),
      h('td', null, g.notifications.map((n) => entryLine(n)))))));
}

/** One notification in a line: its title and body, a click opens its record. */
function entryLine(n, extra) {
  const p = n.presentation || {};
  return h('button', { type: 'button', class: 'nc-entry', dataset: { apnsId: n.apnsId }, title: `${n.apnsId}: open its record`, onclick: () => openRecord(n.apnsId) },
    p.title ? h('b', null, p.title) : null, p.title && p.body ? ' ' : null, p.body || (p.title ? '' : appName(n.bundleId)), extra || null);
}

/** The summary's notifications: delivered in one (summarized) or waiting for it. */
function summaryList(title, list, field, c) {
  if (!list.length) return null;
  const offset = c.scheduledSummary ? c.scheduledSummary.utcOffsetMinutes : 0;
  return h('div', { class: 'nc-part', dataset: { field } },
    h('h4', null, title, h('span', { class: 'muted' }, ` (${list.length}, most relevant first)`)),
    h('ol', { class: 'nc-list' }, list.map((n) => {
      const p = n.presentation || {};
      return h('li', { dataset: { apnsId: n.apnsId } }, h('span', { class: 'bundle' }, appName(n.bundleId)), ' ', entryLine(n),
        h('span', { class: 'muted small' }, p.relevanceScore != null ? ` · relevance ${p.relevanceScore}` : '',
          p.heldUntil ? ` · held until ${deviceClock(p.heldUntil, offset)}` : ''));
    })));
}

/** The card's Notification Center part, from what was last fetched (hidden until then, or when it is empty). */
export function centerSection(deviceId) {
  const c = state.centers.get(deviceId);
  const root = h('div', { class: 'nc', dataset: { device: deviceId } });
  if (!c && state.devices.findIndex((d) => d.deviceId === deviceId) >= MAX_CENTER_DEVICES) {
    root.append(h('p', { class: 'muted small', dataset: { field: 'centerNotShown' } },
      `The Notification Center is drawn for the first ${MAX_CENTER_DEVICES} devices only: this one's is at GET /api/v1/devices/{id}/notification-center.`));
    return root;
  }
  const groups = c ? c.groups || [] : [];
  const waiting = c ? c.waitingForSummary || [] : [];
  const summarized = c ? c.summarized || [] : [];
  if (!groups.length && !waiting.length && !summarized.length) { root.hidden = true; return root; }
  const total = groups.reduce((n, g) => n + g.count, 0);
  const next = c.nextSummaryAt;
  const offset = c.scheduledSummary ? c.scheduledSummary.utcOffsetMinutes : 0;
  root.append(
    h('div', { class: 'live-head' }, h('h3', null, 'Notification Center'),
      h('span', { class: 'muted small' }, `${total} notification${total === 1 ? '' : 's'} in ${groups.length} group${groups.length === 1 ? '' : 's'}, most recent first`)),
    h('div', { class: 'live-body' }, phone(c),
      h('div', { class: 'nc-side' },
        groups.length ? groupTable(groups) : null,
        summaryList('Summarized', summarized, 'summarized', c),
        summaryList(`Waiting for the summary${next ? ` at ${deviceClock(next, offset)} ${utcOffset(offset)}` : ''}`, waiting, 'waitingForSummary', c))));
  return root;
}
