// Small pieces every view shows: status pills, outcome and environment badges, JSON, key-value
// lists, header tables; and the page's feedback: toasts, copying, the confirm dialog.
// May import: dom, records.

import { $, h } from './dom.js';
import { crossText, crossTitle } from './records.js';

/** The colour class of an HTTP status: 410, 5xx and a reset (0) are errors, other 4xx warnings. */
export function statusClass(status) {
  if (status >= 200 && status < 300) return 's-ok';
  if (status === 410 || status >= 500 || status === 0) return 's-err';
  if (status >= 400) return 's-warn';
  return 's-grey';
}
export function statusPill(status) {
  return h('span', { class: `pill ${statusClass(status)}`, title: status === 0 ? 'no HTTP status: the stream was reset or the connection ended' : null },
    status === 0 ? 'RST' : String(status));
}
const OUTCOME_CLASS = { delivered: 'o-ok', pending: 'o-info', stored: 'o-info', rejected: 'o-err', expired: 'o-grey',
  coalesced: 'o-grey', throttled: 'o-warn', deferred: 'o-warn', 'dropped-by-system': 'o-warn' };
export const outcomeBadge = (o) => h('span', { class: `outcome ${OUTCOME_CLASS[o] || 'o-grey'}` }, o || '—');
export const crossBadge = (r, long) => h('span', { class: 'badge xacct', title: crossTitle(r) }, long ? `cross-account: ${crossText(r)}` : 'cross-account');
export const envBadge = (env) => h('span', { class: `badge ${env === 'production' ? 's-warn' : 's-info'}`, title: env }, env === 'production' ? 'prod' : 'sbx');

/** A message at the bottom of the page for a few seconds. */
export function toast(message, isError) {
  const el = h('div', { class: `toast${isError ? ' err' : ''}` }, message);
  $('#toasts').append(el);
  setTimeout(() => el.remove(), isError ? 6000 : 2500);
}
/** Copies to the clipboard, through a hidden text area where the browser refuses the Clipboard API. */
export async function copy(text) {
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
export const copyBtn = (text, label = 'copy') => h('button', { type: 'button', class: 'icon-btn', title: `Copy ${text}`, onclick: (e) => { e.stopPropagation(); copy(text); } }, label);

/** Asks in the confirm dialog; resolves to true for OK. */
export function confirmDialog(text, okLabel = 'Confirm') {
  const dialog = $('#confirm');
  $('#confirm-text').textContent = text;
  $('#confirm-ok').textContent = okLabel;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true }));
}

/** Pretty-printed JSON with colours, built from text nodes. */
export function jsonView(value) {
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

/** A definition list of [label, value] pairs; falsy pairs are left out, empty values show as —. */
export function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs.filter((p) => p).map(([k, v]) => [h('dt', null, k), h('dd', null, v == null || v === '' ? '—' : v)]));
}

/** HTTP headers [{name, value}] as a table. */
export function headerTable(list) {
  if (!list || !list.length) return h('div', { class: 'muted' }, 'none');
  return h('table', { class: 'hdrs' }, list.map((x) => h('tr', null, h('td', null, x.name), h('td', null, x.value))));
}
