// apns-emulator web UI: a live timeline of notification records, their details (how the device
// presented them, answering them), devices (with the account logged in, their switches,
// Notification Center and Live Activities), broadcast channels, fault rules, the apps'
// calls to their backends and the load, all through the admin API. Hand-written native ES
// modules, no dependencies, no bundler: the admin API serves each file of ui/ at /ui/{file}.
// This module is the entry (index.html loads it): it wires the page's controls to the views and
// starts them.
//
// The modules: helpers that know no view (format, records, liveactivity, presentation,
// histogram: pure; dom, widgets, charts: elements; api: the admin API; state: what the page
// knows), then one module per view (timeline, detail, notification, filters, devices, accounts,
// activities, center, tokens, validate, channels, calls, faults, backend, checks, load, info),
// and the glue between them (stream, refresh, navigation). Views call each other's functions (a device's "Pushes →" sets a filter, which
// shows the timeline), so their imports may go round in a circle; that is safe because a
// module's top level only defines things: nothing runs before start() below, when every module
// is loaded.
// May import: every module.

import { api, onTokenEntered, wireLogin } from './api.js';
import { wireBackendDialog } from './backend.js';
import { wireCalls } from './calls.js';
import { wireChannels } from './channels.js';
import { wireChecks } from './checks.js';
import { tickLockClocks } from './clock.js';
import { renderDetail } from './detail.js';
import { wireDevices } from './devices.js';
import { $ } from './dom.js';
import { updateFaultForm, wireFaults } from './faults.js';
import { applyFilters, readHash, wireFilters } from './filters.js';
import { tickUptime } from './info.js';
import { startLoad } from './load.js';
import { showTab, wireNavigation } from './navigation.js';
import { act, refreshSide } from './refresh.js';
import { state } from './state.js';
import { connectOnce, reconnect } from './stream.js';
import { clearRecords, updateCounts, wireTimeline } from './timeline.js';
import { wireValidators } from './validate.js';
import { confirmDialog } from './widgets.js';

function wireReset() {
  $('#reset').addEventListener('click', async () => {
    if (!await confirmDialog('Reset the emulator to its configured start state? All records and runtime devices and fault rules go.', 'Reset')) return;
    const done = await act(api('POST', '/api/v1/reset'), 'Reset done');
    if (done) { clearRecords(); updateCounts(); }
  });
}

async function start() {
  // Ask for the token (if one is needed) before anything else talks to the API.
  wireLogin();
  onTokenEntered(reconnect);
  try { await api('GET', '/api/v1/info'); } catch { /* refreshInfo reports later */ }
  readHash();
  wireFilters();
  wireTimeline();
  wireNavigation();
  wireReset();
  wireFaults();
  wireDevices();
  wireCalls();
  wireChannels();
  wireChecks();
  wireBackendDialog();
  wireValidators();
  window.addEventListener('hashchange', () => { readHash(); showTab(state.tab); applyFilters(); });
  updateFaultForm();
  showTab(state.tab);
  applyFilters(); // also connects the event stream
  connectOnce();
  renderDetail();
  refreshSide();
  api('GET', '/api/v1/keys').then((k) => { state.keys = k.keys || []; updateCounts(); }, () => {});
  setInterval(() => { if (!document.hidden) refreshSide(); }, 4000);
  setInterval(tickUptime, 1000);
  setInterval(tickLockClocks, 5000);
  startLoad();
}

start();
