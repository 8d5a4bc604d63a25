// A device card's Live Activities (GET /api/v1/devices/{id}/activities): each activity as the
// device shows it — a card on the Lock Screen, the Dynamic Island compact and expanded — in
// the order of its relevance, active, stale or ended; the user dismissing one; the dismissed
// ones; the push-to-start token of each attributes type the device's apps declare.
// May import: the helpers (dom, format, liveactivity, widgets, api, clock, state) and the views its
// buttons lead to: devices, filters, navigation, refresh.

import { api, enc, freshAnswer } from './api.js';
import { lockFace } from './clock.js';
import { $$, h } from './dom.js';
import { refreshDevices } from './devices.js';
import { setFilter } from './filters.js';
import { fmtDateTime, pad, shortToken } from './format.js';
import { appName, byRelevance, display, labelled, onLockScreen, running } from './liveactivity.js';
import { showTab } from './navigation.js';
import { act } from './refresh.js';
import { state } from './state.js';
import { copyBtn } from './widgets.js';

// Each device's activities are a request of their own: the first devices only, each 4 s
// while the Devices tab is open (and soon after a liveactivity push to one of them).
export const MAX_ACTIVITY_DEVICES = 50;
// Values shown on a Lock Screen card, and in the expanded Island (the rest: "+N more").
const MAX_CARD_VALUES = 6;
const MAX_ISLAND_VALUES = 4;

const STATE_CLASS = { active: 's-ok', stale: 's-warn', ended: 's-grey', dismissed: 's-grey' };
const hhmm = (iso) => { const d = new Date(iso); return isNaN(d) ? '—' : `${pad(d.getHours())}:${pad(d.getMinutes())}`; };

/** Fetches the activities of the first devices shown (all at once) and re-renders those that changed. */
export async function refreshActivities(only) {
  const ids = (only ? [only] : state.devices.slice(0, MAX_ACTIVITY_DEVICES).map((d) => d.deviceId))
    .filter((id) => state.devices.slice(0, MAX_ACTIVITY_DEVICES).some((d) => d.deviceId === id));
  await Promise.all(ids.map(async (id) => {
    const data = await freshAnswer(`activities:${id}`, api('GET', `/api/v1/devices/${enc(id)}/activities`));
    if (!data) return;
    state.activities.set(id, data);
    const box = $$('#devices .live').find((el) => el.dataset.device === id);
    if (box) box.replaceWith(liveSection(id));
  }));
  // Devices that went away take their activities with them.
  for (const id of state.activities.keys()) if (!state.devices.some((d) => d.deviceId === id)) state.activities.delete(id);
}

let liveTimer = null;
const touched = new Set();
/** A liveactivity record came: that device's activities again soon (once for a burst). */
export function noteLiveRecord(r) {
  if (state.tab !== 'devices' || !r.deviceId) return;
  touched.add(r.deviceId);
  clearTimeout(liveTimer);
  liveTimer = setTimeout(() => { for (const id of touched) refreshActivities(id); touched.clear(); }, 250);
}

/** Shows the Devices tab scrolled to a device's Live Activities. */
export async function showActivitiesOf(deviceId) {
  showTab('devices');
  await refreshDevices(); // a device made a moment ago may not be listed yet
  await refreshActivities(deviceId);
  const box = $$('#devices .live').find((el) => el.dataset.device === deviceId);
  if (box) box.scrollIntoView({ block: 'start', behavior: 'smooth' });
}

/** The card's Live Activities part, from what was last fetched (empty until then, or when the device has none). */
export function liveSection(deviceId) {
  const data = state.activities.get(deviceId);
  const root = h('div', { class: 'live', dataset: { device: deviceId } });
  if (!data || (!(data.activities || []).length && !(data.apps || []).length)) { root.hidden = true; return root; }
  const all = byRelevance(data.activities || []);
  const shown = all.filter(onLockScreen);
  const dismissed = all.filter((a) => !onLockScreen(a));
  const island = shown.find(running);
  const base = `/api/v1/devices/${enc(deviceId)}`;
  root.append(
    h('div', { class: 'live-head' }, h('h3', null, 'Live Activities'),
      h('span', { class: 'muted small' }, shown.length ? `${shown.length} on the Lock Screen, most relevant first` : 'none on the Lock Screen',
        dismissed.length ? ` · ${dismissed.length} dismissed` : '')),
    h('div', { class: 'live-body' },
      lockScreen(shown, deviceId),
      h('div', { class: 'live-list' },
        shown.length ? shown.map((a, i) => activityRow(a, i + 1, a === island, base))
          : h('div', { class: 'muted small live-none' }, 'No Live Activity on the Lock Screen. Start one with a push to a push-to-start token below, or from the app (POST /api/v1/devices/{id}/apps/{bundleId}/activities).'),
        dismissed.length ? dismissedList(dismissed) : null,
        startTokens(data.apps || []))));
  return root;
}

