// A device card's account: who is logged in in its apps, the "log in as" form, log out; and the
// typing in those forms, kept across the card's re-renders.
// May import: the helpers (dom, widgets, api) and the views its buttons lead to: calls, refresh.

import { api } from './api.js';
import { showCallsOf } from './calls.js';
import { $$, h } from './dom.js';
import { act } from './refresh.js';
import { toast } from './widgets.js';

/** What is typed into the "log in as" fields, and which one has the focus, to survive a re-render. */
export function accountDrafts() {
  const drafts = new Map();
  let focus = null;
  for (const input of $$('#devices input[data-field="userId"]')) {
    if (input.value) drafts.set(input.dataset.device, input.value);
    if (input === document.activeElement) focus = { device: input.dataset.device, start: input.selectionStart, end: input.selectionEnd };
  }
  return { drafts, focus };
}
export function restoreAccountDrafts({ drafts, focus }) {
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
export function accountControls(d, base) {
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
