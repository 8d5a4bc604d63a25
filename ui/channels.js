// The Channels tab: the broadcast channels made through the channel management API (GET
// /api/v1/channels), live and deleted, filtered by app, environment and state; the selected
// channel's stored message and its broadcasts as the journal has them (GET
// /api/v1/notifications: liveactivity records whose "broadcast" names the channel), with whom
// each reached.
// May import: the helpers (dom, format, liveactivity, widgets, api, state) and the views its
// buttons lead to: activities, checks.

import { showActivitiesOf } from './activities.js';
import { api, freshAnswer } from './api.js';
import { showRecord } from './checks.js';
import { $, h } from './dom.js';
import { fmtDateTime, fmtInt } from './format.js';
import { policyName, storedPreview } from './liveactivity.js';
import { state } from './state.js';
import { copyBtn, envBadge, jsonView, kv, outcomeBadge, statusPill } from './widgets.js';

const MAX_CHANNEL_ROWS = 500; // channels shown (an app may have 10,000 per environment)
// Broadcasts are looked for among the newest liveactivity records: the journal has no
// channel filter, so the page filters, and a bounded page keeps that cheap.
export const BROADCAST_SCAN = 500;
const MAX_BROADCAST_ROWS = 100;

const MAX_CHANNEL_PAGES = 3; // the list answers pages of up to 10,000; more than 30,000 are not read