/** The phone's Lock Screen with a card per activity still on it, at the emulator's time (in the
 * device's zone when its scheduled summary gives one). */
function lockScreen(shown, deviceId) {
  const summary = (state.devices.find((d) => d.deviceId === deviceId) || {}).scheduledSummary;
  const offset = summary ? summary.utcOffsetMinutes || 0 : undefined;
  const face = lockFace(offset);
  return h('div', { class: 'lock live-lock', dataset: offset === undefined ? { field: 'lockScreen' } : { field: 'lockScreen', utcOffset: offset } },
    h('div', { class: 'lock-clock' }, face.clock),
    h('div', { class: 'lock-date' }, face.date),
    shown.length ? shown.map(lockCard) : h('div', { class: 'lock-silent' }, 'No Live Activities.'));
}

/** The attributes (fixed for the activity's life) as the header's values. */
function headerValues(a) {
  const values = labelled(a.attributes);
  return values.length ? h('span', { class: 'la-attrs', dataset: { field: 'attributes' } },
    values.map(([label, text], i) => [i ? ' · ' : null, h('span', { title: label, dataset: { label } }, text)])) : null;
}

/** The content state as labelled values, at most `max` of them. */
function values(a, max, cls) {
  const pairs = labelled(a.contentState);
  const cut = pairs.slice(0, max);
  return h('div', { class: cls, dataset: { field: 'contentState' } },
    cut.map(([label, text, key]) => h('div', { class: 'la-value', dataset: { key }, title: `${key}: ${text}` },
      h('div', { class: 'la-label' }, label), h('div', { class: 'la-text' }, text))),
    pairs.length > max ? h('div', { class: 'la-value la-more' }, `+${pairs.length - max} more`) : null,
    pairs.length ? null : h('div', { class: 'la-value la-more' }, 'no content state'));
}

/** Stale and ended say so, with their time. */
function stateNote(a) {
  if (a.state === 'stale') {
    return h('div', { class: 'la-note' }, h('span', { class: 'la-badge stale', dataset: { field: 'stale' } }, 'stale'),
      a.staleDate ? ` out of date since ${hhmm(a.staleDate)}` : null);
  }
  if (a.state === 'ended') {
    return h('div', { class: 'la-note' }, h('span', { class: 'la-badge ended', dataset: { field: 'ended' } }, 'ended'),
      a.endedAt ? ` at ${hhmm(a.endedAt)}` : null, a.dismissalDate ? ` · leaves the Lock Screen at ${hhmm(a.dismissalDate)}` : null);
  }
  return null;
}

function lockCard(a) {
  const name = appName(a.bundleId);
  return h('div', { class: `la-card ${a.state}`, dataset: { activity: a.activityId, state: a.state }, title: `${a.attributesType} ${a.activityId}` },
    h('div', { class: 'la-card-head' },
      h('span', { class: 'app-icon' }, name.slice(0, 1).toUpperCase()),
      h('span', { class: 'la-app' }, name), headerValues(a)),
    values(a, MAX_CARD_VALUES, 'la-values'),
    stateNote(a));
}

/** The Dynamic Island: compact (the first two values either side of the camera) and expanded. */
function islands(a, inIsland) {
  if (!running(a)) {
    return h('div', { class: 'di-off muted small' }, 'Ended: off the Dynamic Island; on the Lock Screen until ',
      a.dismissalDate ? fmtDateTime(a.dismissalDate) : 'it is removed', '.');
  }
  const pairs = labelled(a.contentState);
  const name = appName(a.bundleId);
  const icon = h('span', { class: 'di-icon' }, name.slice(0, 1).toUpperCase());
  const [lead, trail] = [pairs[0], pairs[1] || pairs[0]];
  return h('div', { class: `di-pair${a.state === 'stale' ? ' stale' : ''}` },
    h('div', { class: 'di-cell' }, h('div', { class: 'di-caption' }, 'compact', inIsland ? h('span', { class: 'badge s-info' }, 'in the Island') : null),
      h('div', { class: 'di-compact', dataset: { field: 'compact' }, title: 'the compact presentation: leading and trailing either side of the camera' },
        h('span', { class: 'di-lead' }, icon, lead ? h('span', { class: 'di-text', title: lead[0] }, lead[1]) : null),
        h('span', { class: 'di-camera' }),
        h('span', { class: 'di-trail' }, trail ? h('span', { class: 'di-text', title: trail[0] }, trail[1]) : null))),
    h('div', { class: 'di-cell' }, h('div', { class: 'di-caption' }, 'expanded'),
      h('div', { class: 'di-expanded', dataset: { field: 'expanded' } },
        h('div', { class: 'di-top' }, icon.cloneNode(true), h('span', { class: 'di-title' }, name, headerValues(a)),
          a.state === 'stale' ? h('span', { class: 'la-badge stale' }, 'stale') : null),
        values(a, MAX_ISLAND_VALUES, 'di-values'))));
}

