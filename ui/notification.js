// A notification as the device draws it: the card (app, time, what the user reads) and, under
// it, its category's action buttons (destructive ones in red, text-input ones with their
// placeholder). While the notification is still listed the buttons answer it through
// POST /api/v1/devices/{id}/notifications/{apnsId}/respond (a text-input action first asks for
// its text, with its button title); the answer, or the API's refusal, is shown under them.
// May import: the helpers (dom, liveactivity, presentation, api, clock, state) and the views an answer
// updates: detail, refresh, timeline.

import { api, enc } from './api.js';
import { emulatorNowMs } from './clock.js';
import { renderDetail } from './detail.js';
import { h } from './dom.js';
import { appName } from './liveactivity.js';
import { answerText, isDestructive, stillListed } from './presentation.js';
import { refreshSide } from './refresh.js';
import { state } from './state.js';
import { upsert } from './timeline.js';

// The last answer per apns-id, and the text-input action being typed into: both outlive the
// detail pane's re-renders (each update of the selected record draws it anew).
const answers = new Map(); // apnsId -> {ok, text}
let typing = null; // {apnsId, action, text, focus}

/** One line of the card; `loc` (a loc-key and its args) is the tooltip, or the line when nothing was read. */
export function cardLine(cls, text, loc) {
  if (text) return h('div', { class: cls, title: loc ? `localized from ⟨${loc}⟩` : null }, text);
  return loc ? h('div', { class: cls }, h('span', { class: 'loc', title: 'localized on the device' }, `⟨${loc}⟩`)) : null;
}

/** The card: app icon (with the badge number when given), app name, time, then `lines`. */
export function notifCard({ bundleId, title, when, badge, badgeId }, ...lines) {
  const name = appName(bundleId);
  return h('div', { class: 'notif' },
    h('div', { class: 'notif-head' },
      h('span', { class: 'app-icon' }, name.slice(0, 1).toUpperCase(), badge ? h('span', { class: 'app-badge', id: badgeId }, String(badge)) : null),
      h('span', { class: 'app', title }, name), h('span', null, when)),
    lines);
}

/** The buttons under the card, or null when it has none and cannot be answered. */
export function actionList(r) {
  const p = r.presentation;
  if (!p || !r.deviceId) return null;
  const listed = stillListed(r, emulatorNowMs());
  const actions = p.categoryRegistered ? p.actions || [] : [];
  const chosen = p.userResponse ? p.userResponse.actionIdentifier : null;
  const answer = answers.get(r.apnsId);
  if (!actions.length && !listed && !answer) return null;
  const buttons = actions.map((a) => {
    if (a.textInput && listed && typing && typing.apnsId === r.apnsId && typing.action === a.identifier) return replyForm(r, a);
    const options = a.options || [];
    return h('button', {
      type: 'button', disabled: !listed, dataset: { action: a.identifier },
      class: `notif-action${isDestructive(a) ? ' destructive' : ''}${a.textInput ? ' text-input' : ''}${chosen === a.identifier ? ' chosen' : ''}`,
      title: `${a.identifier}${options.length ? ` (${options.join(', ')})` : ''}${listed ? '' : ': the notification is no longer listed'}`,
      onclick: () => (a.textInput ? openReply(r, a) : respond(r, a.identifier)),
    }, h('span', { class: 'na-title' }, a.title),
    a.textInput ? h('span', { class: 'na-placeholder' }, a.textInput.placeholder || 'reply') : null,
    options.includes('authenticationRequired') ? h('span', { class: 'na-option', title: 'authenticationRequired: refused while the device is locked' }, 'unlock') : null,
    options.includes('foreground') ? h('span', { class: 'na-option', title: 'foreground: opens the app' }, 'opens app') : null);
  });
  return h('div', { class: 'notif-actions', id: 'notif-actions', dataset: { apnsId: r.apnsId } },
    buttons.length ? h('div', { class: 'na-list' }, buttons) : null,
    listed ? h('div', { class: 'na-foot' },
      h('button', { type: 'button', class: 'na-link', dataset: { action: 'default' }, title: 'The user taps the notification', onclick: () => respond(r, 'default') }, 'Open'),
      h('button', { type: 'button', class: 'na-link', dataset: { action: 'dismiss' }, title: 'The user swipes it away', onclick: () => respond(r, 'dismiss') }, 'Clear')) : null,
    answer ? h('div', { class: `respond-result ${answer.ok ? 'ok' : 'err'}`, id: 'respond-result', role: answer.ok ? 'status' : 'alert' }, answer.text) : null);
}

function openReply(r, a) {
  typing = { apnsId: r.apnsId, action: a.identifier, text: '', focus: true };
  renderDetail();
}

/** A text-input action open: the field with its placeholder and the action's button title. */
function replyForm(r, a) {
  const input = h('input', { class: 'na-input', id: 'reply-text', placeholder: a.textInput.placeholder || '', 'aria-label': a.title, value: typing.text,
    oninput: (e) => { typing.text = e.target.value; }, onfocus: () => { typing.focus = true; }, onblur: () => { if (typing) typing.focus = false; } });
  if (typing.focus) queueMicrotask(() => input.focus());
  return h('form', { class: 'na-reply', dataset: { action: a.identifier }, autocomplete: 'off',
    // iOS keeps the send button off until something is typed: an empty reply is not sent.
    onsubmit: (e) => { e.preventDefault(); if (input.value.trim()) respond(r, a.identifier, input.value); else input.focus(); } },
  input,
  h('button', { class: 'na-send', dataset: { send: a.identifier } }, a.textInput.buttonTitle || 'Send'),
  h('button', { type: 'button', class: 'na-cancel', title: 'Cancel', onclick: () => { typing = null; renderDetail(); } }, '×'));
}

async function respond(r, action, text) {
  try {
    const answer = await api('POST', `/api/v1/devices/${enc(r.deviceId)}/notifications/${enc(r.apnsId)}/respond`, text === undefined ? { action } : { action, text });
    answers.set(r.apnsId, { ok: true, text: answerText(answer) });
    typing = null;
  } catch (e) {
    answers.set(r.apnsId, { ok: false, text: e.message }); // the typed text stays, to try again
  }
  // The record now holds the response: shown at once rather than when the event stream brings it.
  try {
    const fresh = await api('GET', `/api/v1/notifications/${enc(r.apnsId)}`);
    if (state.records.has(fresh.sequence)) upsert(fresh, { careful: true });
  } catch { /* the event stream brings it */ }
  renderDetail();
  refreshSide();
}
