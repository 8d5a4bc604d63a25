// What the page knows and shows, shared by the views: the records and their rows, the filters,
// the shown tab, the devices (and their Live Activities and Notification Center), fault rules,
// backend calls, checks and broadcast channels last fetched.
// May import: nothing.

export const state = {
  records: new Map(), // sequence -> record
  rows: new Map(), // sequence -> <tr>
  selected: null, // sequence
  filters: {}, // server-side filters (query parameters)
  q: '', // free text, client-side
  statusClass: null, // "4xx" style status filter, client-side
  tab: 'timeline',
  devices: [], faults: [], keys: [], info: null, infoAt: 0, filtersExtra: {},
  moreDevices: false, // the API has devices past the first page
  devicesDirty: false, // the devices changed while their tab was hidden: drawn when it shows
  calls: new Map(), // backend call id -> call
  callBodies: new Map(), // id -> <tbody> (a call's row and, expanded, its details)
  expandedCalls: new Set(),
  callsFilter: { deviceId: '', hook: '' },
  checks: null,
  activities: new Map(), // device id -> its GET …/activities answer (the first devices only)
  centers: new Map(), // device id -> its GET …/notification-center answer (the first devices only)
  channels: [], selectedChannel: null, broadcasts: null, // the Channels tab
  openSections: { device: true, presentation: true, log: true, payload: true, response: true, jwt: true, headers: false, timing: true },
};
