// The app backend dialog: an app's backend hooks (GET/PUT/DELETE /api/v1/apps/{bundleId}/backend)
// shown as a table and edited as JSON.
// May import: the helpers (dom, widgets, api).

import { api, enc } from './api.js';
import { $, h } from './dom.js';
import { confirmDialog, jsonView, kv, toast } from './widgets.js';

const HOOKS = ['register', 'bind', 'unbind', 'fetch', 'action'];
let backendBundle = null;

/** Opens the dialog on an app's backend (none: 404). */
export async function openBackend(bundleId) {
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

/** The backend as a table of hooks and as editable JSON; null: none. */
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

/** "Save": the JSON, checked here first, goes to PUT. */
function saveBackend() {
  $('#backend-error').textContent = '';
  let body;
  const text = $('#backend-json').value.trim();
  try { body = JSON.parse(text || '{}'); } catch (e) { $('#backend-error').textContent = `Not JSON: ${e.message}`; return; }
  changeBackend('PUT', body, 'saved');
}

/**
 * Sends a change of the shown app's backend (PUT with `body`, or DELETE) and shows the backend
 * it leaves, unless the dialog moved on to another app meanwhile; an error shows in the dialog.
 */
async function changeBackend(method, body, done) {
  const bundleId = backendBundle;
  $('#backend-error').textContent = '';
  try {
    const saved = await api(method, `/api/v1/apps/${enc(bundleId)}/backend`, body);
    if (backendBundle !== bundleId) return;
    showBackend(method === 'DELETE' ? null : saved);
    toast(`Backend of ${bundleId} ${done}`);
  } catch (e) {
    $('#backend-error').textContent = e.message;
  }
}

export function wireBackendDialog() {
  $('#backend-save').addEventListener('click', saveBackend);
  $('#backend-delete').addEventListener('click', async () => {
    if (await confirmDialog(`Remove the backend of ${backendBundle}? Its apps stop calling it, and pushes to it are no longer checked against the account.`, 'Remove')) changeBackend('DELETE', undefined, 'removed');
  });
}
