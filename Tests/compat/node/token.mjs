// The ES256 provider token for node's providers (provider.mjs, live.mjs): node's crypto only.
import { createPrivateKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';

// A function returning the `authorization` header value, re-signing the token when it is
// older than 20 minutes (Apple allows up to 60).
export function providerToken(job) {
  const signingKey = createPrivateKey(readFileSync(job.keyPath)); // AuthKey_XXXX.p8 (PKCS#8 PEM)
  let token = null;
  let issuedAt = 0;
  return () => {
    const now = Math.floor(Date.now() / 1000);
    if (!token || now - issuedAt > 20 * 60) {
      const header = Buffer.from(JSON.stringify({ alg: 'ES256', kid: job.keyId })).toString('base64url');
      const claims = Buffer.from(JSON.stringify({ iss: job.teamId, iat: now })).toString('base64url');
      // JOSE wants the raw r||s signature; 'ieee-p1363' makes node produce that instead of DER.
      const signature = sign('sha256', Buffer.from(`${header}.${claims}`),
        { key: signingKey, dsaEncoding: 'ieee-p1363' });
      token = `${header}.${claims}.${signature.toString('base64url')}`;
      issuedAt = now;
    }
    return `bearer ${token}`;
  };
}
