// apns-emulator web UI: a live timeline of notification records, their details, devices (with
// the account logged in), fault rules and the apps' calls to their backends, all through the
// admin API. Hand-written, no dependencies. Every piece of server
// data reaches the DOM as text (textContent / text nodes / attributes), never as HTML.
'use strict';
(() => {
  const MAX_ROWS = 2000;
  const FILTERS = ['token', 'topic', 'pushType', 'status', 'reason', 'environment', 'outcome', 'deviceId'];
  const AUTHORIZATIONS = ['notDetermined', 'denied', 'authorized', 'provisional', 'ephemeral'];
  const APP_STATES = ['foreground', 'background', 'suspended', 'notRunning', 'terminated'];
  const TABS = ['timeline', 'devices', 'faults', 'backend', 'load'];
  const MAX_CALLS = 5000; // backend calls kept in the page
  const MAX_CALL_ROWS = 1000; // and shown

  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  /** Creates an element. Children that are not nodes become text nodes, so strings are never parsed as HTML. */
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'value' || k === 'checked' || k === 'selected') el[k] = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid == null || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  const state = {
    records: new Map(), // sequence -> record
    rows: new Map(), // sequence -> <tr>
    selected: null, // sequence
    filters: {}, // server-side filters (query parameters)
    q: '', // free text, client-side
    statusClass: null, // "4xx" style status filter, client-side
    tab: 'timeline',
    devices: [], faults: [], keys: [], info: null, infoAt: 0, filtersExtra: {},
    calls: new Map(), // backend call id -> call
    callBodies: new Map(), // id -> <tbody> (a call's row and, expanded, its details)
    expandedCalls: new Set(),
    callsFilter: { deviceId: '', hook: '' },
    checks: null,
    openSections: { device: true, payload: true, response: true, jwt: true, headers: false, timing: true },
  };

  // ---------------------------------------------------------------- helpers

  // With --admin-token the API answers 401 until the token is sent. The page asks for it once
  // and keeps it for this tab (sessionStorage); the event stream carries it as ?access_token=,
  // as EventSource cannot set headers.
  const TOKEN_KEY = 'apns-emulator-admin-token';
  let adminToken = sessionStorage.getItem(TOKEN_KEY) || '';
  let asking = null;
  function askForToken(message) {
    if (asking) return asking;
    asking = new Promise((resolve) => {
      const dialog = $('#login');
      const input = $('#login-token');
      $('#login-error').textContent = message || '';
      input.value = '';
      dialog.addEventListener('close', () => {
        adminToken = input.value.trim();
        sessionStorage.setItem(TOKEN_KEY, adminToken);
        asking = null;
        resolve();
        if (source) connect();
      }, { once: true });
      dialog.showModal();
      input.focus();
    });
    return asking;
  }

  /** Calls the admin API; an answer with a status in `allow` (e.g. 409 from a strict check) is data, not an error. */
  async function api(method, path, body, { allow = [] } = {}) {
    for (;;) {
      const init = { method, headers: {} };
      if (adminToken) init.headers.Authorization = `Bearer ${adminToken}`;
      if (body !== undefined) { init.headers['Content-Type'] = 'application/json'; init.body = JSON.stringify(body); }
      const res = await fetch(path, init);
      let data = null;
      try { data = await res.json(); } catch { /* not JSON */ }
      if (res.status === 401) {
        await askForToken(adminToken ? 'That token was not accepted.' : '');
        continue;
      }
      if (!res.ok && !allow.includes(res.status)) {
        const err = new Error((data && data.error) || `${method} ${path}: HTTP ${res.status}`);
        err.status = res.status;
        throw err;
      }
      return data;
    }
  }
  const enc = encodeURIComponent;
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  function fmtTime(ms) {
    const d = new Date(ms);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }
  function fmtDateTime(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    return isNaN(d) ? String(iso) : `${d.toLocaleDateString()} ${fmtTime(d.getTime())}`;
  }
  function fmtDuration(s) {
    s = Math.max(0, Math.floor(s));
    const d = Math.floor(s / 86400), hh = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    return d ? `${d}d ${hh}h` : hh ? `${hh}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
  }
  const shortToken = (t) => !t ? '—' : t.length > 12 ? `${t.slice(0, 6)}…${t.slice(-4)}` : t;
  const bytes = (n) => `${Number(n).toLocaleString('en-US')} B`;

  function statusClass(status) {
    if (status >= 200 && status < 300) return 's-ok';
    if (status === 410 || status >= 500 || status === 0) return 's-err';
    if (status >= 400) return 's-warn';
    return 's-grey';
  }
  function statusPill(status) {
    return h('span', { class: `pill ${statusClass(status)}`, title: status === 0 ? 'no HTTP status: the stream was reset or the connection ended' : null },
      status === 0 ? 'RST' : String(status));
  }
  const OUTCOME_CLASS = { delivered: 'o-ok', pending: 'o-info', stored: 'o-info', rejected: 'o-err', expired: 'o-grey',
    coalesced: 'o-grey', throttled: 'o-warn', deferred: 'o-warn', 'dropped-by-system': 'o-warn' };
  const outcomeBadge = (o) => h('span', { class: `outcome ${OUTCOME_CLASS[o] || 'o-grey'}` }, o || '—');
  /** A push delivered while another account than the one its payload names was logged in. */
  const crossText = (r) => `for ${r.addressee ?? '?'}, ${r.userId != null ? `shown to ${r.userId}` : 'shown while logged out'}`;
  const crossTitle = (r) => `Cross-account delivery: the payload names ${r.addressee ?? '?'}, but ${r.userId != null ? `${r.userId} was` : 'nobody was'} logged in on ${r.deviceId || 'the device'}`;
  const crossBadge = (r, long) => h('span', { class: 'badge xacct', title: crossTitle(r) }, long ? `cross-account: ${crossText(r)}` : 'cross-account');
  const envBadge = (env) => h('span', { class: `badge ${env === 'production' ? 's-warn' : 's-info'}`, title: env }, env === 'production' ? 'prod' : 'sbx');

  function toast(message, isError) {
    const el = h('div', { class: `toast${isError ? ' err' : ''}` }, message);
    $('#toasts').append(el);
    setTimeout(() => el.remove(), isError ? 6000 : 2500);
  }
  async function copy(text) {
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      const area = h('textarea', { style: 'position:fixed;opacity:0' });
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand('copy');
      area.remove();
    }
    toast('Copied');
  }
  const copyBtn = (text, label = 'copy') => h('button', { type: 'button', class: 'icon-btn', title: `Copy ${text}`, onclick: (e) => { e.stopPropagation(); copy(text); } }, label);

  function confirmDialog(text, okLabel = 'Confirm') {
    const dialog = $('#confirm');
    $('#confirm-text').textContent = text;
    $('#confirm-ok').textContent = okLabel;
    dialog.returnValue = '';
    dialog.showModal();
    return new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true }));
  }

  /** Runs an admin action, reports errors, then refreshes what it may have changed. */
  async function act(promise, done) {
    try {
      const result = await promise;
      if (done) toast(done);
      return result;
    } catch (e) {
      toast(e.message, true);
      return null;
    } finally {
      refreshSide();
    }
  }

  /** Pretty-printed JSON with colours, built from text nodes. */
  function jsonView(value) {
    const text = typeof value === 'string' ? value : JSON.stringify(value, null, 2);
    const pre = h('pre', { class: 'json' });
    if (typeof value === 'string') { pre.textContent = text; return pre; }
    const re = /("(?:\\u[\da-fA-F]{4}|\\[^u]|[^\\"])*")(\s*:)?|\b(true|false|null)\b|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/g;
    let last = 0, m;
    while ((m = re.exec(text))) {
      if (m.index > last) pre.append(text.slice(last, m.index));
      if (m[1]) pre.append(h('span', { class: m[2] ? 'j-key' : 'j-str' }, m[1]), m[2] || '');
      else pre.append(h('span', { class: m[3] ? 'j-lit' : 'j-num' }, m[0]));
      last = re.lastIndex;
    }
    pre.append(text.slice(last));
    return pre;
  }

  // ---------------------------------------------------------------- payload reading

  const aps = (r) => (r.payload && typeof r.payload === 'object' && r.payload.aps && typeof r.payload.aps === 'object') ? r.payload.aps : null;
  const str = (v) => (v == null ? '' : typeof v === 'string' ? v : JSON.stringify(v));

  /** The alert as the lock screen would show it: {title, subtitle, body} plus loc keys as text. */
  function alertOf(r) {
    const a = aps(r);
    if (!a || a.alert == null) return null;
    if (typeof a.alert !== 'object') return { body: str(a.alert) };
    const loc = (key, args) => key ? `${str(key)}${Array.isArray(args) && args.length ? ` (${args.map(str).join(', ')})` : ''}` : '';
    return {
      title: str(a.alert.title), subtitle: str(a.alert.subtitle), body: str(a.alert.body),
      titleLoc: loc(a.alert['title-loc-key'], a.alert['title-loc-args']),
      subtitleLoc: loc(a.alert['subtitle-loc-key'], a.alert['subtitle-loc-args']),
      bodyLoc: loc(a.alert['loc-key'], a.alert['loc-args']),
    };
  }

  function summaryOf(r) {
    const alert = alertOf(r);
    if (alert) {
      const title = alert.title || alert.titleLoc;
      const body = [alert.subtitle || alert.subtitleLoc, alert.body || alert.bodyLoc].filter(Boolean).join(' · ');
      return { title, body };
    }
    const a = aps(r);
    if (a && a['content-available'] === 1) return { title: '', body: 'content-available (silent)' };
    if (a && a.event) return { title: `Live Activity ${str(a.event)}`, body: a['content-state'] ? str(a['content-state']) : '' };
    const text = typeof r.payload === 'string' ? r.payload : JSON.stringify(r.payload);
    return { title: '', body: text && text.length > 140 ? `${text.slice(0, 140)}…` : text || '' };
  }

  const sizeLimit = (r) => (r.pushType === 'voip' ? 5120 : 4096);

  function searchText(r) {
    if (!r._search) {
      r._search = [r.apnsId, r.uniqueId, r.token, r.topic, r.reason, r.explanation, r.deviceId, r.bundleId, r.collapseId,
        r.pushType, r.outcome, r.userId, r.addressee, r.crossAccount ? 'cross-account' : null, String(r.status), typeof r.payload === 'string' ? r.payload : JSON.stringify(r.payload)]
        .filter(Boolean).join('\n').toLowerCase();
    }
    return r._search;
  }

  // ---------------------------------------------------------------- timeline

  function matchesClient(r) {
    if (state.statusClass && String(r.status)[0] !== state.statusClass[0]) return false;
    if (state.q) {
      const hay = searchText(r);
      return state.q.toLowerCase().split(/\s+/).filter(Boolean).every((w) => hay.includes(w));
    }
    return true;
  }

  function buildRow(r) {
    const sum = summaryOf(r);
    const cross = r.crossAccount === true;
    return h('tr', { class: cross ? 'cross' : null, dataset: { seq: r.sequence, apnsId: r.apnsId } },
      h('td', { class: 'c-time', title: r.receivedAt }, fmtTime(r.receivedAtMs)),
      h('td', { class: 'c-status' }, statusPill(r.status)),
      h('td', { class: 'c-reason', title: cross ? crossTitle(r) : r.reason || '' }, cross ? crossBadge(r) : null, cross && r.reason ? ' ' : null, r.reason || ''),
      h('td', { class: 'c-type' }, r.pushType || '—'),
      h('td', { class: 'c-topic', title: r.topic || '' }, r.topic || '—'),
      h('td', { class: 'c-token', title: r.token }, h('button', { type: 'button', class: 'tok', dataset: { token: r.token }, title: `Everything sent to ${r.token}` }, shortToken(r.token))),
      h('td', { class: 'c-env' }, envBadge(r.environment)),
      h('td', { class: 'c-outcome', title: r.explanation || '' }, outcomeBadge(r.outcome)),
      h('td', { class: 'c-summary', title: [cross ? crossTitle(r) : null, sum.title, sum.body].filter(Boolean).join('\n') },
        cross ? h('span', { class: 'xacct-text' }, `${crossText(r)} · `) : null,
        sum.title ? h('b', null, sum.title) : null, sum.title && sum.body ? ' ' : null, sum.body));
  }

  /** How far a record has progressed; an update never replaces a record with an older version. */
  const progress = (r) => (r.respondedAt ? 1 : 0) + (r.deliveredAt ? 2 : 0) + (r.outcome !== 'pending' ? 4 : 0) + (r.callbacks ? r.callbacks.length : 0);

  function upsert(r, { live = false, careful = false } = {}) {
    const old = state.records.get(r.sequence);
    if (old && careful && progress(r) < progress(old)) return;
    state.records.set(r.sequence, r);
    const tr = buildRow(r);
    tr.hidden = !matchesClient(r);
    const existing = state.rows.get(r.sequence);
    state.rows.set(r.sequence, tr);
    if (existing) {
      if (existing.classList.contains('selected')) tr.classList.add('selected');
      existing.replaceWith(tr);
    } else {
      const body = $('#rows');
      let before = body.firstElementChild;
      while (before && Number(before.dataset.seq) > r.sequence) before = before.nextElementSibling;
      body.insertBefore(tr, before);
      if (live) tr.classList.add('fresh');
      trim(); // counts the new row (which goes again at once if it is the oldest)
    }
    if (state.selected === r.sequence) renderDetail();
  }

  function trim() {
    const limit = rowLimit();
    while (state.rows.size > limit) {
      const last = $('#rows').lastElementChild;
      const seq = Number(last.dataset.seq);
      last.remove();
      state.rows.delete(seq);
      state.records.delete(seq);
    }
  }

  function clearRecords() {
    state.records.clear();
    state.rows.clear();
    $('#rows').replaceChildren();
    select(null);
  }

  function applyClientFilter() {
    for (const [seq, tr] of state.rows) tr.hidden = !matchesClient(state.records.get(seq));
    updateCounts();
  }

  function visibleRows() { return $$('#rows > tr:not([hidden])'); }

  function updateCounts() {
    const shown = visibleRows().length;
    $('#shown').textContent = `${shown} shown${shown !== state.records.size ? ` of ${state.records.size} loaded` : ''}`
      + (busy && state.tab === 'timeline' ? ` · under load: the newest ${BUSY_ROWS}, once a second` : '');
    const empty = $('#empty');
    empty.replaceChildren();
    empty.hidden = shown > 0;
    if (shown > 0) return;
    const filtered = Object.keys(state.filters).length || state.q || state.statusClass;
    if (filtered) { empty.append(h('div', null, 'Nothing matches these filters.')); return; }
    empty.append(h('div', null, 'Waiting for pushes. New notifications appear here as they arrive.'));
    const info = state.info;
    const app = state.devices.flatMap((d) => d.apps).find((a) => a.token);
    if (info && info.addresses && app) {
      const host = app.environment === 'production' ? info.addresses.production : info.addresses.sandbox;
      const key = state.keys.find((k) => k.source && k.source !== 'api');
      const keyArg = key ? `${key.teamId}:${key.keyId}:${key.source}` : 'TEAMID:KEYID:AuthKey.p8';
      if (host) empty.append(h('div', { class: 'small' }, 'Send one with the built-in provider:'),
        h('pre', null, `apns-emulator send --host ${host} --ca ${info.addresses.caFile || 'certs/ca.pem'} \\\n  --key ${keyArg} --topic ${app.bundleId} \\\n  --token ${app.token} '{"aps":{"alert":"Hello"}}'`));
    }
  }

  function select(seq, { scroll = false } = {}) {
    const prev = state.rows.get(state.selected);
    if (prev) prev.classList.remove('selected');
    state.selected = seq;
    const tr = state.rows.get(seq);
    if (tr) {
      tr.classList.add('selected');
      if (scroll) tr.scrollIntoView({ block: 'nearest' });
    }
    renderDetail(true);
  }

  function move(delta) {
    const rows = visibleRows();
    if (!rows.length) return;
    const i = rows.findIndex((tr) => Number(tr.dataset.seq) === state.selected);
    const next = i < 0 ? rows[0] : rows[Math.max(0, Math.min(rows.length - 1, i + delta))];
    select(Number(next.dataset.seq), { scroll: true });
  }

  // ---------------------------------------------------------------- live stream

  let source = null, retryTimer = null, loadGeneration = 0, loading = false, buffered = [];

  function serverQuery() {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(state.filters)) p.set(k, v);
    return p.toString();
  }

  function setConn(s, text) {
    const el = $('#conn');
    el.dataset.state = s;
    el.textContent = text || s;
  }

  function connect() {
    if (source) source.close();
    clearTimeout(retryTimer);
    setConn('connecting', 'connecting…');
    const p = new URLSearchParams(serverQuery());
    if (adminToken) p.set('access_token', adminToken);
    const query = p.toString();
    const es = new EventSource(`/api/v1/events${query ? `?${query}` : ''}`);
    source = es;
    es.addEventListener('open', () => { setConn('live'); load(); loadCalls(); refreshChecks(); });
    es.addEventListener('notification', (ev) => {
      let r;
      try { r = JSON.parse(ev.data); } catch { return; }
      countRequest(r);
      if (loading) buffered.push(r);
      else enqueue(r);
    });
    es.addEventListener('backendCall', (ev) => {
      let c;
      try { c = JSON.parse(ev.data); } catch { return; }
      if (c && c.id != null) enqueueCall(c);
    });
    es.addEventListener('reset', () => {
      loadReset();
      queue.clear(); clearRecords(); $('#count-notifications').textContent = 0; updateCounts();
      callQueue.clear(); state.calls.clear(); state.expandedCalls.clear(); state.callsJSON = null; renderCalls();
      refreshSide(); refreshChecks();
    });
    es.addEventListener('error', () => {
      if (source !== es) return;
      if (es.readyState === EventSource.CLOSED) {
        // The server refused the stream (e.g. a bad filter): say why once, then keep trying.
        if ($('#conn').dataset.state !== 'offline') load();
        setConn('offline', 'offline — retrying');
        retryTimer = setTimeout(connect, 3000);
      } else {
        setConn('connecting', 'reconnecting…');
      }
    });
  }

  // Events are applied in batches, so a load test pushing thousands per second cannot swamp the page:
  // every 30 ms while the timeline is shown, every second while another tab is. While events pour in
  // (more than BUSY a second), a shown timeline keeps only the newest BUSY_ROWS rows, without the
  // fresh-row highlight, and a hidden one builds no rows: the newest MAX_ROWS records wait for the
  // timeline to be shown or the stream to calm down. At most CHUNK rows are built in one go.
  const queue = new Map();
  let flushTimer = null, infoTimer = null, arrived = 0, busy = false, lastFlushAt = 0;
  const pendingFlags = { added: false, side: false, cross: false };
  const BUSY = 400; // records per second: more is a load
  const CHUNK = 400; // rows built in one go; the rest right after, so the page can breathe
  const BUSY_ROWS = 200; // rows kept while the timeline is shown under load: laying out more costs too much
  const rowLimit = () => (busy && state.tab === 'timeline' ? BUSY_ROWS : MAX_ROWS);
  function enqueue(r) {
    const old = state.records.get(r.sequence) || queue.get(r.sequence);
    if (!old) pendingFlags.added = true;
    if (r.fault || r.status === 410) pendingFlags.side = true;
    if (r.crossAccount && !(old || {}).crossAccount) pendingFlags.cross = true;
    queue.set(r.sequence, r);
    arrived++;
    if (!flushTimer) flushTimer = setTimeout(flush, state.tab !== 'timeline' || busy ? 1000 : 30);
  }
  /** Keeps the newest MAX_ROWS queued records: older ones would leave the table as soon as the newer ones enter it. */
  function trimQueue() {
    if (queue.size <= MAX_ROWS * 1.5) return;
    const keep = [...queue.keys()].sort((a, b) => b - a)[MAX_ROWS - 1];
    for (const seq of queue.keys()) if (seq < keep) queue.delete(seq);
  }
  function flush() {
    clearTimeout(flushTimer);
    flushTimer = null;
    const { added, side, cross } = pendingFlags;
    pendingFlags.added = pendingFlags.side = pendingFlags.cross = false;
    if (added && !infoTimer) infoTimer = setTimeout(() => { infoTimer = null; refreshInfo(); }, 500);
    if (side) scheduleSide();
    if (cross) scheduleChecks();
    const now = performance.now(), elapsed = now - lastFlushAt;
    if (elapsed >= 25) { // not for the rest of a batch that is applied in chunks
      busy = (arrived * 1000) / elapsed > BUSY;
      arrived = 0;
      lastFlushAt = now;
    }
    if (state.tab !== 'timeline' && busy) {
      trimQueue();
      flushTimer = setTimeout(flush, 1000);
      return;
    }
    let batch = [...queue.values()].sort((a, b) => a.sequence - b.sequence);
    queue.clear();
    if (batch.length > rowLimit()) batch = batch.slice(-rowLimit());
    if (batch.length > CHUNK) {
      for (const r of batch.slice(CHUNK)) queue.set(r.sequence, r);
      batch = batch.slice(0, CHUNK);
      flushTimer = setTimeout(flush, 0);
    }
    const live = batch.length <= 50;
    for (const r of batch) upsert(r, { live });
    updateCounts();
    if (busy && !flushTimer) flushTimer = setTimeout(flush, 1000); // to notice the end of the load
  }

  /** (Re)loads the newest 200 matching records; events that arrive meanwhile are merged after. */
  async function load() {
    const generation = ++loadGeneration;
    loading = true;
    buffered = [];
    let data;
    try {
      const query = serverQuery();
      data = await api('GET', `/api/v1/notifications?limit=200${query ? `&${query}` : ''}`);
    } catch (e) {
      if (generation === loadGeneration) { loading = false; toast(`Could not load notifications: ${e.message}`, true); }
      return;
    }
    if (generation !== loadGeneration) return;
    const keep = state.selected;
    state.records.clear();
    state.rows.clear();
    const body = $('#rows');
    const fragment = document.createDocumentFragment();
    for (const r of data.notifications) {
      const tr = buildRow(r);
      tr.hidden = !matchesClient(r);
      state.records.set(r.sequence, r);
      state.rows.set(r.sequence, tr);
      fragment.append(tr);
    }
    body.replaceChildren(fragment);
    noteHistory(data.notifications);
    loading = false;
    for (const r of buffered) upsert(r, { live: true, careful: true });
    if (buffered.some((r) => r.crossAccount)) scheduleChecks();
    buffered = [];
    if (keep != null && state.rows.has(keep)) select(keep);
    else if (keep != null) select(null);
    updateCounts();
  }

  // ---------------------------------------------------------------- filters

  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    const form = $('#filters');
    for (const name of FILTERS) if (form.elements[name]) form.elements[name].value = p.get(name) || '';
    state.filtersExtra = { deviceId: p.get('deviceId') || '' };
    $('#q').value = p.get('q') || '';
    if (p.get('tab')) state.tab = p.get('tab');
  }

  function writeHash() {
    const p = new URLSearchParams();
    if (state.tab !== 'timeline') p.set('tab', state.tab);
    for (const [k, v] of Object.entries(state.filters)) p.set(k, v);
    if (state.statusClass) p.set('status', state.statusClass);
    if (state.q) p.set('q', state.q);
    const hash = p.toString();
    history.replaceState(null, '', hash ? `#${hash}` : location.pathname);
  }

  /** Reads the filter bar; reconnects when the server-side filters changed. */
  function applyFilters() {
    const form = $('#filters');
    const filters = {};
    let statusCls = null;
    for (const name of FILTERS) {
      const el = form.elements[name];
      const v = el ? el.value.trim() : (state.filtersExtra[name] || '');
      if (el) el.classList.toggle('active', Boolean(v));
      if (!v) continue;
      if (name === 'status') {
        if (/^\d{1,3}$/.test(v)) filters.status = v;
        else if (/^[2-5]xx$/i.test(v)) statusCls = v.toLowerCase();
        continue;
      }
      filters[name] = v;
    }
    state.q = $('#q').value.trim();
    const changed = JSON.stringify(filters) !== JSON.stringify(state.filters);
    state.filters = filters;
    state.statusClass = statusCls;
    writeHash();
    renderScope();
    if (changed) { clearRecords(); connect(); } else applyClientFilter();
  }

  function setFilter(name, value) {
    const el = $('#filters').elements[name];
    if (el) el.value = value || ''; else state.filtersExtra[name] = value || '';
    showTab('timeline');
    applyFilters();
  }

  function clearFilters() {
    $('#filters').reset();
    state.filtersExtra = {};
    applyFilters();
  }

  /** The per-token (or per-device) view banner. */
  async function renderScope() {
    const scope = $('#scope');
    const token = state.filters.token, deviceId = state.filters.deviceId;
    if (!token && !deviceId) { scope.hidden = true; scope.replaceChildren(); return; }
    scope.hidden = false;
    const exit = h('button', { type: 'button', class: 'btn ghost small', onclick: () => { setFilter(token ? 'token' : 'deviceId', ''); } }, '× show all');
    if (!token) { scope.replaceChildren(h('b', null, 'Device view'), h('span', { class: 'mono' }, deviceId), exit); return; }
    scope.replaceChildren(h('b', null, 'Token view'), h('span', { class: 'mono', title: token }, token.length > 28 ? `${token.slice(0, 16)}…${token.slice(-8)}` : token), copyBtn(token), exit);
    try {
      const t = await api('GET', `/api/v1/tokens/${enc(token.toLowerCase())}`);
      if (state.filters.token !== token) return;
      const stateCls = t.state === 'active' ? 's-ok' : t.state === 'unregistered' ? 's-err' : 's-warn';
      scope.insertBefore(h('span', null, h('span', { class: 'mono' }, t.deviceId), ' · ', t.topic, ' · ', t.kind, ' · ', envBadge(t.environment), ' ',
        h('span', { class: `badge ${stateCls}` }, t.state), t.unregisteredAt ? ` since ${fmtDateTime(t.unregisteredAt)}` : ''), exit);
    } catch {
      if (state.filters.token === token) scope.insertBefore(h('span', { class: 'muted' }, 'not issued by this emulator'), exit);
    }
  }

  // ---------------------------------------------------------------- detail pane

  function section(key, title, aside, ...body) {
    const d = h('details', { class: 'd-section', dataset: { key }, open: state.openSections[key] },
      h('summary', null, h('h3', null, title), aside ? h('span', { class: 'aside' }, aside) : null),
      h('div', { class: 'd-body' }, body));
    d.addEventListener('toggle', () => { state.openSections[key] = d.open; });
    return d;
  }

  function kv(pairs) {
    return h('dl', { class: 'kv' }, pairs.filter((p) => p).map(([k, v]) => [h('dt', null, k), h('dd', null, v == null || v === '' ? '—' : v)]));
  }

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

  function headerTable(list) {
    if (!list || !list.length) return h('div', { class: 'muted' }, 'none');
    return h('table', { class: 'hdrs' }, list.map((x) => h('tr', null, h('td', null, x.name), h('td', null, x.value))));
  }

  function since(a, b) {
    if (!a || !b) return '';
    const d = new Date(b) - new Date(a);
    return isNaN(d) ? '' : ` (+${d} ms)`;
  }

  function renderDetail(resetScroll) {
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
      r.crossAccount ? h('div', { class: 'd-cross', id: 'cross-account' }, crossBadge(r, true)) : null,
      h('div', { class: 'd-sub' }, h('span', { class: 'mono', title: 'apns-id' }, r.apnsId), copyBtn(r.apnsId), h('span', null, fmtDateTime(r.receivedAt)), h('span', null, `#${r.sequence}`)),
      h('div', { class: 'd-actions' },
        h('button', { type: 'button', class: 'btn small', title: 'Everything sent to this token (t)', onclick: () => setFilter('token', r.token) }, 'All pushes to this token'),
        canTap ? h('button', { type: 'button', class: 'btn small', title: 'The user taps the notification', onclick: async () => {
          const t = await act(api('POST', `/api/v1/devices/${enc(device)}/tap`, { apnsId: r.apnsId }));
          if (t) toast(`Tapped: ${t.callbacks.join(', ') || 'no callbacks'}${t.launched ? ' (app launched)' : ''}`);
        } }, 'Tap it on the device') : null,
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

  const stripPrivate = (r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith('_')));

  // ---------------------------------------------------------------- info, devices, faults

  async function refreshInfo() {
    try {
      const info = await api('GET', '/api/v1/info');
      state.info = info;
      state.infoAt = Date.now();
      $('#version').textContent = `v${info.version}`;
      const a = info.addresses || {};
      const parts = [['sandbox', a.sandbox], ['production', a.production], ['h2c sandbox', a.h2cSandbox], ['h2c production', a.h2cProduction], ['device', a.device]]
        .filter(([, v]) => v).map(([k, v]) => h('span', { title: `${k}: ${v}` }, `${k} `, h('b', null, v)));
      if (a.caFile) parts.push(h('span', { title: `CA to trust: ${a.caFile}` }, 'CA ', h('b', null, a.caFile.split('/').pop())));
      $('#addresses').replaceChildren(...parts);
      const c = info.counts || {};
      $('#count-notifications').textContent = c.notifications ?? 0;
      $('#count-devices').textContent = c.devices ?? 0;
      $('#count-faults').textContent = c.faultRules ?? 0;
      tickUptime();
    } catch { /* the event stream shows the connection state */ }
  }
  function tickUptime() {
    if (!state.info) return;
    $('#uptime').textContent = `up ${fmtDuration(state.info.uptimeSeconds + (Date.now() - state.infoAt) / 1000)}`;
  }

  // Refreshes overlap (a timer, an action's follow-up): an answer older than one already shown is dropped.
  const STALE = Symbol('stale');
  const refreshes = {};
  async function newest(what, promise) {
    const r = refreshes[what] || (refreshes[what] = { asked: 0, shown: 0 });
    const mine = ++r.asked;
    const data = await promise;
    if (mine < r.shown) return STALE;
    r.shown = mine;
    return data;
  }

  let sideTimer = null;
  function scheduleSide() { clearTimeout(sideTimer); sideTimer = setTimeout(refreshSide, 250); }
  async function refreshSide() {
    await Promise.all([refreshDevices(), refreshFaults(), refreshInfo(), refreshChecks(), state.tab === 'devices' ? refreshTokens() : null,
      // Calls arrive as events; a server that sends none is polled while the tab is open.
      state.tab === 'backend' && !state.callEventsSeen ? loadCalls() : null]);
  }

  async function refreshTokens() {
    let data;
    try { data = await newest('tokens', api('GET', '/api/v1/tokens')); } catch { return; }
    if (data === STALE) return;
    const json = JSON.stringify(data.tokens);
    if (json === state.tokensJSON) return;
    state.tokensJSON = json;
    const cls = { active: 's-ok', unregistered: 's-err', expired: 's-warn', 'rate-limited': 's-warn' };
    $('#tokens-more').hidden = !data.nextCursor;
    $('#tokens').replaceChildren(...data.tokens.slice().reverse().map((t) => h('tr', null,
      h('td', null, h('button', { type: 'button', class: 'tok', title: `Everything sent to ${t.token}`, onclick: () => setFilter('token', t.token) }, shortToken(t.token)), ' ', copyBtn(t.token)),
      h('td', { class: 'mono' }, t.deviceId), h('td', null, t.topic), h('td', null, t.kind), h('td', null, envBadge(t.environment)),
      h('td', null, h('span', { class: `badge ${cls[t.state] || 's-grey'}` }, t.state), t.unregisteredAt ? h('span', { class: 'muted small' }, ` since ${fmtDateTime(t.unregisteredAt)}`) : null))));
  }

  async function refreshDevices() {
    let data;
    try { data = await newest('devices', api('GET', '/api/v1/devices')); } catch { return; }
    if (data === STALE) return;
    const json = JSON.stringify(data.devices);
    if (json === state.devicesJSON) return;
    // Do not pull a select from under the user's pointer; the next refresh catches up.
    const active = document.activeElement;
    if (active && active.tagName === 'SELECT' && $('#devices').contains(active)) return;
    state.devicesJSON = json;
    state.devices = data.devices;
    state.moreDevices = !!data.nextCursor;
    renderDevices();
    fillDatalists();
    fillCallDevices();
    updateCounts();
  }

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

  /** What is typed into the "log in as" fields, and which one has the focus, to survive a re-render. */
  function accountDrafts() {
    const drafts = new Map();
    let focus = null;
    for (const input of $$('#devices input[data-field="userId"]')) {
      if (input.value) drafts.set(input.dataset.device, input.value);
      if (input === document.activeElement) focus = { device: input.dataset.device, start: input.selectionStart, end: input.selectionEnd };
    }
    return { drafts, focus };
  }
  function restoreAccountDrafts({ drafts, focus }) {
    for (const input of $$('#devices input[data-field="userId"]')) {
      if (drafts.has(input.dataset.device)) input.value = drafts.get(input.dataset.device);
      if (focus && focus.device === input.dataset.device) {
        input.focus();
        try { input.setSelectionRange(focus.start, focus.end); } catch { /* not a text field */ }
      }
    }
  }
  const accountInput = (deviceId) => $$('#devices input[data-field="userId"]').find((i) => i.dataset.device === deviceId);

  /** Who is logged in on the device, a "log in as" form and, when someone is, a log-out button. */
  function accountControls(d, base) {
    const login = async (e) => {
      e.preventDefault();
      const userId = e.target.elements.userId.value.trim();
      if (!userId) return;
      const done = await act(api('POST', `${base}/login`, { userId }));
      if (!done) return;
      toast(done.previousUserId && done.previousUserId !== userId ? `${done.previousUserId} logged out, ${userId} logged in on ${d.deviceId}` : `${userId} logged in on ${d.deviceId}`);
      const input = accountInput(d.deviceId);
      if (input) input.value = '';
    };
    const logout = async () => {
      const done = await act(api('POST', `${base}/logout`));
      if (done) toast(done.previousUserId ? `${done.previousUserId} logged out of ${d.deviceId}` : `Nobody was logged in on ${d.deviceId}`);
    };
    const who = d.userId != null
      ? h('span', { class: 'badge s-info account-badge', dataset: { field: 'account' }, title: `logged in on ${d.deviceId}: ${d.userId}` }, d.userId)
      : h('span', { class: 'badge s-grey account-badge logged-out', dataset: { field: 'account' }, title: 'nobody is logged in in the apps on this device' }, 'logged out');
    return h('div', { class: 'device-account' },
      h('span', { class: 'muted small' }, 'Account'), who,
      d.userId != null ? h('button', { type: 'button', class: 'btn small', dataset: { action: 'logout' }, title: `Log ${d.userId} out (the apps call their unbind hook)`, onclick: logout }, 'Log out') : null,
      h('form', { class: 'inline-form account-form', autocomplete: 'off', onsubmit: login },
        h('label', { class: 'muted small', for: `account-${d.deviceId}` }, d.userId != null ? 'switch to' : 'log in as'),
        h('input', { id: `account-${d.deviceId}`, name: 'userId', placeholder: 'user id', required: true, class: 'w-topic',
          'aria-label': `log in on ${d.deviceId} as`, dataset: { field: 'userId', device: d.deviceId } }),
        h('button', { class: 'btn small', dataset: { action: 'login' }, title: 'Log this account in (the apps call their bind hook, and register for a token got while logged out)' }, 'Log in')),
      h('span', { class: 'spacer' }),
      h('button', { type: 'button', class: 'btn small ghost', dataset: { action: 'calls' }, onclick: () => showCallsOf(d.deviceId) }, 'Backend calls →'));
  }

  function renderDevices() {
    const root = $('#devices');
    const kept = accountDrafts();
    if (!state.devices.length) { root.replaceChildren(h('div', { class: 'empty' }, 'No devices. Add a virtual device above, or connect one to the device socket.')); return; }
    root.replaceChildren(...state.devices.map((d) => {
      const base = `/api/v1/devices/${enc(d.deviceId)}`;
      const apps = d.apps.map((app) => {
        const appBase = `${base}/apps/${enc(app.bundleId)}`;
        const choose = (field, values, current) => h('select', { 'aria-label': field, dataset: { field, device: d.deviceId, bundle: app.bundleId },
          onchange: (e) => act(api('PATCH', appBase, { [field]: e.target.value }), `${field} → ${e.target.value}`) },
        values.map((v) => h('option', { value: v, selected: v === current }, v)));
        return h('tr', { dataset: { bundle: app.bundleId } },
          h('td', null, h('div', { class: 'bundle' }, app.bundleId), envBadge(app.environment)),
          h('td', null, Object.entries(app.tokens || {}).map(([kind, token]) => h('div', { class: 'token-line' },
            h('span', { class: 'kind' }, kind), h('button', { type: 'button', class: 'tok', title: `Everything sent to ${token}`, onclick: () => setFilter('token', token) }, shortToken(token)), copyBtn(token))),
            app.tokenUploadPending ? h('div', { class: 'upload-pending', dataset: { field: 'tokenUploadPending' },
              title: 'The app got this token while logged out; it uploads it to its backend (register hook) at the next login.' }, 'token not uploaded yet') : null),
          h('td', null, choose('authorization', AUTHORIZATIONS, app.authorization)),
          h('td', null, choose('appState', APP_STATES, app.appState)),
          h('td', null, h('label', { title: 'Background Modes: remote notifications' }, h('input', { type: 'checkbox', checked: app.backgroundMode,
            onchange: (e) => act(api('PATCH', appBase, { backgroundMode: e.target.checked }), `background mode ${e.target.checked ? 'on' : 'off'}`) }), ' bg')),
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
          h('label', { class: 'small' }, h('input', { type: 'checkbox', checked: d.lowPowerMode, onchange: (e) => act(api('PATCH', base, { lowPowerMode: e.target.checked }), `Low Power Mode ${e.target.checked ? 'on' : 'off'}`) }), ' Low Power'),
          h('button', { type: 'button', class: 'btn small ghost', onclick: () => setFilter('deviceId', d.deviceId) }, 'Pushes →')),
        accountControls(d, base),
        d.apps.length ? h('table', { class: 'grid apps' }, h('thead', null, h('tr', null, ['App', 'Tokens', 'Permission', 'App state', 'Mode', ''].map((x) => h('th', null, x)))), h('tbody', null, apps))
          : h('div', { class: 'muted' }, 'No apps installed.'));
    }));
    restoreAccountDrafts(kept);
    // The API pages its lists (1000 at a time by default); the UI shows the first page.
    if (state.moreDevices) root.append(h('div', { class: 'muted small' }, `The first ${state.devices.length} devices, oldest first; the admin API lists the rest page by page (GET /api/v1/devices?cursor=…).`));
  }

  // ---------------------------------------------------------------- backend calls

  const CALL_STATE_CLASS = { pending: 's-info', retrying: 's-warn', done: 's-ok', failed: 's-err', dropped: 's-grey' };
  const CALL_RANK = { pending: 0, retrying: 1, done: 2, failed: 2, dropped: 2 };
  /** How far a call has got; an event never replaces a call with an older version of it. */
  const callProgress = (c) => (c.attempts || 0) * 10 + (CALL_RANK[c.state] ?? 0);
  const callTime = (c) => (c.atMs != null ? c.atMs : c.at ? Date.parse(c.at) : NaN);
  const callMatches = (c) => (!state.callsFilter.deviceId || c.deviceId === state.callsFilter.deviceId)
    && (!state.callsFilter.hook || c.hook === state.callsFilter.hook);

  let callsGeneration = 0, callsLoading = false, callBuffer = [];
  const callQueue = new Map();
  let callFlushTimer = null;

  /** (Re)loads the calls: every device's, or the filtered device's (GET /api/v1/devices/{id}/backend-calls). */
  async function loadCalls() {
    const generation = ++callsGeneration;
    const deviceId = state.callsFilter.deviceId;
    callsLoading = true;
    callBuffer = [];
    let data;
    try {
      data = await api('GET', deviceId ? `/api/v1/devices/${enc(deviceId)}/backend-calls` : '/api/v1/backend-calls');
    } catch (e) {
      if (generation !== callsGeneration) return;
      if (deviceId && e.status === 404) {
        data = { calls: [] }; // the device is gone
      } else {
        // Keep what is shown, with the events that came meanwhile.
        callsLoading = false;
        for (const c of callBuffer) mergeCall(c);
        callBuffer = [];
        renderCalls();
        return; // like the other refreshes: the event stream's indicator tells that the emulator is unreachable
      }
    }
    if (generation !== callsGeneration) return;
    // A poll that brings nothing new leaves the rows alone (and what the user selected in them).
    const json = `${deviceId}\n${JSON.stringify(data.calls)}`;
    if (json === state.callsJSON && !callBuffer.length) { callsLoading = false; return; }
    state.callsJSON = json;
    if (deviceId) {
      for (const [id, c] of state.calls) if (c.deviceId === deviceId) state.calls.delete(id);
    } else {
      state.calls.clear();
    }
    for (const c of data.calls || []) {
      if (c.deviceId == null && deviceId) c.deviceId = deviceId;
      state.calls.set(c.id, c);
    }
    callsLoading = false;
    for (const c of callBuffer) mergeCall(c);
    callBuffer = [];
    trimCalls();
    renderCalls();
  }

  function enqueueCall(c) {
    state.callEventsSeen = true;
    if (callsLoading) { callBuffer.push(c); return; }
    callQueue.set(c.id, c);
    if (!callFlushTimer) callFlushTimer = setTimeout(flushCalls, 30);
  }
  function flushCalls() {
    callFlushTimer = null;
    const batch = [...callQueue.values()].sort((a, b) => a.id - b.id);
    callQueue.clear();
    const many = batch.length > 50;
    for (const c of batch) if (mergeCall(c) && !many) updateCallRow(c);
    trimCalls();
    if (many) renderCalls(); else updateCallCounts();
  }
  /** Takes a call (from an event or a load) unless an equally new version is already here. */
  function mergeCall(c) {
    const old = state.calls.get(c.id);
    if (old && callProgress(c) < callProgress(old)) return false;
    state.calls.set(c.id, c);
    return true;
  }
  function trimCalls() {
    if (state.calls.size <= MAX_CALLS) return;
    const ids = [...state.calls.keys()].sort((a, b) => a - b);
    for (const id of ids.slice(0, state.calls.size - MAX_CALLS)) {
      state.calls.delete(id);
      state.expandedCalls.delete(id);
      const body = state.callBodies.get(id);
      if (body) { body.remove(); state.callBodies.delete(id); }
    }
  }

  function callResult(c) {
    const parts = [];
    if (c.status != null) parts.push(statusPill(c.status));
    if (c.state && !(c.state === 'done' && c.status != null)) {
      parts.push(parts.length ? ' ' : null, h('span', { class: `badge ${CALL_STATE_CLASS[c.state] || 's-grey'}`, dataset: { field: 'state' } }, c.state));
    }
    if (c.error) parts.push(' ', h('span', { class: 'call-error', title: c.error }, c.error));
    return parts.length ? parts : h('span', { class: 'muted' }, '—');
  }

  function parsedResponse(text) {
    if (typeof text !== 'string') return text;
    try { return JSON.parse(text); } catch { return text; }
  }

  function callDetail(c) {
    const headers = c.headers && typeof c.headers === 'object'
      ? (Array.isArray(c.headers) ? c.headers : Object.entries(c.headers).map(([name, value]) => ({ name, value: String(value) }))) : [];
    const finished = c.finishedAt ? `${fmtDateTime(c.finishedAt)}${since(c.at, c.finishedAt)}` : null;
    return h('div', { class: 'call-view' },
      kv([['Request', h('span', { class: 'mono', style: 'word-break:break-all' }, `${c.method || ''} ${c.url || ''}`.trim())],
        ['Queued', c.at ? fmtDateTime(c.at) : null], ['Finished', finished], ['State', c.state], ['Attempts', c.attempts],
        ['Account', c.userId], ['Token', c.token ? h('span', { class: 'mono', style: 'word-break:break-all' }, c.token) : null],
        c.error ? ['Error', h('span', { class: 'call-error' }, c.error)] : null]),
      h('div', { class: 'two' },
        h('div', null, h('div', { class: 'small muted' }, 'request headers'), headerTable(headers),
          h('div', { class: 'small muted', style: 'margin-top:8px' }, 'request body'),
          c.body == null ? h('div', { class: 'muted' }, 'no body') : h('div', { class: 'call-body' }, jsonView(c.body))),
        h('div', null, h('div', { class: 'small muted' }, c.status != null ? `answer: ${c.status}` : 'answer'),
          c.response == null || c.response === '' ? h('div', { class: 'muted' }, c.status != null ? 'empty body' : 'no answer yet')
            : h('div', { class: 'call-response' }, jsonView(parsedResponse(c.response))))));
  }

  /** One call: its row and, when expanded, its details, in a <tbody> of its own. */
  function callBody(c) {
    const open = state.expandedCalls.has(c.id);
    const t = callTime(c);
    const request = `${c.method || ''} ${c.url || ''}`.trim();
    const body = h('tbody', { class: `call${open ? ' open' : ''}`, dataset: { id: c.id, hook: c.hook || '', state: c.state || '' } },
      h('tr', { class: 'call-row', title: 'Click for the request and the answer' },
        h('td', { class: 'k-time', title: c.at || '' }, isNaN(t) ? '—' : fmtTime(t)),
        h('td', { class: 'mono k-device', title: c.deviceId || '' }, c.deviceId || '—'),
        h('td', { class: 'k-app', title: c.bundleId || '' }, c.bundleId || '—'),
        h('td', null, h('span', { class: 'hook', dataset: { field: 'hook' } }, c.hook || '—')),
        h('td', { class: 'k-request', title: request }, c.method ? h('span', { class: 'method', dataset: { field: 'method' } }, c.method) : null, c.method ? ' ' : null,
          h('span', { class: 'url', dataset: { field: 'url' } }, c.url || '')),
        h('td', { class: 'k-result' }, callResult(c)),
        h('td', { class: 'num' }, c.attempts != null ? String(c.attempts) : '—'),
        h('td', { class: 'num' }, c.durationMs != null ? `${c.durationMs} ms` : '—'),
        h('td', { class: 'k-user', title: c.userId || '' }, c.userId ?? '—')));
    if (open) body.append(h('tr', { class: 'call-detail' }, h('td', { colspan: 9 }, callDetail(c))));
    return body;
  }

  function renderCalls() {
    if (state.tab !== 'backend') { state.callsDirty = true; updateCallCounts(); return; }
    state.callsDirty = false;
    const list = [...state.calls.values()].filter(callMatches).sort((a, b) => b.id - a.id).slice(0, MAX_CALL_ROWS);
    for (const body of state.callBodies.values()) body.remove();
    state.callBodies.clear();
    const table = $('#calls');
    for (const c of list) {
      const body = callBody(c);
      state.callBodies.set(c.id, body);
      table.append(body);
    }
    updateCallCounts();
  }

  /** An event changed one call: replace its <tbody>, or put a new one in its place (newest first). */
  function updateCallRow(c) {
    if (state.tab !== 'backend') { state.callsDirty = true; return; }
    const existing = state.callBodies.get(c.id);
    if (!callMatches(c)) {
      if (existing) { existing.remove(); state.callBodies.delete(c.id); }
      return;
    }
    const body = callBody(c);
    if (existing) existing.replaceWith(body);
    else {
      let before = $('#calls > tbody');
      while (before && Number(before.dataset.id) > c.id) before = before.nextElementSibling;
      $('#calls').insertBefore(body, before);
      body.classList.add('fresh');
    }
    state.callBodies.set(c.id, body);
    while (state.callBodies.size > MAX_CALL_ROWS) {
      const last = $('#calls > tbody:last-of-type');
      state.callBodies.delete(Number(last.dataset.id));
      last.remove();
    }
  }

  function toggleCall(id) {
    if (state.expandedCalls.has(id)) state.expandedCalls.delete(id); else state.expandedCalls.add(id);
    const c = state.calls.get(id);
    if (c) updateCallRow(c);
  }

  function updateCallCounts() {
    $('#count-calls').textContent = state.calls.size;
    if (state.tab !== 'backend') return;
    const shown = state.callBodies.size;
    const matching = [...state.calls.values()].filter(callMatches).length;
    $('#calls-empty').hidden = shown > 0;
    $('#calls').hidden = shown === 0;
    const f = state.callsFilter;
    const filtered = Boolean((f.deviceId || f.hook) && state.calls.size);
    $('#calls-empty-what').textContent = filtered ? 'No backend calls match the filter.' : 'No backend calls yet.';
    $('#calls-empty-hint').hidden = filtered;
    $('#calls-shown').textContent = shown ? `${shown} shown${matching > shown ? ` of ${matching}` : ''}${matching !== state.calls.size ? ` (${state.calls.size} loaded)` : ''} · click a call for its request and answer` : '';
  }

  function fillCallDevices() {
    const select = $('#calls-filter').elements.deviceId;
    if (document.activeElement === select) return; // not from under the user's pointer; the next refresh catches up
    const current = state.callsFilter.deviceId;
    const ids = state.devices.map((d) => d.deviceId);
    if (current && !ids.includes(current)) ids.push(current);
    select.replaceChildren(h('option', { value: '' }, 'every device'), ...ids.map((id) => h('option', { value: id, selected: id === current }, id)));
    select.value = current;
  }

  function setCallsFilter(changes) {
    const deviceChanged = changes.deviceId !== undefined && changes.deviceId !== state.callsFilter.deviceId;
    Object.assign(state.callsFilter, changes);
    const form = $('#calls-filter');
    form.elements.hook.value = state.callsFilter.hook;
    fillCallDevices();
    for (const el of [form.elements.deviceId, form.elements.hook]) el.classList.toggle('active', Boolean(el.value));
    if (deviceChanged) loadCalls();
    renderCalls();
  }

  function showCallsOf(deviceId) {
    showTab('backend');
    setCallsFilter({ deviceId });
  }

  // ---------------------------------------------------------------- checks

  let checksTimer = null;
  function scheduleChecks() { clearTimeout(checksTimer); checksTimer = setTimeout(refreshChecks, 100); }
  async function refreshChecks() {
    let data;
    try { data = await newest('checks', api('GET', '/api/v1/checks', undefined, { allow: [409] })); } catch { return; }
    if (data === STALE) return;
    const json = JSON.stringify(data);
    if (json === state.checksJSON) return;
    state.checksJSON = json;
    state.checks = data;
    renderChecks();
  }

  function renderChecks() {
    const el = $('#checks');
    const c = state.checks;
    if (!c) { el.hidden = true; return; }
    const n = c.crossAccountDeliveries || 0;
    const failed = n > 0 || c.ok === false;
    el.hidden = false;
    el.dataset.state = failed ? 'fail' : 'ok';
    el.dataset.count = String(n);
    el.textContent = n ? `${n.toLocaleString('en-US')} cross-account deliver${n === 1 ? 'y' : 'ies'}`
      : failed ? `${(c.failures || []).length} failed checks` : 'checks OK';
    if ($('#checks-dialog').open) renderChecksDialog();
  }

  function renderChecksDialog() {
    const c = state.checks || { failures: [] };
    const n = c.crossAccountDeliveries || 0;
    const failures = (c.failures || []).slice(-100).reverse();
    $('#checks-summary').textContent = n
      ? `${n} push${n === 1 ? ' was' : 'es were'} delivered while another account than the one the payload names was logged in on the device${c.strict ? ' (strict mode: GET /api/v1/checks answers 409)' : ''}.${failures.length < n ? ` The newest ${failures.length}:` : ''}`
      : 'No cross-account deliveries: every push that named an account (the app backend\'s addresseePointer) reached a device where that account was logged in.';
    $('#checks-failures').replaceChildren(...failures.map((f) => h('li', null,
      h('div', null, f.message || f.check || 'failed'),
      h('div', { class: 'small muted' }, fmtDateTime(f.at), f.bundleId ? ` · ${f.bundleId}` : '', ' · ',
        f.apnsId ? h('button', { type: 'button', class: 'tok', title: 'Show the record', onclick: () => { $('#checks-dialog').close(); showRecord(f.sequence, f.apnsId); } }, f.apnsId) : null))));
  }

  /** Selects a record in the timeline, fetching it when it is not loaded. */
  async function showRecord(sequence, apnsId) {
    showTab('timeline');
    if (!state.rows.has(sequence)) {
      const r = await act(api('GET', `/api/v1/notifications/${enc(apnsId)}`));
      if (!r) return;
      upsert(r);
      updateCounts();
      sequence = r.sequence;
    }
    select(sequence, { scroll: true });
  }

  // ---------------------------------------------------------------- app backend (hooks) dialog

  const HOOKS = ['register', 'bind', 'unbind', 'fetch'];
  let backendBundle = null;

  async function openBackend(bundleId) {
    backendBundle = bundleId;
    $('#backend-title').textContent = `Backend of ${bundleId}`;
    $('#backend-error').textContent = '';
    $('#backend-view').replaceChildren(h('div', { class: 'muted' }, 'Loading…'));
    $('#backend-json').value = '';
    $('#backend-delete').hidden = true;
    const dialog = $('#backend-dialog');
    if (!dialog.open) dialog.showModal();
    let backend = null;
    try {
      backend = await api('GET', `/api/v1/apps/${enc(bundleId)}/backend`);
    } catch (e) {
      if (backendBundle !== bundleId) return;
      if (e.status !== 404) $('#backend-error').textContent = e.message;
    }
    if (backendBundle !== bundleId) return;
    showBackend(backend);
  }

  function showBackend(b) {
    $('#backend-delete').hidden = !b;
    $('#backend-json').value = b ? JSON.stringify(b, null, 2) : '';
    if (!b) {
      $('#backend-view').replaceChildren(h('p', { class: 'muted', id: 'backend-none' }, 'No backend: the app calls nothing, and pushes to it are not checked against the account logged in.'));
      return;
    }
    const hooks = HOOKS.filter((k) => b[k]);
    $('#backend-view').replaceChildren(
      hooks.length ? h('table', { class: 'grid hooks' }, h('thead', null, h('tr', null, ['Hook', 'Request', 'Body'].map((x) => h('th', null, x)))),
        h('tbody', null, hooks.map((k) => h('tr', { dataset: { hook: k } },
          h('td', null, h('span', { class: 'hook' }, k)),
          h('td', { class: 'mono', style: 'word-break:break-all' }, `${b[k].method || 'POST'} ${b[k].url || ''}`,
            b[k].headers && Object.keys(b[k].headers).length ? h('div', { class: 'muted small' }, Object.entries(b[k].headers).map(([n, v]) => `${n}: ${v}`).join('\n')) : null),
          h('td', null, b[k].body == null ? h('span', { class: 'muted' }, 'none') : jsonView(b[k].body))))))
        : h('p', { class: 'muted' }, 'No hooks: the app calls nothing.'),
      kv([['Addressee', b.addresseePointer ? h('span', { class: 'mono', id: 'backend-pointer' }, b.addresseePointer) : 'none: pushes are not checked against the account'],
        ['Timeout', b.timeoutMs != null ? `${b.timeoutMs} ms per attempt` : null], ['Attempts', b.maxAttempts != null ? `at most ${b.maxAttempts}` : null]]));
  }

  async function saveBackend() {
    const bundleId = backendBundle;
    let body;
    $('#backend-error').textContent = '';
    const text = $('#backend-json').value.trim();
    try { body = JSON.parse(text || '{}'); } catch (e) { $('#backend-error').textContent = `Not JSON: ${e.message}`; return; }
    try {
      const saved = await api('PUT', `/api/v1/apps/${enc(bundleId)}/backend`, body);
      if (backendBundle !== bundleId) return;
      showBackend(saved);
      toast(`Backend of ${bundleId} saved`);
    } catch (e) {
      $('#backend-error').textContent = e.message;
    }
  }

  async function deleteBackend() {
    const bundleId = backendBundle;
    $('#backend-error').textContent = '';
    try {
      await api('DELETE', `/api/v1/apps/${enc(bundleId)}/backend`);
      if (backendBundle !== bundleId) return;
      showBackend(null);
      toast(`Backend of ${bundleId} removed`);
    } catch (e) {
      $('#backend-error').textContent = e.message;
    }
  }

  function describeMatch(m) {
    const parts = Object.entries(m || {}).map(([k, v]) => h('span', { class: 'chip', title: `${k}: ${v}` }, `${k} `, h('b', { class: k === 'token' ? 'mono' : null }, k === 'token' ? shortToken(v) : String(v))));
    return parts.length ? parts : h('span', { class: 'muted' }, 'every push');
  }
  function describeAction(a) {
    const parts = [];
    if (a.status) parts.push(h('span', { class: `pill ${statusClass(a.status)}` }, String(a.status)), ' ', a.reason || '');
    if (a.rstStream != null) parts.push(`RST_STREAM code ${a.rstStream}`);
    if (a.goAway) parts.push(`GOAWAY${a.goAway.reason ? ` ${a.goAway.reason}` : ''} (code ${a.goAway.errorCode ?? 0}${a.goAway.lastStreamId != null ? `, last stream ${a.goAway.lastStreamId}` : ''})`);
    if (a.close) parts.push('close the connection');
    if (a.maxConcurrentStreams != null) parts.push(`MAX_CONCURRENT_STREAMS ${a.maxConcurrentStreams}`);
    if (a.delayMs) parts.push(`${parts.length ? ' after ' : 'delay '}${a.delayMs} ms${a.jitterMs ? ` ±${a.jitterMs}` : ''}`);
    return parts;
  }

  async function refreshFaults() {
    let data;
    try { data = await newest('faults', api('GET', '/api/v1/faults')); } catch { return; }
    if (data === STALE) return;
    const json = JSON.stringify(data.faults);
    if (json === state.faultsJSON) return;
    state.faultsJSON = json;
    state.faults = data.faults;
    $('#faults').replaceChildren(...state.faults.map((f) => h('tr', { dataset: { id: f.id } },
      h('td', { class: 'id' }, f.id), h('td', null, describeMatch(f.match)), h('td', null, describeAction(f.action || {})),
      h('td', null, [f.times != null ? `${f.times}×` : 'always', f.after ? `after ${f.after}` : null, f.probability != null ? `p=${f.probability}` : null].filter(Boolean).join(', ')),
      h('td', { class: 'num' }, String(f.matched)), h('td', { class: 'num' }, String(f.fired)),
      h('td', { class: 'num' }, h('button', { type: 'button', class: 'btn small danger-outline', title: `Delete rule ${f.id}`,
        onclick: () => act(api('DELETE', `/api/v1/faults/${enc(f.id)}`), `Rule ${f.id} deleted`) }, 'Delete')))));
    $('#faults-empty').hidden = state.faults.length > 0;
    $('#faults-table').hidden = state.faults.length === 0;
    $('#count-faults').textContent = state.faults.length;
  }

  function updateFaultForm() {
    const form = $('#fault-form');
    const kind = form.elements.kind.value;
    for (const label of $$('label[data-for]', form)) label.hidden = label.dataset.for !== kind;
  }

  async function submitFault(e) {
    e.preventDefault();
    const f = e.target.elements;
    const num = (name) => (f[name].value.trim() === '' ? undefined : Number(f[name].value));
    const match = {};
    for (const k of ['token', 'topic', 'pushType', 'environment']) if (f[k].value.trim()) match[k] = f[k].value.trim();
    const action = {};
    switch (f.kind.value) {
      case 'respond': action.status = num('status'); if (f.reason.value.trim()) action.reason = f.reason.value.trim(); break;
      case 'unavailable': action.unavailable = true; break;
      case 'rst': action.rstStream = num('rstCode') ?? 2; break;
      case 'goaway': action.goAway = { errorCode: num('goAwayCode') ?? 0 }; if (f.goAwayReason.value.trim()) action.goAway.reason = f.goAwayReason.value.trim(); break;
      case 'close': action.close = true; break;
      default: break;
    }
    if (num('delayMs')) action.delayMs = num('delayMs');
    const rule = { match, action };
    for (const k of ['times', 'after', 'probability']) if (num(k) !== undefined) rule[k] = num(k);
    $('#fault-error').textContent = '';
    try {
      const created = await api('POST', '/api/v1/faults', rule);
      toast(`Rule ${created.id} added`);
    } catch (err) {
      $('#fault-error').textContent = err.message;
    }
    refreshSide();
  }

  async function submitDevice(e) {
    e.preventDefault();
    const f = e.target.elements;
    const body = { bundleId: f.bundleId.value.trim(), environment: f.environment.value, kind: f.kind.value };
    if (f.deviceId.value.trim()) body.deviceId = f.deviceId.value.trim();
    const created = await act(api('POST', '/api/v1/devices', body));
    if (created) { toast(`Device ${created.deviceId}: token ${shortToken(created.token)}`); f.deviceId.value = ''; }
  }

  // ---------------------------------------------------------------- load

  // Requests are counted from the event stream (a record's first event) into per-second buckets
  // by when the emulator received them; the last WINDOW seconds are kept. The gauges and the
  // run's summary come from GET /api/v1/stats, request latency from the /metrics histogram,
  // polled once a second while the tab is shown. Everything is drawn once a second, never per event.
  const WINDOW = 120; // seconds of history in the charts
  const IDLE_GAP_MS = 5000; // a request after this long without any starts a new run
  const SVGNS = 'http://www.w3.org/2000/svg';
  const LT = {
    buckets: new Map(), // second (browser clock) -> {total, errors, reasons: Map reason -> count, or null}
    seen: new Set(), seenFloor: 0, maxSeq: 0, // record sequences already counted (sequences at or below the floor count as seen)
    lastReceivedMs: 0, // the newest request seen, emulator clock
    runSinceMs: null, runBy: 'page', // null: everything the journal keeps
    offsetMs: 0, // emulator clock minus browser clock, from the last stats answer
    stats: null, statsAt: 0,
    samples: [], // {t, provider, devices, pending}: gauges, one per poll
    latency: [], // {t, count, p50, p90, p99}: request duration over each poll's interval (bucket bounds, seconds)
    delivery: null, // {count, p50, p99}: the delivery-latency histogram over the last poll's interval
    prevDuration: null, prevDelivery: null, // cumulative buckets at the previous poll
    polling: false, peakProvider: 0, peakBacklog: 0,
    nextStatsAt: 0, // the stats walk the run's records: a slow answer spaces the polls out
  };
  const fmtInt = (n) => Number(n).toLocaleString('en-US');
  function fmtNum(v) {
    if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
    if (v >= 1e4) return `${+(v / 1e3).toFixed(1)}k`;
    return String(+v.toFixed(v < 10 ? 2 : 0));
  }
  const fmtSeconds = (s) => (s >= 1 ? `${+s.toFixed(2)} s` : `${+(s * 1000).toPrecision(3)} ms`);
  const fmtMs = (ms) => (ms == null ? '—' : ms < 1000 ? `${ms} ms` : ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : fmtDuration(ms / 1000));
  const reasonKey = (r) => r.reason || (r.status === 0 ? 'stream reset (no status)' : `HTTP ${r.status}`);

  /** Counts a record the first time the event stream brings it (later events are changes to it). */
  function countRequest(r) {
    const seq = r && r.sequence;
    if (typeof seq !== 'number' || seq <= LT.seenFloor || LT.seen.has(seq)) return;
    LT.seen.add(seq);
    if (seq > LT.maxSeq) LT.maxSeq = seq;
    const received = Number(r.receivedAtMs) || Date.now() + LT.offsetMs;
    // After a pause, a new run; unless one was just started (the button, a reset) and this is its first request.
    const fresh = LT.runSinceMs != null && LT.lastReceivedMs < LT.runSinceMs;
    if (received > LT.lastReceivedMs + IDLE_GAP_MS && !fresh) newRun(received, 'gap');
    if (received > LT.lastReceivedMs) LT.lastReceivedMs = received;
    const second = Math.floor((received - LT.offsetMs) / 1000);
    if (second <= Math.floor(Date.now() / 1000) - WINDOW) return;
    let b = LT.buckets.get(second);
    if (!b) LT.buckets.set(second, b = { total: 0, errors: 0, reasons: null });
    b.total++;
    if (r.status !== 200) {
      b.errors++;
      const key = reasonKey(r);
      if (!b.reasons) b.reasons = new Map();
      b.reasons.set(key, (b.reasons.get(key) || 0) + 1);
    }
  }

  /** Records loaded as history are not new requests, and tell when the last one came. */
  function noteHistory(records) {
    for (const r of records) {
      if (typeof r.sequence === 'number') LT.seen.add(r.sequence);
      if (r.receivedAtMs > LT.lastReceivedMs) LT.lastReceivedMs = r.receivedAtMs;
    }
  }

  function newRun(sinceMs, by) {
    LT.runSinceMs = sinceMs;
    LT.runBy = by;
    LT.stats = null;
    LT.nextStatsAt = 0;
    if (state.tab === 'load') { renderRun(); pollLoad(); }
  }

  function loadReset() {
    LT.seen.clear();
    LT.seenFloor = LT.maxSeq = LT.lastReceivedMs = 0;
    LT.peakProvider = LT.peakBacklog = 0;
    LT.prevDuration = LT.prevDelivery = null;
    newRun(Date.now() + LT.offsetMs, 'reset');
  }

  async function apiText(path) {
    for (;;) {
      const res = await fetch(path, { headers: adminToken ? { Authorization: `Bearer ${adminToken}` } : {} });
      if (res.status === 401) { await askForToken(adminToken ? 'That token was not accepted.' : ''); continue; }
      if (!res.ok) throw new Error(`GET ${path}: HTTP ${res.status}`);
      return res.text();
    }
  }

  /** A Prometheus histogram's cumulative buckets [{le, count}], summed over label sets, by bound. */
  function histogram(text, name) {
    const byBound = new Map();
    const prefix = `${name}_bucket{`;
    for (const line of text.split('\n')) {
      if (!line.startsWith(prefix)) continue;
      const m = /le="([^"]+)"[^}]*\}\s+(\S+)/.exec(line);
      if (!m) continue;
      const le = m[1] === '+Inf' ? Infinity : Number(m[1]);
      byBound.set(le, (byBound.get(le) || 0) + Number(m[2]));
    }
    return [...byBound].map(([le, count]) => ({ le, count })).sort((a, b) => a.le - b.le);
  }
  /** The buckets filled since `prev` (all of them when the counters were reset meanwhile). */
  function histogramDelta(cur, prev) {
    if (!prev || prev.length !== cur.length || !cur.length || cur[cur.length - 1].count < prev[prev.length - 1].count) return cur;
    return cur.map((b, i) => ({ le: b.le, count: b.count - prev[i].count }));
  }
  /** The upper bound of the bucket that holds quantile q, or null without observations. */
  function quantileBound(buckets, q) {
    const total = buckets.length ? buckets[buckets.length - 1].count : 0;
    if (!total) return null;
    for (const b of buckets) if (b.count >= q * total) return b.le;
    return Infinity;
  }
  function fmtBound(le, buckets) {
    if (le == null) return '—';
    if (le === Infinity) {
      const finite = (buckets || []).filter((b) => b.le !== Infinity);
      return finite.length ? `> ${fmtSeconds(finite[finite.length - 1].le)}` : '> max';
    }
    return `≤ ${fmtSeconds(le)}`;
  }

  async function pollStats() {
    const since = LT.runSinceMs == null ? 0 : Math.floor(LT.runSinceMs);
    const asked = Date.now();
    const stats = await api('GET', `/api/v1/stats?since=${since}`);
    const answered = Date.now();
    LT.nextStatsAt = asked + Math.max(1000, 5 * (answered - asked)) - 100;
    const serverNow = Date.parse(stats.now);
    if (!isNaN(serverNow)) LT.offsetMs = serverNow - (asked + answered) / 2;
    if (stats.lastAt && Date.parse(stats.lastAt) > LT.lastReceivedMs) LT.lastReceivedMs = Date.parse(stats.lastAt);
    LT.samples.push({ t: answered, provider: stats.providerConnections, devices: stats.deviceConnections, pending: stats.pendingDeliveries });
    while (LT.samples.length && LT.samples[0].t < answered - WINDOW * 1000) LT.samples.shift();
    LT.peakProvider = Math.max(LT.peakProvider, stats.providerConnections || 0);
    LT.peakBacklog = Math.max(LT.peakBacklog, stats.pendingDeliveries || 0);
    if (since === (LT.runSinceMs == null ? 0 : Math.floor(LT.runSinceMs))) { LT.stats = stats; LT.statsAt = answered; }
  }

  async function pollMetrics() {
    const text = await apiText('/metrics');
    const t = Date.now();
    const duration = histogram(text, 'apns_emulator_request_duration_seconds');
    const delivery = histogram(text, 'apns_emulator_delivery_latency_seconds');
    if (LT.prevDuration) {
      const d = histogramDelta(duration, LT.prevDuration);
      const count = d.length ? d[d.length - 1].count : 0;
      LT.latency.push({ t, count, buckets: d, p50: quantileBound(d, 0.5), p90: quantileBound(d, 0.9), p99: quantileBound(d, 0.99) });
      while (LT.latency.length && LT.latency[0].t < t - WINDOW * 1000) LT.latency.shift();
    }
    if (LT.prevDelivery) {
      const d = histogramDelta(delivery, LT.prevDelivery);
      LT.delivery = { count: d.length ? d[d.length - 1].count : 0, buckets: d, p50: quantileBound(d, 0.5), p99: quantileBound(d, 0.99) };
    }
    LT.prevDuration = duration;
    LT.prevDelivery = delivery;
  }

  async function pollLoad() {
    if (LT.polling) return;
    LT.polling = true;
    try {
      await Promise.all([Date.now() >= LT.nextStatsAt ? pollStats().catch(() => {}) : null, pollMetrics().catch(() => {})]);
    } finally {
      LT.polling = false;
    }
    if (state.tab === 'load') renderPolled();
  }

  // -- drawing

  function svgEl(tag, attrs, ...kids) {
    const el = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, String(v));
    for (const kid of kids) if (kid != null) el.append(kid instanceof Node ? kid : String(kid));
    return el;
  }
  function niceCeil(v) {
    if (!(v > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  /** An SVG path through [t, v] points; null values and gaps longer than maxGap (ms) break it. */
  function pathOf(points, x, y, maxGap) {
    let d = '', prevT = null;
    for (const [t, v] of points) {
      if (v == null || !isFinite(t)) { prevT = null; continue; }
      d += `${prevT == null || t - prevT > maxGap ? 'M' : 'L'}${x(t).toFixed(1)} ${y(v).toFixed(1)}`;
      prevT = t;
    }
    return d;
  }
  /**
   * Draws time series into an <svg> sized by CSS: x from t0 to t1 (browser ms), y linear from 0
   * to a round maximum, or logarithmic over `log` ([lo, hi], with `ticks`). A series is
   * {cls, points: [[t, v]], area, dots}.
   */
  function drawChart(svg, { t0, t1, series, yMax = 1, log = null, ticks = null, yFmt = fmtNum, maxGap = 2500 }) {
    const w = Math.max(160, Math.round(svg.getBoundingClientRect().width) || 300);
    const hgt = Math.max(40, Math.round(svg.getBoundingClientRect().height) || 120);
    const left = 46, right = 8, top = 6, bottom = 16;
    const x = (t) => left + ((t - t0) / (t1 - t0)) * (w - left - right);
    let y, tickValues;
    if (log) {
      const [lo, hi] = log.map(Math.log10);
      y = (v) => top + (1 - (Math.log10(Math.min(log[1], Math.max(log[0], v))) - lo) / (hi - lo)) * (hgt - top - bottom);
      tickValues = ticks;
    } else {
      const max = niceCeil(yMax);
      y = (v) => top + (1 - Math.min(v, max) / max) * (hgt - top - bottom);
      tickValues = hgt >= 90 ? [0, max / 2, max] : [0, max];
    }
    const kids = [];
    for (const v of tickValues) {
      kids.push(svgEl('line', { class: 'grid-line', x1: left, x2: w - right, y1: y(v).toFixed(1), y2: y(v).toFixed(1) }),
        svgEl('text', { class: 'axis', x: left - 5, y: (y(v) + 3.5).toFixed(1), 'text-anchor': 'end' }, yFmt(v)));
    }
    const span = (t1 - t0) / 1000;
    for (const [t, label, anchor] of [[t0, span >= 120 ? `−${span / 60} min` : `−${span} s`, 'start'], [(t0 + t1) / 2, span >= 120 ? `−${span / 120} min` : `−${span / 2} s`, 'middle'], [t1, 'now', 'end']]) {
      kids.push(svgEl('text', { class: 'axis', x: x(t).toFixed(1), y: hgt - 3, 'text-anchor': anchor }, label));
    }
    const base = y(log ? log[0] : 0).toFixed(1);
    for (const s of series) {
      const points = s.points.filter(([t]) => t >= t0 && t <= t1);
      const d = pathOf(points, x, y, maxGap);
      if (s.area && d) {
        const known = points.filter(([, v]) => v != null);
        kids.push(svgEl('path', { class: `area ${s.cls}`, d: `${d}L${x(known[known.length - 1][0]).toFixed(1)} ${base}L${x(known[0][0]).toFixed(1)} ${base}Z` }));
      }
      kids.push(svgEl('path', { class: `line ${s.cls}`, d }));
      const last = [...points].reverse().find(([, v]) => v != null);
      if (s.dots && last) kids.push(svgEl('circle', { class: `dot ${s.cls}`, cx: x(last[0]).toFixed(1), cy: y(last[1]).toFixed(1), r: 2.5 }));
    }
    svg.setAttribute('viewBox', `0 0 ${w} ${hgt}`);
    svg.replaceChildren(...kids);
  }
  function sparkline(values, max) {
    const w = 180, hgt = 20, n = values.length;
    let d = '';
    values.forEach((v, i) => { d += `${i ? 'L' : 'M'}${((i / Math.max(1, n - 1)) * w).toFixed(1)} ${(hgt - 1 - (v / max) * (hgt - 2)).toFixed(1)}`; });
    return svgEl('svg', { class: 'spark', viewBox: `0 0 ${w} ${hgt}`, preserveAspectRatio: 'none', 'aria-hidden': 'true' },
      svgEl('path', { class: 'area k-err', d: `${d}L${w} ${hgt}L0 ${hgt}Z` }), svgEl('path', { class: 'line k-err', d, 'vector-effect': 'non-scaling-stroke' }));
  }
  function setValue(id, text, value) {
    const el = $(id);
    el.textContent = text;
    el.dataset.value = value == null ? '' : String(value);
    return el;
  }

  /** Once a second: the counts of the last complete second, the requests chart, the errors by reason. */
  function renderLoad() {
    const nowSecond = Math.floor(Date.now() / 1000);
    const seconds = [];
    for (let s = nowSecond - WINDOW; s < nowSecond; s++) seconds.push(s);
    const last = LT.buckets.get(nowSecond - 1) || { total: 0, errors: 0 };
    let peak = 0;
    const all = [], errors = [], reasons = new Map();
    seconds.forEach((s, i) => {
      const b = LT.buckets.get(s);
      const t = (s + 1) * 1000;
      all.push([t, b ? b.total : 0]);
      errors.push([t, b ? b.errors : 0]);
      if (!b) return;
      peak = Math.max(peak, b.total);
      if (b.reasons) for (const [k, n] of b.reasons) {
        let e = reasons.get(k);
        if (!e) reasons.set(k, e = { total: 0, series: new Array(WINDOW).fill(0) });
        e.total += n;
        e.series[i] = n;
      }
    });
    setValue('#load-rps', fmtInt(last.total), last.total);
    $('#load-rps-peak').textContent = peak ? `last second · peak ${fmtInt(peak)}/s` : 'last second';
    setValue('#load-eps', fmtInt(last.errors), last.errors).classList.toggle('bad', last.errors > 0);
    $('#load-eps-share').textContent = last.total ? `${Math.round((last.errors / last.total) * 100)}% of the last second` : 'non-200 answers';
    const chart = $('#chart-rps');
    drawChart(chart, { t0: (nowSecond - WINDOW) * 1000, t1: nowSecond * 1000, yMax: Math.max(5, peak),
      series: [{ cls: 'k-all', points: all, area: true }, { cls: 'k-err', points: errors, area: true }] });
    chart.dataset.latest = String(last.total);
    chart.dataset.peak = String(peak);
    chart.dataset.points = String(all.filter(([, v]) => v > 0).length);

    const rows = [...reasons].sort((a, b) => b[1].total - a[1].total);
    const max = Math.max(1, ...rows.map(([, e]) => Math.max(...e.series)));
    $('#load-reasons tbody').replaceChildren(...rows.slice(0, 10).map(([k, e]) => h('tr', { dataset: { reason: k, count: e.total } },
      h('td', { class: 'reason' }, k), h('td', { class: 'spark-cell' }, sparkline(e.series, max)),
      h('td', { class: 'num' }, fmtInt(e.total)), h('td', { class: 'num' }, fmtInt(e.series[WINDOW - 1])))));
    $('#load-reasons').hidden = rows.length === 0;
    $('#load-reasons-empty').hidden = rows.length > 0;
    const filtered = Object.entries(state.filters);
    const note = $('#load-filtered');
    note.hidden = filtered.length === 0;
    note.textContent = filtered.length ? `live counts only for ${filtered.map(([k, v]) => `${k}=${v}`).join(' ')} (the timeline's filters)` : '';
  }

  /** After each poll: gauges, latency, and the run's summary. */
  function renderPolled() {
    const s = LT.samples[LT.samples.length - 1];
    if (s) {
      setValue('#load-provider', fmtInt(s.provider), s.provider).dataset.peak = String(LT.peakProvider);
      $('#load-provider-peak').textContent = `open now · peak ${fmtInt(LT.peakProvider)}`;
      setValue('#load-devices', fmtInt(s.devices), s.devices);
      setValue('#load-backlog', fmtInt(s.pending), s.pending).dataset.peak = String(LT.peakBacklog);
      $('#load-backlog-peak').textContent = `pending deliveries · peak ${fmtInt(LT.peakBacklog)}`;
    }
    const now = Date.now(), t0 = now - WINDOW * 1000;
    const conn = $('#chart-connections'), backlog = $('#chart-backlog');
    const recent = LT.samples.filter((x) => x.t >= t0);
    drawChart(conn, { t0, t1: now, maxGap: 6000, yMax: Math.max(4, ...recent.map((x) => x.provider)), series: [{ cls: 'k-conn', points: recent.map((x) => [x.t, x.provider]), dots: true }] });
    drawChart(backlog, { t0, t1: now, maxGap: 6000, yMax: Math.max(10, ...recent.map((x) => x.pending)), series: [{ cls: 'k-backlog', points: recent.map((x) => [x.t, x.pending]), dots: true }] });
    conn.dataset.max = String(Math.max(0, ...recent.map((x) => x.provider)));
    backlog.dataset.max = String(Math.max(0, ...recent.map((x) => x.pending)));

    const lat = LT.latency.filter((x) => x.t >= t0);
    const latest = [...lat].reverse().find((x) => x.count > 0);
    setValue('#load-p99', latest ? fmtBound(latest.p99, latest.buckets) : '—', latest ? latest.p99 : null);
    const figures = [];
    if (latest) {
      for (const q of ['p50', 'p90', 'p99']) figures.push(h('span', { class: `figure k-${q}`, dataset: { quantile: q, value: latest[q] } }, h('b', null, q), ' ', fmtBound(latest[q], latest.buckets)));
      figures.push(h('span', { class: 'muted small' }, `over ${fmtInt(latest.count)} requests${latest === lat[lat.length - 1] ? ' in the last second' : ' (the last busy second)'}`));
    } else figures.push(h('span', { class: 'muted' }, 'No requests in the last 2 minutes.'));
    const dl = LT.delivery;
    if (dl && dl.count) figures.push(h('span', { class: 'muted small', title: 'apns_emulator_delivery_latency_seconds: response → device ack, device sockets only' },
      `device ack p50 ${fmtBound(dl.p50, dl.buckets)}, p99 ${fmtBound(dl.p99, dl.buckets)}`));
    $('#load-latency').replaceChildren(...figures);
    const latencyChart = $('#chart-latency');
    const point = (q) => lat.map((x) => [x.t, x.count ? x[q] : null]);
    drawChart(latencyChart, { t0, t1: now, log: [0.0001, 5], ticks: [0.0001, 0.001, 0.01, 0.1, 1], yFmt: fmtSeconds, maxGap: 2500,
      series: ['p50', 'p90', 'p99'].map((q) => ({ cls: `k-${q}`, points: point(q), dots: true })) });
    latencyChart.dataset.samples = String(lat.filter((x) => x.count > 0).length);
    renderRun();
  }

  function renderRun() {
    const st = LT.stats;
    const serverNow = st ? Date.parse(st.now) : NaN;
    const lastAt = st && st.lastAt ? Date.parse(st.lastAt) : NaN;
    const active = st && st.requests > 0 && serverNow - lastAt < IDLE_GAP_MS;
    $('#load-run-title').textContent = active ? 'Current run' : 'Last run';
    $('#load-run').dataset.state = !st ? 'loading' : active ? 'running' : 'idle';
    const by = { button: 'Start new run', gap: 'first request after a pause', reset: 'reset', page: '' }[LT.runBy];
    $('#load-run-since').textContent = LT.runSinceMs == null ? 'everything the journal keeps'
      : `since ${fmtTime(LT.runSinceMs)}${by ? ` (${by})` : ''}`;
    setValue('#run-requests', st ? fmtInt(st.requests) : '…', st ? st.requests : '');
    $('#run-duration').textContent = st && st.requests ? fmtMs(st.durationMs) : '—';
    $('#run-rps').textContent = st && st.requestsPerSecond != null ? fmtInt(st.requestsPerSecond) : '—';
    const none = () => h('span', { class: 'muted' }, 'none');
    const entries = (o) => Object.entries((st && o && st[o]) || {});
    const status = entries('byStatus').sort((a, b) => Number(a[0]) - Number(b[0]));
    $('#run-status').replaceChildren(...(status.length ? status.map(([k, n]) => h('span', { class: 'run-item', dataset: { status: k, count: n } }, statusPill(Number(k)), ' ', fmtInt(n))) : [none()]));
    const reasons = entries('byReason').sort((a, b) => b[1] - a[1]);
    $('#run-reasons').replaceChildren(...(reasons.length ? reasons.map(([k, n]) => h('span', { class: 'run-item', dataset: { reason: k, count: n } }, h('b', null, k), ' ', fmtInt(n))) : [none()]));
    const outcomes = entries('byOutcome').sort((a, b) => b[1] - a[1]);
    $('#run-outcomes').replaceChildren(...(outcomes.length ? outcomes.map(([k, n]) => h('span', { class: 'run-item', dataset: { outcome: k, count: n } }, outcomeBadge(k), ' ', fmtInt(n))) : [none()]));
    const dl = st && st.deliveryLatencyMs;
    $('#run-latency').replaceChildren(...(dl && dl.count
      ? [...['p50', 'p90', 'p99', 'max'].map((q) => h('span', { class: 'run-item', dataset: { quantile: q, value: dl[q] } }, h('b', null, q), ` ${fmtMs(dl[q])}`)),
        h('span', { class: 'muted' }, `of ${fmtInt(dl.count)} delivered`)]
      : [none()]));
    $('#run-incomplete').hidden = !(st && st.journalMayBeIncomplete);
  }

  /** When the tab is shown: draw now, then once a second. */
  function loadShown() {
    renderLoad();
    renderRun();
    pollLoad();
  }

  function loadTick() {
    const second = Math.floor(Date.now() / 1000);
    for (const k of LT.buckets.keys()) if (k < second - WINDOW) LT.buckets.delete(k);
    if (LT.seen.size > 200000) {
      LT.seenFloor = LT.maxSeq - 100000;
      for (const seq of LT.seen) if (seq <= LT.seenFloor) LT.seen.delete(seq);
    }
    const last = LT.buckets.get(second - 1);
    const badge = $('#count-rps');
    badge.hidden = !last;
    badge.textContent = last ? `${fmtNum(last.total)}/s` : '';
    if (state.tab === 'load' && !document.hidden) { renderLoad(); pollLoad(); }
  }

  function startLoad() {
    $('#load-new-run').addEventListener('click', () => newRun(Date.now() + LT.offsetMs, 'button'));
    // Just after each second ends, so the last complete second is counted.
    const schedule = () => setTimeout(() => { loadTick(); schedule(); }, 1200 - (Date.now() % 1000));
    schedule();
    pollStats().catch(() => {}); // the emulator's clock, and when the last request came
    window.addEventListener('resize', debounce(() => { if (state.tab === 'load') { renderLoad(); renderPolled(); } }, 150));
  }

  // ---------------------------------------------------------------- tabs, keys, start

  function showTab(tab) {
    if (!TABS.includes(tab)) tab = 'timeline';
    state.tab = tab;
    for (const b of $$('.tabs button')) b.setAttribute('aria-selected', String(b.dataset.tab === tab));
    for (const p of $$('.panel')) p.hidden = p.id !== `panel-${tab}`;
    writeHash();
    if (tab === 'timeline' && queue.size) { arrived = 0; flush(); }
    if (tab === 'backend' && state.callsDirty) renderCalls();
    if (tab === 'load') loadShown();
    if (tab !== 'timeline') refreshSide();
  }

  function onKey(e) {
    const t = e.target;
    const typing = t instanceof HTMLInputElement || t instanceof HTMLSelectElement || t instanceof HTMLTextAreaElement;
    if (e.key === 'Escape') {
      if (typing) { t.blur(); return; }
      if (state.selected != null) select(null);
      return;
    }
    if (typing || e.ctrlKey || e.metaKey || e.altKey || $$('dialog').some((d) => d.open)) return;
    const key = e.key;
    if (/^[1-5]$/.test(key)) { showTab(TABS[Number(key) - 1]); return; }
    if (state.tab !== 'timeline') return;
    if (key === 'j' || key === 'ArrowDown') { e.preventDefault(); move(1); }
    else if (key === 'k' || key === 'ArrowUp') { e.preventDefault(); move(-1); }
    else if (key === 'Home') { e.preventDefault(); move(-Infinity); }
    else if (key === 'End') { e.preventDefault(); move(Infinity); }
    else if (key === '/') { e.preventDefault(); $('#q').focus(); }
    else if (key === 't') { const r = state.records.get(state.selected); if (r) setFilter('token', state.filters.token === r.token ? '' : r.token); }
  }

  function debounce(fn, ms) { let t; return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); }; }

  async function start() {
    // Ask for the token (if one is needed) before anything else talks to the API.
    $('#login').addEventListener('cancel', (e) => e.preventDefault());
    try { await api('GET', '/api/v1/info'); } catch { /* refreshInfo reports later */ }
    readHash();
    const debounced = debounce(applyFilters, 250);
    $('#filters').addEventListener('input', (e) => (e.target.tagName === 'SELECT' ? applyFilters() : debounced()));
    $('#filters').addEventListener('submit', (e) => { e.preventDefault(); applyFilters(); });
    $('#clear-filters').addEventListener('click', clearFilters);
    $('#rows').addEventListener('click', (e) => {
      const tok = e.target.closest('.tok');
      if (tok) { setFilter('token', tok.dataset.token); return; }
      const tr = e.target.closest('tr');
      if (tr) select(Number(tr.dataset.seq));
    });
    for (const b of $$('.tabs button')) b.addEventListener('click', () => showTab(b.dataset.tab));
    $('#reset').addEventListener('click', async () => {
      if (!await confirmDialog('Reset the emulator to its configured start state? All records and runtime devices and fault rules go.', 'Reset')) return;
      const done = await act(api('POST', '/api/v1/reset'), 'Reset done');
      if (done) { clearRecords(); updateCounts(); }
    });
    $('#delete-records').addEventListener('click', async () => {
      const q = serverQuery();
      if (!await confirmDialog(q ? 'Delete every record matching the current filters?' : 'Delete every notification record?', 'Delete')) return;
      const done = await act(api('DELETE', `/api/v1/notifications${q ? `?${q}` : ''}`));
      if (done) { toast(`${done.deleted} records deleted`); load(); }
    });
    $('#fault-form').addEventListener('submit', submitFault);
    $('#fault-form').elements.kind.addEventListener('change', updateFaultForm);
    $('#delete-faults').addEventListener('click', async () => {
      if (await confirmDialog('Delete every fault rule?', 'Delete all')) act(api('DELETE', '/api/v1/faults'), 'All fault rules deleted');
    });
    $('#new-device').addEventListener('submit', submitDevice);
    $('#calls-filter').addEventListener('change', (e) => setCallsFilter({ [e.target.name]: e.target.value }));
    $('#calls-filter').addEventListener('submit', (e) => e.preventDefault());
    $('#calls').addEventListener('click', (e) => {
      const row = e.target.closest('tr.call-row');
      if (row) toggleCall(Number(row.parentElement.dataset.id));
    });
    $('#checks').addEventListener('click', () => { renderChecksDialog(); $('#checks-dialog').showModal(); });
    $('#backend-save').addEventListener('click', saveBackend);
    $('#backend-delete').addEventListener('click', async () => {
      if (await confirmDialog(`Remove the backend of ${backendBundle}? Its apps stop calling it, and pushes to it are no longer checked against the account.`, 'Remove')) deleteBackend();
    });
    document.addEventListener('keydown', onKey);
    window.addEventListener('hashchange', () => { readHash(); showTab(state.tab); applyFilters(); });
    updateFaultForm();
    showTab(state.tab);
    applyFilters(); // also connects the event stream
    if (!source) connect();
    renderDetail();
    refreshSide();
    api('GET', '/api/v1/keys').then((k) => { state.keys = k.keys || []; updateCounts(); }, () => {});
    setInterval(() => { if (!document.hidden) refreshSide(); }, 4000);
    setInterval(tickUptime, 1000);
    startLoad();
  }

  start();
})();
