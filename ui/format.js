// How the UI writes times, durations, sizes and counts. Pure functions of their arguments.
// May import: nothing.

export const pad = (n, w = 2) => String(n).padStart(w, '0');
/** A time of day to the millisecond; with `nowMs`, a time on another day than now's is written
 * `MM-DD hh:mm:ss` instead (the emulator's clock may have moved days: two rows would read alike). */
export function fmtTime(ms, nowMs) {
  const d = new Date(ms);
  const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (nowMs != null && new Date(nowMs).toDateString() !== d.toDateString()) {
    return `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock}`;
  }
  return `${clock}.${pad(d.getMilliseconds(), 3)}`;
}
export function fmtDateTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : `${d.toLocaleDateString()} ${fmtTime(d.getTime())}`;
}
export function fmtDuration(s) {
  s = Math.max(0, Math.floor(s));
  const d = Math.floor(s / 86400), hh = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  return d ? `${d}d ${hh}h` : hh ? `${hh}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}
/** A device token cut to its first 6 and last 4 characters. */
export const shortToken = (t) => !t ? '—' : t.length > 12 ? `${t.slice(0, 6)}…${t.slice(-4)}` : t;
export const bytes = (n) => `${Number(n).toLocaleString('en-US')} B`;
export const fmtInt = (n) => Number(n).toLocaleString('en-US');
/** A chart's axis number: 1.5k, 2.3M. */
export function fmtNum(v) {
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (v >= 1e4) return `${+(v / 1e3).toFixed(1)}k`;
  return String(+v.toFixed(v < 10 ? 2 : 0));
}
export const fmtSeconds = (s) => (s >= 1 ? `${+s.toFixed(2)} s` : `${+(s * 1000).toPrecision(3)} ms`);
export const fmtMs = (ms) => (ms == null ? '—' : ms < 1000 ? `${ms} ms` : ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : fmtDuration(ms / 1000));
/** " (+N ms)" from time a to time b, or '' without both. */
export function since(a, b) {
  if (!a || !b) return '';
  const d = new Date(b) - new Date(a);
  return isNaN(d) ? '' : ` (+${d} ms)`;
}
