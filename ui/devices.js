// The Devices tab: a card per device (online, Low Power Mode, its account, its Focus, scheduled
// summary, ring switch and lock, its apps with their badge, tokens, permission, state and
// backend, its Notification Center and Live Activities), the "add a virtual device" form, and
// the datalists of topics, bundles and tokens the forms offer.
// May import: the helpers (dom, format, widgets, api, state), accounts, activities, center, and
// the views its buttons lead to: backend, calls, filters, refresh, timeline.

import { accountControls, accountDrafts, restoreAccountDrafts } from './accounts.js';
import { liveSection } from './activities.js';
import { api, enc, freshAnswer } from './api.js';
import { openBackend } from './backend.js';
import { fillCallDevices } from './calls.js';
import { attentionLine, centerSection } from './center.js';
import { $, h } from './dom.js';
import { setFilter } from './filters.js';
import { shortToken } from './format.js';
import { appName } from './liveactivity.js';
import { act } from './refresh.js';
import { state } from './state.js';
import { updateCounts } from './timeline.js';
import { confirmDialog, copyBtn, envBadge, toast } from './widgets.js';

const AUTHORIZATIONS = ['notDetermined', 'denied', 'authorized', 'provisional', 'ephemeral'];
const APP_STATES = ['foreground', 'background', 'suspended', 'notRunning', 'terminated'];

/** The cards drawn at most: a card with its apps' controls costs the browser about 15 ms to
 * build, and a change to any device draws them all again (1,000 froze the page for 15 s). */
const SHOWN_DEVICES = 100;

/** Fetches the devices (the first page) and re-renders when they changed. */
export async function refreshDevices() {
  // Do not pull a select from under the user's pointer; the next refresh catches up.
  const choosing = () => {
    const active = document.activeElement;
    return active && active.tagName === 'SELECT' && $('#devices').contains(active);
  };
  const data = await freshAnswer('devices', devicesWithPinned(), (d) => d.devices, choosing);
  if (!data) return;
  state.devices = data.devices;
  state.moreDevices = !!data.nextCursor;
  // Drawn while the tab is shown; else when it is next shown (showDevices).
  if (state.tab === 'devices') renderDevices(); else state.devicesDirty = true;
  fillDatalists();
  fillCallDevices();
  updateCounts();
}

/** Devices past the first page that this page shows anyway: added here, or looked up by id. */
const pinned = new Set();
const MAX_PINNED = 20;

/** The first page of devices, then the pinned ones it does not hold (one that is gone is unpinned). */
async function devicesWithPinned() {
  const page = await api('GET', `/api/v1/devices?limit=${SHOWN_DEVICES}`);
  const have = new Set(page.devices.map((d) => d.deviceId));
  const extra = [];
  for (const id of pinned) {
    if (have.has(id)) continue;
    try { extra.push(await api('GET', `/api/v1/devices/${enc(id)}`)); } catch (e) { if (e.status === 404) pinned.delete(id); }
  }
  return { devices: page.devices.concat(extra), nextCursor: page.nextCursor };
}

/** After a reset of the emulator the devices pinned here are gone. */
export function forgetPinnedDevices() { pinned.clear(); }

/** Shows a device past the first page too (the oldest pinned one makes room past MAX_PINNED). */
function pin(id) {
  pinned.delete(id);
  pinned.add(id);
  if (pinned.size > MAX_PINNED) pinned.delete(pinned.values().next().value);
}

/** "Show": a device by id, wherever it is in the list. */
async function findDevice(e) {
  e.preventDefault();
  const input = e.target.elements.deviceId;
  const id = input.value.trim();
  if (!id) return;
  try {
    await api('GET', `/api/v1/devices/${enc(id)}`);
  } catch (err) {
    toast(err.status === 404 ? `No device ${id}` : err.message, true);
    return;
  }
  pin(id);
  input.value = '';
  await refreshDevices();
  const card = [...document.querySelectorAll('#devices [data-device]')].find((c) => c.dataset.device === id);
  if (card) card.scrollIntoView({ block: 'nearest' });
}

