// Talking to the admin API: JSON calls, the /metrics text, the admin token (asked for in the
// login dialog), and keeping overlapping refreshes from showing an old or unchanged answer.
// May import: dom.

import { $ } from './dom.js';

// With --admin-token the API answers 401 until the token is sent. The page asks for it once
// and keeps it for this tab (sessionStorage); the event stream carries it as ?access_token=,
// as EventSource cannot set headers.
const TOKEN_KEY = 'apns-emulator-admin-token';
let token = sessionStorage.getItem(TOKEN_KEY) || '';
let asking = null;
let tokenEntered = () => {};

/** The admin token entered on this tab, or ''. */
export const adminToken = () => token;

/** `then` runs each time a token has been entered (the event stream reconnects with it). */
export function onTokenEntered(then) { tokenEntered = then; }

/** The login dialog cannot be dismissed without a token. */
export function wireLogin() {
  $('#login').addEventListener('cancel', (e) => e.preventDefault());
}

function askForToken(message) {
  if (asking) return asking;
  asking = new Promise((resolve) => {
    const dialog = $('#login');
    const input = $('#login-token');
    $('#login-error').textContent = message || '';
    input.value = '';
    dialog.addEventListener('close', () => {
      token = input.value.trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      asking = null;
      resolve();
      tokenEntered();
    }, { once: true });
    dialog.showModal();
    input.focus();
  });
  return asking;
}

/** Calls the admin API; an answer with a status in `allow` (e.g. 409 from a strict check) is data, not an error. */
export async function api(method, path, body, { allow = [] } = {}) {
  for (;;) {
    const init = { method, headers: {} };
    if (token) init.headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) { init.headers['Content-Type'] = 'application/json'; init.body = JSON.stringify(body); }
    const res = await fetch(path, init);
    let data = null;
    try { data = await res.json(); } catch { /* not JSON */ }
    if (res.status === 401) {
      await askForToken(token ? 'That token was not accepted.' : '');
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

/** A GET whose answer is text (/metrics, a record's curl command or .apns file); a refusal throws with the API's message. */
export async function apiText(path) {
  for (;;) {
    const res = await fetch(path, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
    if (res.status === 401) { await askForToken(token ? 'That token was not accepted.' : ''); continue; }
    if (!res.ok) {
      let message = '';
      try { message = (await res.json()).error; } catch { /* not JSON */ }
      const err = new Error(message || `GET ${path}: HTTP ${res.status}`);
      err.status = res.status;
      throw err;
    }
    return res.text();
  }
}

/** A path segment: ids and tokens go into paths encoded. */
export const enc = encodeURIComponent;

// Refreshes overlap (a timer, an action's follow-up): an answer older than one already shown is
// dropped, and so is one that brings nothing new, so the view is not rebuilt under the user.
const refreshes = {}; // what -> {asked, shown, json}

/**
 * A refresh's answer when it has something new to show, else null: the request failed (the
 * event stream's indicator tells that the emulator is unreachable), a later refresh of `what`
 * was already shown, or `pick(answer)` is what the last one showed. While `holdOff()` is true
 * the answer is not shown and not remembered, so the next refresh shows it.
 */
/** Makes the next refresh of every view draw what the server answers, changed or not: after a
 * refused action a control may show what the user chose, not what the server has. */
export function forgetShown() {
  for (const r of Object.values(refreshes)) r.json = null;
}

export async function freshAnswer(what, promise, pick = (data) => data, holdOff = () => false) {
  const r = refreshes[what] || (refreshes[what] = { asked: 0, shown: 0, json: null });
  const mine = ++r.asked;
  let data;
  try { data = await promise; } catch { return null; }
  if (mine < r.shown) return null;
  r.shown = mine;
  const json = JSON.stringify(pick(data));
  if (json === r.json || holdOff()) return null;
  r.json = json;
  return data;
}
