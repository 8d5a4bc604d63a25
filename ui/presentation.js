// Reading how a device presented a notification (a record's `presentation`, docs/device-model.md
// §14l) and the device's switches (Focus, scheduled summary): in words, and whether the user can
// still answer it. Pure functions of their arguments.
// May import: nothing.

const DEFAULT_ACTION = 'com.apple.UNNotificationDefaultActionIdentifier';
const DISMISS_ACTION = 'com.apple.UNNotificationDismissActionIdentifier';

/** `presentation.sound` in words. */
export const SOUND_TEXT = {
  none: 'none asked for', played: 'played', silenced: 'silenced (asked for, not played)', critical: 'played at critical-alert volume',
};

export const isDestructive = (action) => (action.options || []).includes('destructive');

/**
 * Still on screen or in Notification Center, as far as the record tells: delivered with something
 * shown, not answered (a tap is an answer too), not held for a summary still to come. A
 * replacement through apns-collapse-id is not in the record: the server refuses that one.
 */
export function stillListed(r, nowMs) {
  const p = r.presentation;
  if (!p || p.userResponse || r.outcome !== 'delivered' || !r.display || r.display === 'none') return false;
  if ((r.callbacks || []).includes('didReceive')) return false;
  if (r.display === 'scheduledSummary') return heldUntilMs(p) <= nowMs;
  return true;
}

/** When a held notification joins Notification Center (ms), or -Infinity when it is not held. */
export function heldUntilMs(p) {
  const at = p && p.heldUntil ? Date.parse(p.heldUntil) : NaN;
  return isNaN(at) ? -Infinity : at;
}

/** The action the user picked, by its button title where the notification showed one. */
export function responseText(p) {
  const u = p.userResponse;
  if (!u) return '';
  const id = u.actionIdentifier;
  const button = (p.actions || []).find((a) => a.identifier === id);
  const name = id === DEFAULT_ACTION ? 'opened (the default action)' : id === DISMISS_ACTION ? 'dismissed' : button ? `${button.title} (${id})` : id;
  return u.userText != null ? `${name}: “${u.userText}”` : name;
}

/** The interruption level asked for and the one used: "time-sensitive asked for, active used". */
export function levelText(p) {
  const used = p.effectiveInterruptionLevel || 'active';
  if (!p.interruptionLevel) return `${used} (none asked for)`;
  return p.interruptionLevel === used ? used : `${p.interruptionLevel} asked for, ${used} used`;
}

/** `presentation.badge`: what the notification put on the app's icon. */
export const badgeText = (badge) => (badge == null ? 'left alone' : badge === 0 ? 'cleared (0)' : String(badge));

/** A Focus's exceptions in one line, for its tooltip. */
export function focusTitle(f) {
  const parts = [];
  if ((f.allowedApps || []).length) parts.push(`apps ${f.allowedApps.join(', ')}`);
  if ((f.allowedPeople || []).length) parts.push(`people ${f.allowedPeople.join(', ')}`);
  parts.push(f.allowTimeSensitive === false ? 'no time-sensitive' : 'time-sensitive');
  return `Focus "${f.name}" on; still interrupt: ${parts.join('; ')}, critical`;
}

/** The device's time zone: UTC, UTC+1, UTC−5:30. */
export function utcOffset(minutes) {
  if (!minutes) return 'UTC';
  const m = Math.abs(minutes);
  return `UTC${minutes < 0 ? '−' : '+'}${Math.floor(m / 60)}${m % 60 ? `:${String(m % 60).padStart(2, '0')}` : ''}`;
}

/** An instant as a time of day in the device's zone (the summary's times are written in it). */
export function deviceClock(iso, offsetMinutes) {
  const at = Date.parse(iso || '');
  if (isNaN(at)) return '—';
  const d = new Date(at + (offsetMinutes || 0) * 60000);
  return `${String(d.getUTCHours()).padStart(2, '0')}:${String(d.getUTCMinutes()).padStart(2, '0')}`;
}

/** The response route's answer in words: what the app did. */
export function answerText(answer) {
  const cbs = answer.callbacks || [];
  const parts = [cbs.length ? `the app got ${cbs.join(', ')}` : 'the app does not hear of it'];
  if (answer.opensApp) parts.push('it came to the foreground');
  else if (answer.runsInBackground) parts.push('it ran in the background');
  if (answer.launched) parts.push('launched for it');
  const what = answer.actionIdentifier === DEFAULT_ACTION ? 'Opened' : answer.actionIdentifier === DISMISS_ACTION ? 'Dismissed' : `Answered ${answer.actionIdentifier}`;
  return `${what}${answer.userText != null ? ` “${answer.userText}”` : ''}: ${parts.join(', ')}.`;
}
