// Reading Live Activities (GET /api/v1/devices/{id}/activities) and broadcast channels
// (GET /api/v1/channels) the way the device and the channel list show them: labelled values
// from an activity's data, the order on the Lock Screen, a channel's storage policy and stored
// message. Pure functions of their arguments.
// May import: nothing.

/** A Swift property name as a label: etaMinutes, eta_minutes → "Eta minutes"; orderID → "Order ID". */
export function humanise(key) {
  const words = String(key)
    .replace(/[_\-.]+/g, ' ')
    .replace(/([a-z\d])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .trim().split(/\s+/).filter(Boolean);
  if (!words.length) return String(key);
  return words.map((w, i) => (/^[A-Z\d]{2,}$/.test(w) ? w : i === 0 ? w[0].toUpperCase() + w.slice(1).toLowerCase() : w.toLowerCase())).join(' ');
}

const isObject = (v) => v != null && typeof v === 'object' && !Array.isArray(v);

/** A value as a line of text: strings as they are, lists of plain values joined, anything else as JSON. */
export function display(v) {
  if (v == null) return '—';
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v) && v.every((x) => x == null || typeof x !== 'object')) return v.map(display).join(', ');
  return JSON.stringify(v);
}

/**
 * An object's members as [label, text] pairs, nested objects flattened one level ("courier":
 * {"name"} → "Courier name"); deeper values are shown as JSON. Not an object: no pairs.
 */
export function labelled(obj) {
  if (!isObject(obj)) return [];
  const pairs = [];
  for (const [key, value] of Object.entries(obj)) {
    if (isObject(value) && Object.keys(value).length) {
      for (const [inner, v] of Object.entries(value)) pairs.push([`${humanise(key)} ${humanise(inner).toLowerCase()}`, display(v), `${key}.${inner}`]);
    } else {
      pairs.push([humanise(key), display(value), key]);
    }
  }
  return pairs;
}

/** On the Lock Screen (and not yet removed): active, stale or ended. */
export const onLockScreen = (a) => a.state !== 'dismissed';
/** Still taking updates, so in the Dynamic Island's running. */
export const running = (a) => a.state === 'active' || a.state === 'stale';

/**
 * The order the system shows activities in: the highest relevance-score first (one without a
 * score counts as 0), then the one started first; the first running one is in the Dynamic Island.
 */
export function byRelevance(list) {
  const time = (a) => Date.parse(a.startedAt || '') || 0;
  return list.slice().sort((a, b) => (b.relevanceScore ?? 0) - (a.relevanceScore ?? 0) || time(a) - time(b));
}

/** The app's name as the device shows it: the bundle id's last part. */
export const appName = (bundleId) => String(bundleId || 'app').split('.').pop();

/** apns-channel-message-storage-policy in words. */
export function policyName(policy) {
  if (policy === 0) return 'No Message Stored';
  if (policy === 1) return 'Most Recent Message Stored';
  return policy == null ? '—' : `policy ${policy}`;
}

/** A channel's stored message in one line: its event and content, cut to `max` characters. */
export function storedPreview(message, max = 90) {
  if (!message) return '';
  const p = message.payload;
  const aps = isObject(p) && isObject(p.aps) ? p.aps : null;
  let text;
  if (aps) {
    const state = labelled(aps['content-state']).map(([k, v]) => `${k}: ${v}`).join(', ');
    text = `${aps.event || 'no event'}${state ? ` · ${state}` : ''}`;
  } else {
    text = typeof p === 'string' ? p : JSON.stringify(p);
  }
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