/** One activity: its Dynamic Island, its facts and the dismiss button. */
function activityRow(a, rank, inIsland, base) {
  const facts = [
    ['Type', a.attributesType],
    ['Id', h('span', { class: 'mono' }, a.activityId)],
    ['Started', `${fmtDateTime(a.startedAt)} by ${a.startedBy === 'push' ? 'a push-to-start push' : 'the app'}`],
    ['Updates', String(a.updates ?? 0)],
    ['Relevance', a.relevanceScore == null ? 'none (counts as 0)' : display(a.relevanceScore)],
    a.staleDate ? ['Stale date', fmtDateTime(a.staleDate)] : null,
    a.endedAt ? ['Ended', fmtDateTime(a.endedAt)] : null,
    a.dismissalDate ? ['Dismissal', fmtDateTime(a.dismissalDate)] : null,
    a.pushToken ? ['Update token', h('span', { class: 'token-line' }, h('button', { type: 'button', class: 'tok', title: `Everything sent to ${a.pushToken}`, onclick: () => setFilter('token', a.pushToken) }, shortToken(a.pushToken)), copyBtn(a.pushToken))] : null,
    a.channel ? ['Channel', h('button', { type: 'button', class: 'tok', title: 'Show the channel', onclick: () => { state.selectedChannel = a.channel; showTab('channels'); } }, a.channel)] : null,
  ].filter(Boolean);
  return h('div', { class: `la-row ${a.state}`, dataset: { activity: a.activityId, state: a.state } },
    h('div', { class: 'la-row-head' },
      h('span', { class: 'la-rank', title: 'place on the Lock Screen: highest relevance-score first' }, `#${rank}`),
      h('b', null, a.attributesType), h('span', { class: 'muted small' }, a.bundleId),
      h('span', { class: `badge ${STATE_CLASS[a.state] || 's-grey'}`, dataset: { field: 'state' } }, a.state),
      h('span', { class: 'spacer' }),
      h('button', { type: 'button', class: 'btn small danger-outline', dataset: { action: 'dismiss', activity: a.activityId },
        title: 'The user swipes it away (DELETE …/activities/{activityId})',
        onclick: () => act(api('DELETE', `${base}/activities/${enc(a.activityId)}`), `${a.attributesType} dismissed`) }, 'Dismiss')),
    h('div', { class: 'la-row-body' }, islands(a, inIsland),
      h('dl', { class: 'kv la-facts' }, facts.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]))));
}

/** The dismissed ones, in a line each. */
function dismissedList(list) {
  return h('details', { class: 'la-dismissed' },
    h('summary', null, `Dismissed (${list.length})`),
    h('ul', null, list.map((a) => h('li', { dataset: { activity: a.activityId } },
      h('b', null, a.attributesType), ' ', h('span', { class: 'mono small' }, a.activityId),
      h('span', { class: 'muted small' }, a.endedAt ? ` · ended ${fmtDateTime(a.endedAt)}` : '', ` · ${a.updates ?? 0} updates`)))));
}

/** The push-to-start token of each attributes type, per app. */
function startTokens(apps) {
  if (!apps.length) return null;
  return h('table', { class: 'grid la-tokens' },
    h('thead', null, h('tr', null, ['App', 'Attributes type', 'Push-to-start token', ''].map((x) => h('th', null, x)))),
    h('tbody', null, apps.flatMap((app) => (app.types || []).map((type) => {
      const token = (app.pushToStartTokens || {})[type];
      return h('tr', { dataset: { bundle: app.bundleId, type } },
        h('td', { class: 'bundle' }, app.bundleId), h('td', null, type),
        h('td', { dataset: { field: 'pushToStartToken' } }, token ? h('span', { class: 'token-line' },
          h('button', { type: 'button', class: 'tok', title: `Everything sent to ${token}`, onclick: () => setFilter('token', token) }, shortToken(token)), copyBtn(token)) : '—'),
        h('td', { class: 'muted small' }, app.frequentUpdates ? 'frequent updates' : ''));
    }))));
}
