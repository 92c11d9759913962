import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { exportJWK, generateKeyPair, SignJWT, UnsecuredJWT, type JWK, type JWTPayload, type CryptoKey } from 'jose';
import OpenAI from 'openai';
import { ManualClock } from '../../src/clock.js';
import { generateApiKey } from '../../src/accounts/api-keys.js';
import { createTestAccount, credentialProbeRoutes, type TestAccount } from '../support/accounts.js';
import { get } from '../support/http.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const SECRET = 'test-jwt-secret-with-more-than-32-characters!';
const ISSUER = 'https://frontend.example.test';
const AUDIENCE = 'completions-api';
const enc = (s: string) => new TextEncoder().encode(s);

/** Signs an HS token with the given claims and header, defaulting to what the service accepts. */
async function hsToken(
  claims: JWTPayload,
  opts: {
    alg?: string;
    secret?: string;
    clock: ManualClock;
    iss?: string | null;
    aud?: string | null;
    exp?: number | null;
  },
): Promise<string> {
  const now = Math.floor(opts.clock.now().getTime() / 1000);
  let b = new SignJWT(claims).setProtectedHeader({ alg: opts.alg ?? 'HS256', typ: 'JWT' }).setIssuedAt(now);
  if (opts.exp !== null) b = b.setExpirationTime(opts.exp ?? now + 600);
  if (opts.iss !== null) b = b.setIssuer(opts.iss ?? ISSUER);
  if (opts.aud !== null) b = b.setAudience(opts.aud ?? AUDIENCE);
  return b.sign(enc(opts.secret ?? SECRET));
}

const authError = (code: string) => ({ type: 'authentication_error', code, param: null });

