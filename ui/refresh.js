// Keeping the side lists fresh: the emulator's clock, devices, tokens, fault rules, info, checks,
// the shown tab's Live Activities and Notification Centers or broadcast channels and (without
// events) backend calls are fetched again after an action, a relevant event, or on the 4 s timer.
// May import: the helpers (api, clock, widgets, state) and the views it refreshes.

import { refreshActivities } from './activities.js';
import { forgetShown } from './api.js';
import { loadCalls } from './calls.js';
import { refreshCenters } from './center.js';
import { refreshClock } from './clock.js';
import { renderDetail } from './detail.js';
import { refreshChannels } from './channels.js';
import { refreshChecks } from './checks.js';
import { refreshDevices } from './devices.js';
import { refreshFaults } from './faults.js';
import { refreshInfo } from './info.js';
import { state } from './state.js';
import { redrawTimes } from './timeline.js';
import { refreshTokens } from './tokens.js';
import { toast } from './widgets.js';

/** Runs an admin action, reports errors, then refreshes what it may have changed. */
export async function act(promise, done) {
  try {
    const result = await promise;
    if (done) toast(done);
    return result;
  } catch (e) {
    toast(e.message, true);
    // The refused control still shows the user's choice: draw the server's state again.
    forgetShown();
    return null;
  } finally {
    refreshSide();
  }
}

let sideTimer = null;
/** A refresh soon, once for a burst of events. */
export function scheduleSide() { clearTimeout(sideTimer); sideTimer = setTimeout(refreshSide, 250); }
export async function refreshSide() {
  // The clock first: moved (POST /api/v1/clock, a reset), every view is drawn again with it,
  // its answer changed or not (the Lock Screens' time and date).
  if (await refreshClock()) { forgetShown(); renderDetail(); redrawTimes(); }
  await Promise.all([refreshDevices().then(() => (state.tab === 'devices' ? Promise.all([refreshActivities(), refreshCenters()]) : null)), refreshFaults(), refreshInfo(), refreshChecks(), state.tab === 'devices' ? refreshTokens() : null,
    // Calls arrive as events; a server that sends none is polled while the tab is open.
    state.tab === 'backend' && !state.callEventsSeen ? loadCalls() : null,
    // Channels (up to 10,000 per app and environment, read page by page): fetched while their tab is shown, and once for its count.
    state.tab === 'channels' || !state.channelsCounted ? refreshChannels().then(() => { state.channelsCounted = true; }) : null]);
}
