// apns-emulator web UI: a live timeline of notification records, their details, devices and
// fault rules, all through the admin API. Hand-written, no dependencies. Every piece of server
// data reaches the DOM as text (textContent / text nodes / attributes), never as HTML.
'use strict';
(() => {
  const MAX_ROWS = 2000;
  const FILTERS = ['token', 'topic', 'pushType', 'status', 'reason', 'environment', 'outcome', 'deviceId'];
  const AUTHORIZATIONS = ['notDetermined', 'denied', 'authorized', 'provisional', 'ephemeral'];
  const APP_STATES = ['foreground', 'background', 'suspended', 'notRunning', 'terminated'];

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

  async function api(method, path, body) {
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
      if (!res.ok) throw new Error((data && data.error) || `${method} ${path}: HTTP ${res.status}`);
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
        r.pushType, r.outcome, String(r.status), typeof r.payload === 'string' ? r.payload : JSON.stringify(r.payload)]
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
    return h('tr', { dataset: { seq: r.sequence, apnsId: r.apnsId } },
      h('td', { class: 'c-time', title: r.receivedAt }, fmtTime(r.receivedAtMs)),
      h('td', { class: 'c-status' }, statusPill(r.status)),
      h('td', { class: 'c-reason', title: r.reason || '' }, r.reason || ''),
      h('td', { class: 'c-type' }, r.pushType || '—'),
      h('td', { class: 'c-topic', title: r.topic || '' }, r.topic || '—'),
      h('td', { class: 'c-token', title: r.token }, h('button', { type: 'button', class: 'tok', dataset: { token: r.token }, title: `Everything sent to ${r.token}` }, shortToken(r.token))),
      h('td', { class: 'c-env' }, envBadge(r.environment)),
      h('td', { class: 'c-outcome', title: r.explanation || '' }, outcomeBadge(r.outcome)),
      h('td', { class: 'c-summary', title: [sum.title, sum.body].filter(Boolean).join('\n') }, sum.title ? h('b', null, sum.title) : null, sum.title && sum.body ? ' ' : null, sum.body));
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
    if (existing) {
      if (existing.classList.contains('selected')) tr.classList.add('selected');
      existing.replaceWith(tr);
    } else {
      const body = $('#rows');
      let before = body.firstElementChild;
      while (before && Number(before.dataset.seq) > r.sequence) before = before.nextElementSibling;
      body.insertBefore(tr, before);
      if (live) tr.classList.add('fresh');
      trim();
    }
    state.rows.set(r.sequence, tr);
    if (state.selected === r.sequence) renderDetail();
  }

  function trim() {
    while (state.rows.size > MAX_ROWS) {
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
    $('#shown').textContent = `${shown} shown${shown !== state.records.size ? ` of ${state.records.size} loaded` : ''}`;
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
    es.addEventListener('open', () => { setConn('live'); load(); });
    es.addEventListener('notification', (ev) => {
      let r;
      try { r = JSON.parse(ev.data); } catch { return; }
      if (loading) buffered.push(r);
      else enqueue(r);
    });
    es.addEventListener('reset', () => { queue.clear(); clearRecords(); $('#count-notifications').textContent = 0; updateCounts(); refreshSide(); });
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

  // Events are applied in batches, so a load test pushing thousands per second cannot swamp the page.
  const queue = new Map();
  let flushTimer = null, infoTimer = null;
  function enqueue(r) {
    queue.set(r.sequence, r);
    if (!flushTimer) flushTimer = setTimeout(flush, 30);
  }
  function flush() {
    flushTimer = null;
    let batch = [...queue.values()].sort((a, b) => a.sequence - b.sequence);
    queue.clear();
    if (batch.length > MAX_ROWS) batch = batch.slice(-MAX_ROWS);
    let added = 0, side = false;
    for (const r of batch) {
      if (!state.records.has(r.sequence)) added++;
      if (r.fault || r.status === 410) side = true;
      upsert(r, { live: true });
    }
    if (added && !infoTimer) infoTimer = setTimeout(() => { infoTimer = null; refreshInfo(); }, 500);
    updateCounts();
    if (side) scheduleSide();
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
    loading = false;
    for (const r of buffered) upsert(r, { live: true, careful: true });
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
              ['Delivered', r.deliveredAt ? fmtDateTime(r.deliveredAt) : null]]),
            h('p', { class: `explain ${explainCls}`, id: 'explanation' }, r.explanation || '')))),
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

  let sideTimer = null;
  function scheduleSide() { clearTimeout(sideTimer); sideTimer = setTimeout(refreshSide, 250); }
  async function refreshSide() {
    await Promise.all([refreshDevices(), refreshFaults(), refreshInfo(), state.tab === 'devices' ? refreshTokens() : null]);
  }

  async function refreshTokens() {
    let data;
    try { data = await api('GET', '/api/v1/tokens'); } catch { return; }
    const json = JSON.stringify(data.tokens);
    if (json === state.tokensJSON) return;
    state.tokensJSON = json;
    const cls = { active: 's-ok', unregistered: 's-err', expired: 's-warn', 'rate-limited': 's-warn' };
    $('#tokens').replaceChildren(...data.tokens.slice().reverse().map((t) => h('tr', null,
      h('td', null, h('button', { type: 'button', class: 'tok', title: `Everything sent to ${t.token}`, onclick: () => setFilter('token', t.token) }, shortToken(t.token)), ' ', copyBtn(t.token)),
      h('td', { class: 'mono' }, t.deviceId), h('td', null, t.topic), h('td', null, t.kind), h('td', null, envBadge(t.environment)),
      h('td', null, h('span', { class: `badge ${cls[t.state] || 's-grey'}` }, t.state), t.unregisteredAt ? h('span', { class: 'muted small' }, ` since ${fmtDateTime(t.unregisteredAt)}`) : null))));
  }

  async function refreshDevices() {
    let data;
    try { data = await api('GET', '/api/v1/devices'); } catch { return; }
    const json = JSON.stringify(data.devices);
    if (json === state.devicesJSON) return;
    // Do not pull a select from under the user's pointer; the next refresh catches up.
    const active = document.activeElement;
    if (active && active.tagName === 'SELECT' && $('#devices').contains(active)) return;
    state.devicesJSON = json;
    state.devices = data.devices;
    renderDevices();
    fillDatalists();
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

  function renderDevices() {
    const root = $('#devices');
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
            h('span', { class: 'kind' }, kind), h('button', { type: 'button', class: 'tok', title: `Everything sent to ${token}`, onclick: () => setFilter('token', token) }, shortToken(token)), copyBtn(token)))),
          h('td', null, choose('authorization', AUTHORIZATIONS, app.authorization)),
          h('td', null, choose('appState', APP_STATES, app.appState)),
          h('td', null, h('label', { title: 'Background Modes: remote notifications' }, h('input', { type: 'checkbox', checked: app.backgroundMode,
            onchange: (e) => act(api('PATCH', appBase, { backgroundMode: e.target.checked }), `background mode ${e.target.checked ? 'on' : 'off'}`) }), ' bg')),
          h('td', null, h('div', { class: 'app-actions' },
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
        d.apps.length ? h('table', { class: 'grid apps' }, h('thead', null, h('tr', null, ['App', 'Tokens', 'Permission', 'App state', 'Mode', ''].map((x) => h('th', null, x)))), h('tbody', null, apps))
          : h('div', { class: 'muted' }, 'No apps installed.'));
    }));
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
    try { data = await api('GET', '/api/v1/faults'); } catch { return; }
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

  // ---------------------------------------------------------------- tabs, keys, start

  function showTab(tab) {
    if (!['timeline', 'devices', 'faults'].includes(tab)) tab = 'timeline';
    state.tab = tab;
    for (const b of $$('.tabs button')) b.setAttribute('aria-selected', String(b.dataset.tab === tab));
    for (const p of $$('.panel')) p.hidden = p.id !== `panel-${tab}`;
    writeHash();
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
    if (typing || e.ctrlKey || e.metaKey || e.altKey || $('#confirm').open) return;
    const key = e.key;
    if (key === '1' || key === '2' || key === '3') { showTab(['timeline', 'devices', 'faults'][Number(key) - 1]); return; }
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
  }

  start();
})();
