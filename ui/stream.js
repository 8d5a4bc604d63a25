// The live event stream (GET /api/v1/events, with the timeline's filters): hands each event to
// the view it is for, shows the connection state in the header, reconnects.
// May import: the helpers (dom, api, state) and the views its events are for: timeline, calls,
// checks, filters, load, refresh, activities, center, channels, devices.

import { noteLiveRecord } from './activities.js';
import { adminToken, api } from './api.js';
import { forgetCalls, enqueueCall, loadCalls } from './calls.js';
import { noteCenterRecord } from './center.js';
import { noteBroadcastRecord, noteChannelEvent } from './channels.js';
import { refreshChecks } from './checks.js';
import { forgetPinnedDevices } from './devices.js';
import { $ } from './dom.js';
import { serverQuery } from './filters.js';
import { countRequest, loadReset } from './load.js';
import { refreshSide, scheduleSide } from './refresh.js';
import { forgetRecords, loadRecords, receiveRecord, recheckFilteredRows } from './timeline.js';

let source = null, retryTimer = null;
// The server sends `ping` every 15 s; a stream quiet for longer than QUIET_MS is taken for stuck
// (a proxy buffering it, a dead path) and opened again, rather than shown as live.
const QUIET_MS = 40000;
let lastEventAt = 0;
setInterval(() => {
  if (source && source.readyState === EventSource.OPEN && Date.now() - lastEventAt > QUIET_MS) {
    setConn('connecting', 'reconnecting… (the stream went quiet)');
    connect();
  }
}, 10000);
let startedAt = null; // when the emulator this page follows started (local clock, from its uptime)

/** On every (re)connection: an emulator that started since the last one (restarted, without
 * --state-dir its journal numbers from 1 again) is another run; the Load tab counts afresh,
 * as after a reset (it would take the new records for ones it had counted). */
async function noteStart() {
  try {
    const info = await api('GET', '/api/v1/info');
    const started = Date.now() - info.uptimeSeconds * 1000;
    if (startedAt != null && started - startedAt > 5000) loadReset();
    startedAt = started;
  } catch { /* the stream shows the connection state */ }
}

function setConn(s, text) {
  const el = $('#conn');
  el.dataset.state = s;
  el.textContent = text || s;
}

/** Opens the stream, again if it is open: after a change of the filters or of the token. */
export function connect() {
  if (source) source.close();
  clearTimeout(retryTimer);
  setConn('connecting', 'connecting…');
  const p = new URLSearchParams(serverQuery());
  if (adminToken()) p.set('access_token', adminToken());
  const query = p.toString();
  const es = new EventSource(`/api/v1/events${query ? `?${query}` : ''}`);
  source = es;
  lastEventAt = Date.now();
  for (const type of ['open', 'notification', 'channel', 'backendCall', 'reset', 'deleted', 'clock', 'ping']) {
    es.addEventListener(type, () => { if (source === es) lastEventAt = Date.now(); });
  }
  es.addEventListener('open', async () => {
    setConn('live');
    await noteStart(); // before the journal is loaded: what it loads is not counted as new
    loadRecords(); loadCalls(); refreshChecks();
  });
  es.addEventListener('notification', (ev) => {
    let r;
    try { r = JSON.parse(ev.data); } catch { return; }
    countRequest(r);
    receiveRecord(r);
    if (r && r.pushType === 'liveactivity') { noteLiveRecord(r); noteBroadcastRecord(r); }
    else if (r) noteCenterRecord(r);
  });
  es.addEventListener('ping', () => { if (source === es) recheckFilteredRows(); });
  es.addEventListener('channel', () => noteChannelEvent());
  es.addEventListener('backendCall', (ev) => {
    let c;
    try { c = JSON.parse(ev.data); } catch { return; }
    if (c && c.id != null) enqueueCall(c);
  });
  // Records deleted through the API (or another page): what is shown is read again.
  es.addEventListener('deleted', () => { loadRecords(); refreshSide(); });
  // The clock moved ahead (here or on another page): the Lock Screens and "in 5m" follow it now.
  es.addEventListener('clock', () => scheduleSide());
  es.addEventListener('reset', () => {
    forgetPinnedDevices();
    loadReset();
    forgetRecords();
    forgetCalls();
    refreshSide(); refreshChecks();
    noteChannelEvent();  // a reset removes the channels: the tab's count too
  });
  es.addEventListener('error', () => {
    if (source !== es) return;
    if (es.readyState === EventSource.CLOSED) {
      // The server refused the stream (e.g. a bad filter): say why once, then keep trying.
      if ($('#conn').dataset.state !== 'offline') loadRecords();
      setConn('offline', 'offline — retrying');
      retryTimer = setTimeout(connect, 3000);
    } else {
      setConn('connecting', 'reconnecting…');
    }
  });
}

/** Reconnects only a stream that was opened. */
export function reconnect() {
  if (source) connect();
}

/** Opens the stream unless something (the filters) already did. */
export function connectOnce() {
  if (!source) connect();
}

// A tab hidden for a while gives its stream back, and takes it again when shown (reloading what
// it shows): browsers open at most six HTTP/1.1 connections to one host, and each tab's stream
// holds one, so a seventh tab (or a page kept in the back-forward cache) stalled every request.
const HIDDEN_RELEASE_MS = 10000;
let hiddenTimer = null;

function release(text) {
  if (!source) return;
  source.close();
  source = null;
  clearTimeout(retryTimer);
  setConn('paused', text);
}

document.addEventListener('visibilitychange', () => {
  clearTimeout(hiddenTimer);
  if (document.hidden) {
    hiddenTimer = setTimeout(() => { if (document.hidden) release('paused while the tab is hidden'); }, HIDDEN_RELEASE_MS);
  } else if (!source) {
    connect();
  }
});
window.addEventListener('pagehide', () => release('paused'));
window.addEventListener('pageshow', (event) => { if (event.persisted && !source) connect(); });
