// The emulator's clock (GET /api/v1/clock), which POST /api/v1/clock moves ahead and a reset puts
// back: the time the simulated phones show, and the "now" that held notifications and "in 5m"
// are judged against, so they agree with the emulator's own times (an activity that ended at
// 14:22 of the emulator's day, 31 days on, under a Lock Screen saying today).
// May import: the helpers (api).

import { api } from './api.js';

// The emulator's clock minus the browser's (its offset, plus any difference of the two
// machines' clocks), from the last answer.
let aheadMs = 0;

/** Now on the emulator's clock, in ms. */
export const emulatorNowMs = () => Date.now() + aheadMs;

/** Now on the emulator's clock. */
export const emulatorNow = () => new Date(emulatorNowMs());

/** Reads the emulator's clock again; true when it moved against the browser's (by more than a
 * second: the time a request takes is not a move), so what shows it must be drawn again. */
export async function refreshClock() {
  try {
    const sent = Date.now();
    const clock = await api('GET', '/api/v1/clock');
    const ahead = clock.nowMs - (sent + Date.now()) / 2;
    if (Math.abs(ahead - aheadMs) <= 1000) return false;
    aheadMs = ahead;
    return true;
  } catch {
    return false; // the event stream shows the connection state
  }
}

const pad = (n) => String(n).padStart(2, '0');

/** A Lock Screen's clock and date at the emulator's now: in the device's zone when it is known
 * (`offsetMinutes`, its scheduled summary's UTC offset, which its times are written in), else
 * the browser's. */
export function lockFace(offsetMinutes) {
  const now = emulatorNow();
  const day = { weekday: 'long', month: 'long', day: 'numeric' };
  if (offsetMinutes == null) {
    return { clock: `${pad(now.getHours())}:${pad(now.getMinutes())}`, date: now.toLocaleDateString(undefined, day) };
  }
  const there = new Date(now.getTime() + offsetMinutes * 60000);
  return { clock: `${pad(there.getUTCHours())}:${pad(there.getUTCMinutes())}`, date: there.toLocaleDateString(undefined, { ...day, timeZone: 'UTC' }) };
}

/** Moves the simulated Lock Screens' clocks (and dates, where no Focus name stands there) on with
 * the emulator's time between redraws: they showed the minute of their last redraw. */
export function tickLockClocks() {
  for (const lock of document.querySelectorAll('.live-lock, .nc-lock')) {
    const offset = lock.dataset.utcOffset;
    const { clock, date } = lockFace(offset === undefined ? undefined : Number(offset));
    const shown = lock.querySelector('.lock-clock');
    if (shown && shown.textContent !== clock) shown.textContent = clock;
    const day = lock.querySelector('.lock-date');
    if (day && !day.textContent.startsWith('☾') && day.textContent !== date) day.textContent = date;
  }
}
