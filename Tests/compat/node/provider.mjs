// An APNs provider on node's built-in modules only: http2 for the connection, crypto for the
// ES256 provider token (token.mjs).
//
// It talks to Apple's host names: api.sandbox.push.apple.com on the alternative port 2197 and
// api.push.apple.com on 443. Trust: node reads extra CA certificates from the file named by
// NODE_EXTRA_CA_CERTS when it starts.
//
// Usage: node provider.mjs JOB.json   (the job is written by Tests/compat/run.py)
// Prints one JSON line per push: what node's http2 client reported.
import { connect, constants } from 'node:http2';
import { readFileSync } from 'node:fs';

import { providerToken } from './token.mjs';

const job = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const authorization = providerToken(job);

// POST /3/device/TOKEN on an open session; resolves with the answer (never rejects).
function send(session, deviceToken, { pushType = 'alert', priority = 10, payload }) {
  return new Promise((resolve) => {
    let status = null;
    let apnsId = null;
    let body = '';
    let settled = false;
    const finish = (result) => { if (!settled) { settled = true; resolve(result); } };

    const stream = session.request({
      ':method': 'POST',
      ':path': `/3/device/${deviceToken}`,
      authorization: authorization(),
      'apns-topic': job.topic,
      'apns-push-type': pushType,
      'apns-priority': String(priority),
    });
    stream.setEncoding('utf8');
    stream.setTimeout(job.timeoutSeconds * 1000, () => {
      finish({ error: `no answer within ${job.timeoutSeconds} s` });
      stream.close(constants.NGHTTP2_CANCEL);
    });
    stream.on('response', (headers) => {
      status = Number(headers[':status']);
      apnsId = headers['apns-id'] ?? null;
    });
    stream.on('data', (chunk) => { body += chunk; });
    stream.on('end', () => {
      // Errors carry {"reason": "...", "timestamp": ms (410 only)}; a 200 has no body.
      const { reason = null, timestamp = null } = body ? JSON.parse(body) : {};
      finish({ status, reason, apnsId, timestamp });
    });
    stream.on('error', (err) => finish({ error: String(err) }));
    stream.on('close', () => finish({ error: `stream closed (code ${stream.rstCode}) before an answer` }));
    stream.end(JSON.stringify(payload));
  });
}

function openSession(origin) {
  const session = connect(origin);
  session.on('error', (err) => console.error(`${origin}: ${err}`));
  return session;
}

const alert = (kase, n) => ({
  aps: { alert: { title: 'compat', body: `${kase} #${n}` } },
  compat: { lib: job.lib, case: kase, n },
});

function report(kase, n, r) {
  console.log(JSON.stringify({
    case: kase, n, status: r.status ?? null, reason: r.reason ?? null,
    apnsId: r.apnsId ?? null, timestamp: r.timestamp ?? null, error: r.error ?? null,
  }));
}

const sandbox = openSession('https://api.sandbox.push.apple.com:2197');
const production = openSession('https://api.push.apple.com');
const { tokens } = job;

report('alert', 0, await send(sandbox, tokens.sandbox, { payload: alert('alert', 0) }));
if (job.only === 'alert') { // run.py's check that the CA setting is what lets it connect
  sandbox.destroy();
  production.destroy();
  process.exit(0);
}
report('background', 1, await send(sandbox, tokens.sandbox, {
  pushType: 'background',
  priority: 5,
  payload: { aps: { 'content-available': 1 }, compat: { lib: job.lib, case: 'background', n: 1 } },
}));
report('wrong-environment', 2,
  await send(sandbox, tokens.production, { payload: alert('wrong-environment', 2) }));
report('unregistered', 3, await send(sandbox, tokens.unregistered, { payload: alert('unregistered', 3) }));
report('production', 4, await send(production, tokens.production, { payload: alert('production', 4) }));

// The burst: every push in flight at once on the one session (http2 queues streams beyond
// the server's MAX_CONCURRENT_STREAMS itself).
const started = performance.now();
const results = await Promise.all(tokens.burst.map((token, i) =>
  send(sandbox, token, { payload: alert('burst', 5 + i) })));
const burstSeconds = (performance.now() - started) / 1000;
results.forEach((r, i) => report('burst', 5 + i, r));
console.log(JSON.stringify({
  case: 'summary', burstSeconds: Math.round(burstSeconds * 1000) / 1000, version: `node ${process.version}`,
}));

sandbox.close();
production.close();