describe('credentials: API keys and JWTs', () => {
  describe('with a shared-secret (HS256) JWT configuration', () => {
    const clock = new ManualClock(Date.now());
    let web: TestWeb;
    let user: TestAccount;
    let unverified: TestAccount;
    const probe = (mode: string, bearer?: string, headers: Record<string, string> = {}) =>
      get(`${web.url}/probe/${mode}`, { ...(bearer !== undefined ? { bearer } : {}), headers });

    before(async () => {
      web = await startTestWeb({
        clock,
        routes: credentialProbeRoutes(),
        env: { JWT_SECRET: SECRET, JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE },
      });
      user = await createTestAccount(web.app);
      unverified = await createTestAccount(web.app, { verified: false });
    });
    after(async () => web.close());

    it('answers a request without a credential with 401 in the OpenAI envelope and a WWW-Authenticate header', async () => {
      const r = await probe('api_key');
      expect(r.status).to.equal(401);
      expect(r.headers.get('www-authenticate')).to.equal('Bearer');
      expect(r.body).to.deep.equal({ error: { message: r.body.error.message, ...authError('missing_credential') } });
      expect(r.body.error.message).to.match(/API key/);
    });

    it('answers a credential in another scheme than Bearer with 401 malformed_credential, not "missing"', async () => {
      for (const authorization of [`Basic ${Buffer.from(`user:${user.apiKey}`).toString('base64')}`, user.apiKey]) {
        const r = await probe('api_key', undefined, { authorization });
        expect(r.status).to.equal(401);
        expect(r.body.error).to.deep.include(authError('malformed_credential'));
        expect(r.body.error.message).to.equal(
          'Malformed credential: an Authorization header was sent, but it does not start with the Bearer scheme. ' +
            'This endpoint needs an API key (Authorization: Bearer sk-svc-…)',
        );
        expect(r.body.error.message).not.to.include(user.apiKey);
      }
    });

    it('answers a bearer value holding spaces with 401 malformed_credential, saying a credential was sent', async () => {
      const r = await probe('api_key', undefined, {
        authorization: `Bearer ${user.apiKey.slice(0, 20)} ${user.apiKey.slice(20)}`,
      });
      expect(r.status).to.equal(401);
      expect(r.headers.get('www-authenticate')).to.equal('Bearer error="invalid_request"');
      expect(r.body).to.deep.equal({
        error: {
          message:
            'Malformed credential: an Authorization header was sent, but the credential after Bearer contains whitespace ' +
            '(a key or token is one unbroken string: look for a stray space or line break). ' +
            'This endpoint needs an API key (Authorization: Bearer sk-svc-…)',
          ...authError('malformed_credential'),
        },
      });
    });

    it('says "missing" only when no credential was sent: no header, or Bearer with nothing after it', async () => {
      const sent: Record<string, string>[] = [{}, { authorization: 'Bearer' }, { authorization: 'Bearer   ' }];
      for (const headers of sent) {
        const r = await probe('jwt', undefined, headers);
        expect(r.status, JSON.stringify(headers)).to.equal(401);
        expect(r.body.error.code).to.equal('missing_credential');
        expect(r.body.error.message).to.match(
          /^Missing credential: (no Authorization header was sent|the Authorization header has no credential after Bearer); this endpoint needs a JWT/,
        );
      }
    });

    it('accepts the account’s API key where an API key is required', async () => {
      const r = await probe('api_key', user.apiKey);
      expect(r.status).to.equal(200);
      expect(r.body).to.deep.equal({ account_id: user.account.id, credential: 'api_key' });
    });

    it('answers a well-formed key that no account holds with 401 invalid_api_key', async () => {
      const r = await probe('api_key', generateApiKey().key);
      expect(r.status).to.equal(401);
      expect(r.body.error).to.deep.include(authError('invalid_api_key'));
      expect(r.headers.get('www-authenticate')).to.equal('Bearer error="invalid_token"');
    });

    it('answers a truncated key, a mistyped key and a foreign token with 401 invalid_api_key', async () => {
      const key = user.apiKey;
      const typo = `${key.slice(0, 20)}${key[20] === 'a' ? 'b' : 'a'}${key.slice(21)}`;
      for (const bad of [key.slice(0, -1), typo, `${key}x`, 'sk-svc-', 'sk-proj-abcdef']) {
        const r = await probe('api_key', bad);
        expect(r.status, bad).to.equal(401);
        expect(r.body.error.code, bad).to.equal('invalid_api_key');
      }
    });

    it('refuses a JWT where only an API key is accepted, and an API key where only a JWT is', async () => {
      const jwtOnKeyRoute = await probe('api_key', user.jwt);
      expect(jwtOnKeyRoute.status).to.equal(401);
      expect(jwtOnKeyRoute.body.error.code).to.equal('invalid_api_key');
      const keyOnJwtRoute = await probe('jwt', user.apiKey);
      expect(keyOnJwtRoute.status).to.equal(401);
      expect(keyOnJwtRoute.body.error.code).to.equal('invalid_token');
    });

    it('accepts either credential where the endpoint takes both, and says which one was used', async () => {
      expect((await probe('api_key_or_jwt', user.apiKey)).body).to.deep.equal({
        account_id: user.account.id,
        credential: 'api_key',
      });
      expect((await probe('api_key_or_jwt', user.jwt)).body).to.deep.equal({
        account_id: user.account.id,
        credential: 'jwt',
      });
    });

    it('answers 403 email_not_verified to an unverified account, with either credential', async () => {
      for (const [mode, bearer] of [
        ['api_key', unverified.apiKey],
        ['jwt', unverified.jwt],
      ] as const) {
        const r = await probe(mode, bearer);
        expect(r.status, mode).to.equal(403);
        expect(r.body).to.deep.equal({
          error: { message: r.body.error.message, type: 'permission_error', code: 'email_not_verified', param: null },
        });
      }
    });

    it('gives the official OpenAI SDK errors it maps to AuthenticationError and PermissionDeniedError', async () => {
      const call = (apiKey: string) => new OpenAI({ apiKey, baseURL: web.url, maxRetries: 0 }).get('/probe/api_key');
      const bad = await call(generateApiKey().key).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(bad).to.be.instanceOf(OpenAI.AuthenticationError);
      expect((bad as InstanceType<typeof OpenAI.AuthenticationError>).code).to.equal('invalid_api_key');
      const forbidden = await call(unverified.apiKey).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(forbidden).to.be.instanceOf(OpenAI.PermissionDeniedError);
    });

    it('accepts a valid JWT and finds the account by its sub claim', async () => {
      const token = await hsToken({ sub: user.account.id }, { clock });
      expect((await probe('jwt', token)).body).to.deep.equal({ account_id: user.account.id, credential: 'jwt' });
    });

    it('finds the account by the email claim when sub is not an account id', async () => {
      const token = await hsToken({ sub: 'auth0|12345', email: user.account.email.toUpperCase() }, { clock });
      expect((await probe('jwt', token)).body.account_id).to.equal(user.account.id);
    });

    it('answers 401 unknown_account for a valid token that names no account', async () => {
      const r = await probe('jwt', await hsToken({ sub: randomUUID() }, { clock }));
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('unknown_account');
    });

    it('answers 401, not 500, for a signed token whose email claim Postgres could not compare', async () => {
      const r = await probe('jwt', await hsToken({ sub: 'idp|1', email: 'ada\u0000@example.com' }, { clock }));
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('unknown_account');
    });

    it('refuses a token whose payload was tampered with', async () => {
      const token = await hsToken({ sub: unverified.account.id }, { clock });
      const [h, , s] = token.split('.');
      const forged = Buffer.from(
        JSON.stringify({
          sub: user.account.id,
          iss: ISSUER,
          aud: AUDIENCE,
          exp: Math.floor(clock.now().getTime() / 1000) + 600,
        }),
      ).toString('base64url');
      const r = await probe('jwt', `${h}.${forged}.${s}`);
      expect(r.status).to.equal(401);
      expect(r.body.error).to.deep.include(authError('invalid_token'));
      expect(r.body.error.message).to.match(/signature/);
    });

    it('refuses a token signed with another secret', async () => {
      const r = await probe(
        'jwt',
        await hsToken({ sub: user.account.id }, { clock, secret: 'another-secret-that-is-also-long-enough!!' }),
      );
      expect(r.status).to.equal(401);
    });

    it('refuses an expired token (by the injected clock)', async () => {
      const token = await hsToken({ sub: user.account.id }, { clock });
      expect((await probe('jwt', token)).status).to.equal(200);
      clock.advance(11 * 60_000);
      const r = await probe('jwt', token);
      expect(r.status).to.equal(401);
      expect(r.body.error.message).to.match(/expired/);
    });

    it('refuses a token without exp', async () => {
      const r = await probe('jwt', await hsToken({ sub: user.account.id }, { clock, exp: null }));
      expect(r.status).to.equal(401);
      expect(r.body.error.message).to.match(/"exp"/);
    });

    it('refuses an unsigned token (alg none)', async () => {
      const now = Math.floor(clock.now().getTime() / 1000);
      const token = new UnsecuredJWT({ sub: user.account.id })
        .setIssuer(ISSUER)
        .setAudience(AUDIENCE)
        .setIssuedAt(now)
        .setExpirationTime(now + 600)
        .encode();
      expect(token.split('.')[2]).to.equal('');
      const r = await probe('jwt', token);
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('invalid_token');
    });

    it('refuses a token signed with an algorithm other than the pinned HS256', async () => {
      const r = await probe('jwt', await hsToken({ sub: user.account.id }, { clock, alg: 'HS512' }));
      expect(r.status).to.equal(401);
      expect(r.body.error.message).to.match(/algorithm/);
    });

    it('refuses a token from another issuer, for another audience, or with neither', async () => {
      for (const opts of [{ iss: 'https://evil.example' }, { aud: 'other-api' }, { iss: null }, { aud: null }]) {
        const r = await probe('jwt', await hsToken({ sub: user.account.id }, { clock, ...opts }));
        expect(r.status, JSON.stringify(opts)).to.equal(401);
        expect(r.body.error.message, JSON.stringify(opts)).to.match(/"(iss|aud)" claim/);
      }
    });
  });

  describe('with a JWKS (RS256/ES256) JWT configuration', () => {
    let web: TestWeb;
    let jwks: http.Server;
    let jwksUrl: string;
    let user: TestAccount;
    let rsa: { privateKey: CryptoKey; publicKey: CryptoKey };
    let ec: { privateKey: CryptoKey; publicKey: CryptoKey };
    let rsaJwk: JWK;
    const probe = (bearer: string) => get(`${web.url}/probe/jwt`, { bearer });
    const IDP = { JWT_ISSUER: 'https://idp.example.test/', JWT_AUDIENCE: 'completions-api' };
    const sign = (
      key: CryptoKey,
      alg: string,
      kid: string,
      claims: JWTPayload = { sub: user.account.id },
      to: { iss?: string; aud?: string } = { iss: IDP.JWT_ISSUER, aud: IDP.JWT_AUDIENCE },
    ) => {
      let jwt = new SignJWT(claims).setProtectedHeader({ alg, kid, typ: 'JWT' }).setIssuedAt().setExpirationTime('5m');
      if (to.iss !== undefined) jwt = jwt.setIssuer(to.iss);
      if (to.aud !== undefined) jwt = jwt.setAudience(to.aud);
      return jwt.sign(key);
    };

    before(async () => {
      rsa = await generateKeyPair('RS256', { extractable: true });
      ec = await generateKeyPair('ES256', { extractable: true });
      rsaJwk = { ...(await exportJWK(rsa.publicKey)), kid: 'rsa-1', alg: 'RS256', use: 'sig' };
      const ecJwk = { ...(await exportJWK(ec.publicKey)), kid: 'ec-1', alg: 'ES256', use: 'sig' };
      jwks = http.createServer((req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ keys: [rsaJwk, ecJwk] }));
      });
      await new Promise<void>((resolve) => jwks.listen(0, '127.0.0.1', resolve));
      jwksUrl = `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/.well-known/jwks.json`;
      web = await startTestWeb({ routes: credentialProbeRoutes(), env: { JWT_JWKS_URL: jwksUrl, ...IDP } });
      user = await createTestAccount(web.app);
    });
    after(async () => {
      await web.close();
      jwks.closeAllConnections();
      await new Promise<void>((resolve) => jwks.close(() => resolve()));
    });

    it('accepts RS256 and ES256 tokens signed by keys in the key set', async () => {
      expect((await probe(await sign(rsa.privateKey, 'RS256', 'rsa-1'))).body.account_id).to.equal(user.account.id);
      expect((await probe(await sign(ec.privateKey, 'ES256', 'ec-1'))).body.account_id).to.equal(user.account.id);
    });

    it('refuses a token of the key set issued by another issuer, for another audience, or naming neither', async () => {
      for (const to of [
        { iss: 'https://elsewhere.example.test/', aud: IDP.JWT_AUDIENCE },
        { iss: IDP.JWT_ISSUER, aud: 'another-app' },
        { iss: IDP.JWT_ISSUER },
        { aud: IDP.JWT_AUDIENCE },
      ]) {
        const r = await probe(await sign(rsa.privateKey, 'RS256', 'rsa-1', { sub: user.account.id }, to));
        expect(r.status, JSON.stringify(to)).to.equal(401);
        expect(r.body.error.code).to.equal('invalid_token');
        expect(r.body.error.message).to.match(/"(iss|aud)" claim/);
      }
    });

    it('binds a token of the key set to an account by email only when email_verified is true', async () => {
      const byEmail = (claims: JWTPayload) =>
        sign(rsa.privateKey, 'RS256', 'rsa-1', { sub: 'idp|ada', email: user.account.email, ...claims });
      for (const claims of [{}, { email_verified: false }, { email_verified: 'true' }]) {
        const r = await probe(await byEmail(claims));
        expect(r.status, JSON.stringify(claims)).to.equal(401);
        expect(r.body.error.code).to.equal('invalid_token');
        expect(r.body.error.message).to.match(/email_verified/);
      }
      const verified = await probe(await byEmail({ email_verified: true }));
      expect(verified.status).to.equal(200);
      expect(verified.body.account_id).to.equal(user.account.id);
    });

    it('refuses an HS256 token keyed with the published public key (algorithm confusion)', async () => {
      const now = Math.floor(Date.now() / 1000);
      for (const secret of [JSON.stringify(rsaJwk), rsaJwk.n!]) {
        const token = await new SignJWT({ sub: user.account.id })
          .setProtectedHeader({ alg: 'HS256', kid: 'rsa-1' })
          .setIssuedAt(now)
          .setExpirationTime(now + 300)
          .sign(enc(secret));
        const r = await probe(token);
        expect(r.status).to.equal(401);
        expect(r.body.error.message).to.match(/algorithm/);
      }
    });

    it('refuses an unsigned token (alg none)', async () => {
      const token = new UnsecuredJWT({ sub: user.account.id }).setIssuedAt().setExpirationTime('5m').encode();
      expect((await probe(token)).status).to.equal(401);
    });

    it('refuses a token signed by a key that is not in the key set', async () => {
      const stranger = await generateKeyPair('RS256');
      const r = await probe(await sign(stranger.privateKey, 'RS256', 'rsa-1'));
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('invalid_token');
    });

    it('answers 503 (not 401) when the key set cannot be fetched', async () => {
      const other = await startTestWeb({
        routes: credentialProbeRoutes(),
        env: { JWT_JWKS_URL: 'http://127.0.0.1:9/jwks.json', ...IDP },
      });
      try {
        const r = await get(`${other.url}/probe/jwt`, { bearer: await sign(rsa.privateKey, 'RS256', 'rsa-1') });
        expect(r.status).to.equal(503);
        expect(r.body.error.code).to.equal('jwks_unavailable');
        expect(r.headers.get('retry-after')).to.equal('5');
      } finally {
        await other.close();
      }
    });
  });

  describe('when the database is unreachable', () => {
    let web: TestWeb;
    let proxy: TcpProxy;
    before(async () => {
      const pg = new URL(process.env.DATABASE_URL!);
      proxy = await new TcpProxy(pg.hostname, Number(pg.port || 5432)).start();
      web = await startTestWeb({
        routes: credentialProbeRoutes(),
        env: { DATABASE_URL: proxy.url('postgres', pg.pathname) },
      });
      await proxy.cut();
    });
    after(async () => {
      await web.close();
      await proxy.cut();
    });

    it('still turns a malformed key down with 401: the checksum is checked before any lookup', async () => {
      const key = generateApiKey().key;
      const r = await get(`${web.url}/probe/api_key`, {
        bearer: `${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`,
      });
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('invalid_api_key');
      // The same request with a well-formed key has to reach the database, and cannot.
      const wellFormed = await get(`${web.url}/probe/api_key`, { bearer: key });
      expect(wellFormed.status).to.be.at.least(500);
    });
  });
});