/** Every channel, page by page (oldest first), up to MAX_CHANNEL_PAGES pages; `more` when cut. */
async function allChannels() {
  let channels = [];
  let cursor = null;
  for (let page = 0; page < MAX_CHANNEL_PAGES; page++) {
    const data = await api('GET', `/api/v1/channels?limit=10000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    channels = channels.concat(data.channels || []);
    cursor = data.nextCursor;
    if (!cursor) return { channels, more: false };
  }
  return { channels, more: true };
}

/** Fetches the channels (and the selected one's broadcasts) and re-renders what changed. */
export async function refreshChannels() {
  const data = await freshAnswer('channels', allChannels(), (d) => d.channels);
  if (data) {
    state.channels = data.channels || [];
    state.channelsCut = data.more;
    $('#count-channels').textContent = state.channels.filter((c) => c.live).length;
    fillBundles();
    renderChannels();
  }
  if (state.tab === 'channels' && state.selectedChannel) await refreshBroadcasts();
}

let channelTimer = null;
/** A liveactivity record came (a broadcast among them): the list and the broadcasts again soon. */
export function noteBroadcastRecord(r) {
  if (state.tab !== 'channels' || !r.broadcast) return;
  clearTimeout(channelTimer);
  channelTimer = setTimeout(refreshChannels, 250);
}

/** A channel was created, deleted or published to (`event: channel`): the list and the tab's
 * count again soon, whichever tab is shown (the count is in the tab bar). */
export function noteChannelEvent() {
  clearTimeout(channelTimer);
  channelTimer = setTimeout(refreshChannels, 250);
}

/** The app filter offers the apps that have channels. */
function fillBundles() {
  const select = $('#channels-filter').elements.bundleId;
  const bundles = [...new Set(state.channels.map((c) => c.bundleId))].sort();
  const current = select.value;
  select.replaceChildren(h('option', { value: '' }, 'every app'), ...bundles.map((b) => h('option', { value: b, selected: b === current }, b)));
  if (current && !bundles.includes(current)) select.append(h('option', { value: current, selected: true }, current));
}

function matches(c) {
  const f = $('#channels-filter').elements;
  return (!f.bundleId.value || c.bundleId === f.bundleId.value) && (!f.environment.value || c.environment === f.environment.value)
    && (!f.live.value || (f.live.value === 'live') === c.live);
}

/** The table, newest first. */
function renderChannels() {
  const shown = state.channels.filter(matches).reverse();
  const rows = shown.slice(0, MAX_CHANNEL_ROWS);
  $('#channel-rows').replaceChildren(...rows.map((c) => h('tr', {
    class: c.id === state.selectedChannel ? 'selected' : null, dataset: { channel: c.id }, onclick: () => selectChannel(c.id),
    // Reachable with Tab; Enter opens it, as a click does.
    tabindex: 0, onkeydown: (e) => { if (e.key === 'Enter' && e.target === e.currentTarget) selectChannel(c.id); },
  },
  h('td', { class: 'mono ch-id', title: c.id }, c.id, ' ', copyBtn(c.id)),
  h('td', { class: 'bundle' }, c.bundleId),
  h('td', null, envBadge(c.environment)),
  h('td', { dataset: { field: 'policy' }, title: `apns-channel-message-storage-policy: ${c.messageStoragePolicy}` }, policyName(c.messageStoragePolicy)),
  h('td', { class: 'small' }, fmtDateTime(c.createdAt)),
  h('td', null, c.live ? h('span', { class: 'badge s-ok' }, 'live') : h('span', { class: 'badge s-grey', title: `deleted ${fmtDateTime(c.deletedAt)}` }, 'deleted')),
  h('td', { class: 'num', dataset: { field: 'subscribers' }, title: 'Live Activities subscribed to the channel' }, c.subscribers == null ? '—' : fmtInt(c.subscribers)),
  h('td', { class: 'num', dataset: { field: 'broadcasts' } }, fmtInt(c.broadcasts || 0)),
  h('td', { class: 'small' }, c.lastBroadcastAt ? fmtDateTime(c.lastBroadcastAt) : '—'),
  h('td', { class: 'ch-stored', dataset: { field: 'stored' }, title: c.storedMessage ? JSON.stringify(c.storedMessage.payload) : '' },
    c.storedMessage ? storedPreview(c.storedMessage) : h('span', { class: 'muted' }, c.messageStoragePolicy === 1 ? 'none yet' : '—')))));
  const empty = $('#channels-empty');
  empty.hidden = shown.length > 0;
  empty.textContent = state.channels.length ? 'No channel matches these filters.' : '';
  if (!state.channels.length) {
    empty.append(h('div', null, 'No broadcast channels yet.'),
      h('div', { class: 'small' }, 'Make one through the channel management API (', h('code', null, 'apns-emulator channels create --bundle BUNDLE'),
        ', or POST /1/apps/{bundleId}/channels on the channel listener), then broadcast with ', h('code', null, 'apns-emulator send --channel ID'), '.'));
  }
  $('#channels-shown').textContent = (shown.length > rows.length ? `The newest ${rows.length} of ${fmtInt(shown.length)} matching channels.`
    : shown.length ? `${shown.length} channel${shown.length === 1 ? '' : 's'}` : '')
    + (state.channelsCut ? ` Only the oldest ${fmtInt(state.channels.length)} channels were read; the admin API lists the rest page by page.` : '');
  renderChannelDetail();
}

async function selectChannel(id) {
  state.selectedChannel = state.selectedChannel === id ? null : id;
  for (const tr of $('#channel-rows').children) tr.classList.toggle('selected', tr.dataset.channel === state.selectedChannel);
  state.broadcasts = null;
  renderChannelDetail();
  if (state.selectedChannel) await refreshBroadcasts();
}

let broadcastAsk = 0;
/** The selected channel's broadcasts among the newest liveactivity records; re-rendered when they changed. */
async function refreshBroadcasts() {
  const id = state.selectedChannel, mine = ++broadcastAsk;
  let data;
  try { data = await api('GET', `/api/v1/notifications?pushType=liveactivity&limit=${BROADCAST_SCAN}`); } catch { return; }
  if (mine !== broadcastAsk || state.selectedChannel !== id) return;
  const list = (data.notifications || []).filter((r) => r.broadcast && r.broadcast.channel === id);
  const json = JSON.stringify(list);
  if (state.broadcasts && state.broadcasts.channel === id && state.broadcasts.json === json) return;
  state.broadcasts = { channel: id, scanned: data.notifications.length, list, json };
  renderChannelDetail();
}

/** Outcomes as chips: delivered 3, ignored 1. */
const outcomeChips = (outcomes) => Object.entries(outcomes || {}).filter(([, n]) => n).map(([o, n]) =>
  h('span', { class: 'chip', dataset: { outcome: o } }, outcomeBadge(o), ' ', h('b', null, fmtInt(n))));

function broadcastRow(r) {
  const b = r.broadcast;
  const deliveries = b.deliveries || [];
  return h('tbody', { class: 'broadcast', dataset: { apnsId: r.apnsId } },
    h('tr', null,
      h('td', { class: 'small' }, fmtDateTime(r.receivedAt)),
      h('td', null, h('button', { type: 'button', class: 'tok', title: 'Show the record in the timeline', onclick: () => showRecord(r.sequence, r.apnsId) }, r.apnsId)),
      h('td', null, statusPill(r.status), r.reason ? ` ${r.reason}` : ''),
      h('td', { class: 'num', dataset: { field: 'reached' } }, b.reached == null ? '—' : fmtInt(b.reached)),
      h('td', null, outcomeChips(b.outcomes))),
    deliveries.length ? h('tr', { class: 'deliveries' }, h('td', { colspan: 5 },
      h('details', null, h('summary', { class: 'small' }, b.deliveriesOmitted ? `the first ${deliveries.length} of ${fmtInt(deliveries.length + b.deliveriesOmitted)} deliveries` : `${deliveries.length} deliver${deliveries.length === 1 ? 'y' : 'ies'}`),
        h('table', { class: 'grid' }, h('tbody', null, deliveries.map((d) => h('tr', null,
          h('td', null, h('button', { type: 'button', class: 'tok', title: 'This device\'s Live Activities', onclick: () => showActivitiesOf(d.deviceId) }, d.deviceId)),
          h('td', { class: 'mono small' }, d.activityId || '—'), h('td', null, outcomeBadge(d.outcome)), h('td', { class: 'small' }, d.explanation || '')))))))) : null);
}

/** The selected channel: its facts, stored message and broadcasts. */
function renderChannelDetail() {
  const pane = $('#channel-detail');
  const c = state.channels.find((x) => x.id === state.selectedChannel);
  if (!c) { pane.hidden = true; pane.replaceChildren(); return; }
  pane.hidden = false;
  const b = state.broadcasts && state.broadcasts.channel === c.id ? state.broadcasts : null;
  const list = b ? b.list.slice().reverse().slice(0, MAX_BROADCAST_ROWS) : [];
  const stored = c.storedMessage;
  pane.replaceChildren(
    h('div', { class: 'bar' }, h('h2', null, 'Channel ', h('span', { class: 'mono' }, c.id), ' ', copyBtn(c.id)),
      h('span', { class: 'muted small' }, `${c.bundleId} · ${c.environment} · ${policyName(c.messageStoragePolicy)}`)),
    h('div', { class: 'channel-grid' },
      h('div', null,
        kv([['State', c.live ? 'live' : `deleted ${fmtDateTime(c.deletedAt)}`], ['Created', fmtDateTime(c.createdAt)],
          ['Subscribers', c.subscribers == null ? null : fmtInt(c.subscribers)], ['Broadcasts', fmtInt(c.broadcasts || 0)],
          ['Last broadcast', c.lastBroadcastAt ? fmtDateTime(c.lastBroadcastAt) : null]]),
        h('h3', { class: 'ch-sub' }, 'Stored message'),
        stored ? [kv([['Received', fmtDateTime(stored.receivedAt)], ['Expires', fmtDateTime(stored.expiresAt)], ['Request id', h('span', { class: 'mono' }, stored.requestId)]]),
          h('div', { id: 'channel-stored' }, jsonView(stored.payload))]
          : h('div', { class: 'muted small' }, c.messageStoragePolicy === 1 ? 'None yet: the newest broadcast is kept (up to 8 hours) for activities that subscribe later.' : 'No Message Stored: a broadcast reaches only the activities subscribed when it is sent.')),
      h('div', null,
        h('h3', { class: 'ch-sub' }, 'Broadcasts ', h('span', { class: 'muted' }, `among the newest ${BROADCAST_SCAN} liveactivity records of the journal`)),
        !b ? h('div', { class: 'muted small' }, 'Loading…')
          : list.length ? h('table', { class: 'grid broadcasts', id: 'channel-broadcasts' },
            h('thead', null, h('tr', null, ['Time', 'apns-request-id', 'Status', 'Reached', 'Outcomes'].map((x, i) => h('th', { class: i === 3 ? 'num' : null }, x)))), list.map(broadcastRow))
            : h('div', { class: 'muted small', id: 'channel-broadcasts-empty' }, c.broadcasts
              ? `${fmtInt(c.broadcasts)} broadcast${c.broadcasts === 1 ? '' : 's'} counted; none with its reach among the newest ${fmtInt(b.scanned)} liveactivity records (records age out of the journal, and a reset or DELETE /api/v1/notifications removes them).`
              : 'Nothing broadcast on this channel yet.'))));
}

export function wireChannels() {
  $('#channels-filter').addEventListener('change', renderChannels);
}
