// Live Activities and broadcast channels from node's built-in http2, as a provider without a
// library would do them, on Apple's host names:
//   channel management  api-manage-broadcast.sandbox.push.apple.com:2195  /1/apps/<bundle>/channels
//   device pushes        api.sandbox.push.apple.com:2197                   /3/device/<token>
//   broadcasts           api.sandbox.push.apple.com:443                    /4/broadcasts/apps/<bundle>
// Trust: NODE_EXTRA_CA_CERTS, as for provider.mjs.
//
// Usage: node live.mjs JOB.json   (written by Tests/compat/run.py; the cases are its LIVE_PLAN)
// Prints one JSON line per request: status, reason, the ids the answer carried, and its body.
import { connect, constants } from 'node:http2';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';

import { providerToken } from './token.mjs';

const job = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const authorization = providerToken(job);
const bundle = job.topic;

// One request on an open session; resolves with the answer (never rejects).
function request(session, headers, body) {
  return new Promise((resolve) => {
    let answer = {};
    let text = '';
    let settled = false;
    const finish = (result) => { if (!settled) { settled = true; resolve(result); } };
    const stream = session.request({ authorization: authorization(), ...headers });
    stream.setEncoding('utf8');
    stream.setTimeout(job.timeoutSeconds * 1000, () => {
      finish({ error: `no answer within ${job.timeoutSeconds} s` });
      stream.close(constants.NGHTTP2_CANCEL);
    });
    stream.on('response', (h) => {
      answer = {
        status: Number(h[':status']), apnsId: h['apns-id'] ?? null,
        requestId: h['apns-request-id'] ?? null, channelId: h['apns-channel-id'] ?? null,
      };
    });
    stream.on('data', (chunk) => { text += chunk; });
    stream.on('end', () => {
      let body = null;
      try { body = text ? JSON.parse(text) : null; } catch { body = text; }
      finish({ ...answer, reason: body?.reason ?? null, body });
    });
    stream.on('error', (err) => finish({ error: String(err) }));
    stream.on('close', () => finish({ error: `stream closed (code ${stream.rstCode}) before an answer` }));
    stream.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

function openSession(origin) {
  const session = connect(origin);
  session.on('error', (err) => console.error(`${origin}: ${err}`));
  return session;
}

function report(kase, r) {
  console.log(JSON.stringify({
    case: kase, status: r.status ?? null, reason: r.reason ?? null, apnsId: r.apnsId ?? null,
    requestId: r.requestId ?? null, sentRequestId: r.sentRequestId ?? null, channelId: r.channelId ?? null,
    body: r.body ?? null, error: r.error ?? null,
  }));
  return r;
}

const marker = (kase) => ({ lib: job.lib, case: kase });
const now = () => Math.floor(Date.now() / 1000);
const manage = openSession('https://api-manage-broadcast.sandbox.push.apple.com:2195');
const push = openSession('https://api.sandbox.push.apple.com:2197');
const broadcasts = openSession('https://api.sandbox.push.apple.com');

const channelsPath = `/1/apps/${bundle}/channels`;
const created = report('channel-create', await request(manage,
  { ':method': 'POST', ':path': channelsPath, 'content-type': 'application/json' },
  { 'message-storage-policy': 1, 'push-type': 'LiveActivity' }));
const channel = created.channelId ?? '';
report('channel-read', await request(manage, { ':method': 'GET', ':path': channelsPath, 'apns-channel-id': channel }));
report('channel-list', await request(manage, { ':method': 'GET', ':path': `/1/apps/${bundle}/all-channels` }));

const device = (kase, token, aps) => request(push, {
  ':method': 'POST', ':path': `/3/device/${token}`, 'apns-topic': `${bundle}.push-type.liveactivity`,
  'apns-push-type': 'liveactivity', 'apns-priority': '10',
}, { aps: { timestamp: now(), ...aps }, compat: marker(kase) });

// iOS 18: a push-to-start that subscribes the new activity to the channel.
report('start-channel', await device('start-channel', job.pushToStartToken, {
  event: 'start', 'content-state': job.startState, 'attributes-type': job.attributesType,
  attributes: job.attributes, alert: { title: 'compat', body: 'your order' }, 'input-push-channel': channel,
}));
report('update', await device('update', job.updateToken, { event: 'update', 'content-state': job.updateState }));

// A broadcast names its own request id, which the answer must echo.
async function broadcast(kase) {
  const sentRequestId = randomUUID();
  const r = await request(broadcasts, {
    ':method': 'POST', ':path': `/4/broadcasts/apps/${bundle}`, 'apns-channel-id': channel,
    'apns-push-type': 'LiveActivity', 'apns-priority': '10', 'apns-expiration': '0', 'apns-request-id': sentRequestId,
  }, { aps: { timestamp: now(), event: 'update', 'content-state': job.broadcastState }, compat: marker(kase) });
  return { ...r, sentRequestId };
}
report('broadcast', await broadcast('broadcast'));

report('channel-delete', await request(manage, { ':method': 'DELETE', ':path': channelsPath, 'apns-channel-id': channel }));
report('read-deleted', await request(manage, { ':method': 'GET', ':path': channelsPath, 'apns-channel-id': channel }));
report('broadcast-deleted', await broadcast('broadcast-deleted'));

for (const session of [manage, push, broadcasts]) session.close();