/** The Devices tab is shown: draws the cards if they changed while it was hidden. */
export function showDevices() {
  if (state.devicesDirty) renderDevices();
}

/** The topics, bundles and tokens the forms' inputs suggest. */
function fillDatalists() {
  const topics = new Set(), bundles = new Set(), tokens = new Set();
  for (const d of state.devices) for (const app of d.apps) {
    bundles.add(app.bundleId);
    topics.add(app.bundleId);
    for (const t of Object.values(app.tokens || {})) tokens.add(t);
  }
  const fill = (id, values) => $(id).replaceChildren(...[...values].sort().map((v) => h('option', { value: v })));
  fill('#dl-topics', topics); fill('#dl-bundles', bundles); fill('#dl-tokens', tokens);
}

/** A card per device; what is typed into its account form survives. */
function renderDevices() {
  state.devicesDirty = false;
  const root = $('#devices');
  const kept = accountDrafts();
  if (!state.devices.length) { root.replaceChildren(h('div', { class: 'empty' }, 'No devices. Add a virtual device above, or connect one to the device socket.')); return; }
  root.replaceChildren(...state.devices.map((d) => {
    const base = `/api/v1/devices/${enc(d.deviceId)}`;
    const apps = d.apps.map((app) => {
      const appBase = `${base}/apps/${enc(app.bundleId)}`;
      const choose = (field, values, current) => h('select', { 'aria-label': field, dataset: { field, device: d.deviceId, bundle: app.bundleId },
        onchange: (e) => revertIfRefused(e.target, 'value', current, act(api('PATCH', appBase, { [field]: e.target.value }), `${field} → ${e.target.value}`)) },
      values.map((v) => h('option', { value: v, selected: v === current }, v)));
      return h('tr', { dataset: { bundle: app.bundleId } },
        h('td', null, h('div', { class: 'app-cell' },
          h('span', { class: 'app-icon', title: app.badge ? `${app.badge} on the icon` : 'no badge' }, appName(app.bundleId).slice(0, 1).toUpperCase(),
            app.badge ? h('span', { class: 'app-badge', dataset: { field: 'badge' } }, String(app.badge)) : null),
          h('div', null, h('div', { class: 'bundle' }, app.bundleId), envBadge(app.environment)))),
        h('td', null, Object.entries(app.tokens || {}).map(([kind, token]) => h('div', { class: 'token-line' },
          h('span', { class: 'kind' }, kind), h('button', { type: 'button', class: 'tok', title: `Everything sent to ${token}`, onclick: () => setFilter('token', token) }, shortToken(token)), copyBtn(token))),
          app.tokenUploadPending ? h('div', { class: 'upload-pending', dataset: { field: 'tokenUploadPending' },
            title: 'The app got this token while logged out; it uploads it to its backend (register hook) at the next login.' }, 'token not uploaded yet') : null),
        h('td', null, choose('authorization', AUTHORIZATIONS, app.authorization)),
        h('td', null, choose('appState', APP_STATES, app.appState)),
        h('td', null, h('label', { title: 'Background Modes: remote notifications' }, h('input', { type: 'checkbox', checked: app.backgroundMode,
          onchange: (e) => revertIfRefused(e.target, 'checked', app.backgroundMode, act(api('PATCH', appBase, { backgroundMode: e.target.checked }), `background mode ${e.target.checked ? 'on' : 'off'}`)) }), ' bg')),
        h('td', null, h('div', { class: 'app-actions' },
          h('button', { type: 'button', class: 'btn small ghost', dataset: { action: 'backend', bundle: app.bundleId }, title: `The backend hooks of ${app.bundleId}`, onclick: () => openBackend(app.bundleId) }, 'Backend…'),
          h('button', { type: 'button', class: 'btn small', title: 'APNs issues new tokens; the old ones stop working', onclick: () => act(api('POST', `${appBase}/rotate`), 'Token rotated') }, 'Rotate'),
          h('button', { type: 'button', class: 'btn small', title: 'Uninstall and install again: new token', onclick: () => act(api('POST', `${appBase}/reinstall`), 'Reinstalled') }, 'Reinstall'),
          h('button', { type: 'button', class: 'btn small danger-outline', onclick: async () => {
            if (await confirmDialog(`Uninstall ${app.bundleId} from ${d.deviceId}? Its tokens become Unregistered (410).`, 'Uninstall')) act(api('DELETE', appBase), 'Uninstalled');
          } }, 'Uninstall'))));
    });
    return h('div', { class: 'card device', dataset: { device: d.deviceId } },
      h('div', { class: 'device-head' }, h('span', { class: 'name' }, d.deviceId),
        h('span', { class: `badge ${d.online ? 's-ok' : 's-grey'}` }, d.online ? 'online' : 'offline'),
        h('span', { class: 'badge s-grey' }, d.virtual ? 'virtual' : d.connected ? 'socket connected' : 'socket disconnected'),
        d.lowPowerMode ? h('span', { class: 'badge s-warn' }, 'Low Power Mode') : null,
        h('span', { class: 'spacer' }),
        h('button', { type: 'button', class: 'btn small', dataset: { action: 'online' }, onclick: () => act(api('PATCH', base, { online: !d.online }), d.online ? 'Device offline' : 'Device online') }, d.online ? 'Go offline' : 'Go online'),
        h('label', { class: 'small' }, h('input', { type: 'checkbox', checked: d.lowPowerMode, onchange: (e) => revertIfRefused(e.target, 'checked', d.lowPowerMode, act(api('PATCH', base, { lowPowerMode: e.target.checked }), `Low Power Mode ${e.target.checked ? 'on' : 'off'}`)) }), ' Low Power'),
        h('button', { type: 'button', class: 'btn small ghost', onclick: () => setFilter('deviceId', d.deviceId) }, 'Pushes →')),
      accountControls(d, base),
      attentionLine(d),
      d.apps.length ? h('table', { class: 'grid apps' }, h('thead', null, h('tr', null, ['App', 'Tokens', 'Permission', 'App state', 'Mode', ''].map((x) => h('th', null, x)))), h('tbody', null, apps))
        : h('div', { class: 'muted' }, 'No apps installed.'),
      centerSection(d.deviceId),
      liveSection(d.deviceId));
  }));
  restoreAccountDrafts(kept);
  // The UI shows the first page; the admin API lists the rest page by page.
  if (state.moreDevices) root.append(h('div', { class: 'muted small' }, `The first ${SHOWN_DEVICES} devices, oldest first, and those added or shown here (Show device); the admin API lists the rest page by page (GET /api/v1/devices?cursor=…).`));
}

/** A control whose change the API refused (a 409 for a socket device that is away) shows the
 * server's value again at once: a redraw waits while the control has the focus. */
async function revertIfRefused(control, property, serverValue, action) {
  if ((await action) === null) control[property] = serverValue;
}

/** "Add virtual device". */
async function submitDevice(e) {
  e.preventDefault();
  const f = e.target.elements;
  const body = { bundleId: f.bundleId.value.trim(), environment: f.environment.value, kind: f.kind.value };
  if (f.deviceId.value.trim()) body.deviceId = f.deviceId.value.trim();
  const created = await act(api('POST', '/api/v1/devices', body));
  if (created) {
    toast(`Device ${created.deviceId}: token ${shortToken(created.token)}`);
    f.deviceId.value = '';
    pin(created.deviceId);  // shown even when the first page of devices is full
    refreshDevices();
  }
}

export function wireDevices() {
  $('#new-device').addEventListener('submit', submitDevice);
  $('#find-device').addEventListener('submit', findDevice);
}
