// Reading a notification record (GET /api/v1/notifications, the event stream): its alert, a
// one-line summary, its search text, how far it has got. Pure functions of the record.
// May import: nothing.

/** The payload's aps dictionary, or null. */
export const aps = (r) => (r.payload && typeof r.payload === 'object' && r.payload.aps && typeof r.payload.aps === 'object') ? r.payload.aps : null;
/** A payload value as text: strings as they are, anything else as JSON. */
export const str = (v) => (v == null ? '' : typeof v === 'string' ? v : JSON.stringify(v));

/** The alert as the lock screen would show it: {title, subtitle, body} plus loc keys as text. */
export function alertOf(r) {
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

/** The timeline's one line for a record: {title, body}. */
export function summaryOf(r) {
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

/** APNs' payload size limit for the record's push type, in bytes. */
export const sizeLimit = (r) => (r.pushType === 'voip' ? 5120 : 4096);

/** What the free-text search looks in, lowercased, worked out once per record. */
export function searchText(r) {
  if (!r._search) {
    r._search = [r.apnsId, r.uniqueId, r.token, r.topic, r.reason, r.explanation, r.deviceId, r.bundleId, r.collapseId,
      r.pushType, r.outcome, r.userId, r.addressee, r.crossAccount ? 'cross-account' : null, String(r.status), typeof r.payload === 'string' ? r.payload : JSON.stringify(r.payload)]
      .filter(Boolean).join('\n').toLowerCase();
  }
  return r._search;
}

/** A push delivered while another account than the one its payload names was logged in. */
export const crossText = (r) => `for ${r.addressee ?? '?'}, ${r.userId != null ? `shown to ${r.userId}` : 'shown while logged out'}`;
export const crossTitle = (r) => `Cross-account delivery: the payload names ${r.addressee ?? '?'}, but ${r.userId != null ? `${r.userId} was` : 'nobody was'} logged in on ${r.deviceId || 'the device'}`;

/** How far a record has progressed; an update never replaces a record with an older version. */
export const progress = (r) => (r.respondedAt ? 1 : 0) + (r.deliveredAt ? 2 : 0) + (r.outcome !== 'pending' ? 4 : 0) + (r.callbacks ? r.callbacks.length : 0)
  + (r.presentation && r.presentation.userResponse ? 1 : 0); // a dismiss the app does not hear of adds no callback

/** The record as the API sent it, without the page's own fields (_search). */
export const stripPrivate = (r) => Object.fromEntries(Object.entries(r).filter(([k]) => !k.startsWith('_')));
