import { createHash } from 'node:crypto';
import http from 'node:http';
import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { accountsRoutes } from '../../src/http/routes/accounts.routes.js';
import { closeOutboxFor, credentialProbeRoutes, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { uniqueEmail } from '../support/env.js';
import { get, post, request, type HttpResult } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8';

describe('GET /v1/auth/verify', () => {
  let web: TestWeb;
  const clock = new ManualClock(Date.now());
  const used: string[] = [];

  /** Signs up a new address and returns it with the token from its verification email. */
  async function signUp(tag = 'verify'): Promise<{ email: string; token: string }> {
    const email = uniqueEmail(tag);
    used.push(email);
    const r = await post(`${web.url}/v1/auth/signup`, { name: 'Grace Hopper', email, organization: 'Navy' });
    expect(r.status).to.equal(200);
    const message = await latestEmailTo(web.app, email);
    return { email, token: verificationLinkIn(message!.text_body).token };
  }
  const verify = (token: string, accept = 'application/json') =>
    get(`${web.url}/v1/auth/verify?token=${encodeURIComponent(token)}`, { headers: { accept } });
  const account = (email: string) =>
    web.app.db.selectFrom('accounts').selectAll().where('email', '=', email).executeTakeFirstOrThrow();
  const keysOf = async (email: string) => {
    const { id } = await account(email);
    return web.app.db.selectFrom('api_keys').selectAll().where('account_id', '=', id).orderBy('created_at').execute();
  };

  before(async () => {
    web = await startTestWeb({ clock, routes: [...accountsRoutes(), ...credentialProbeRoutes()] });
  });
  after(async () => {
    await closeOutboxFor(web.app, used);
    await web.close();
  });

  it('verifies the account and answers with the API key as JSON, never cached', async () => {
    const { email, token } = await signUp();
    const r = await verify(token);
    expect(r.status).to.equal(200);
    expect(r.headers.get('content-type')).to.match(/^application\/json/);
    expect(r.headers.get('cache-control')).to.equal('no-store');
    expect(Object.keys(r.body).sort()).to.deep.equal(['api_key', 'email', 'message']);
    expect(r.body.email).to.equal(email);
    expect(r.body.api_key).to.match(/^sk-svc-[A-Za-z0-9_-]{43}[0-9A-Za-z]{6}$/);
    expect(r.body.message).to.match(/save it now/i);
    expect((await account(email)).verified_at).to.deep.equal(clock.now());
  });

  it('stores only the hash of the issued key, and the key authenticates', async () => {
    const { email, token } = await signUp();
    const { body } = await verify(token);
    const keys = await keysOf(email);
    expect(keys).to.have.length(1);
    expect(keys[0]!.key_hash).to.equal(sha256(body.api_key));
    expect(keys[0]!.display_prefix).to.equal(body.api_key.slice(0, 13));
    const probe = await get(`${web.url}/probe/api_key`, { bearer: body.api_key });
    expect(probe.status).to.equal(200);
    expect(probe.body.account_id).to.equal((await account(email)).id);
  });

  it('turns a used token down with 400 token_used and issues no second key', async () => {
    const { email, token } = await signUp();
    expect((await verify(token)).status).to.equal(200);
    const again = await verify(token);
    expect(again.status).to.equal(400);
    expect(again.body).to.deep.equal({
      error: { message: again.body.error.message, type: 'invalid_request_error', code: 'token_used', param: 'token' },
    });
    expect(again.text).not.to.match(/sk-svc-/);
    expect(await keysOf(email)).to.have.length(1);
  });

  it('lets exactly one of several concurrent uses of a token through', async () => {
    const { email, token } = await signUp();
    const results = await Promise.all(Array.from({ length: 6 }, () => verify(token)));
    expect(results.filter((r) => r.status === 200)).to.have.length(1);
    expect(results.filter((r) => r.status === 400).map((r) => r.body.error.code)).to.deep.equal(
      Array(5).fill('token_used'),
    );
    expect(await keysOf(email)).to.have.length(1);
  });

  it('accepts a token just before it expires', async () => {
    const { token } = await signUp();
    clock.advance(24 * 3_600_000 - 1000);
    expect((await verify(token)).status).to.equal(200);
  });

  it('turns an expired token down with 400 token_expired and leaves the account unverified', async () => {
    const { email, token } = await signUp();
    clock.advance(24 * 3_600_000 + 1);
    const r = await verify(token);
    expect(r.status).to.equal(400);
    expect(r.body.error).to.include({ type: 'invalid_request_error', code: 'token_expired', param: 'token' });
    expect(r.body.error.message).to.match(/sign up again/i);
    expect((await account(email)).verified_at).to.equal(null);
    expect(await keysOf(email)).to.have.length(0);
  });

  it('sends a fresh working link when an address whose link expired signs up again', async () => {
    const { email, token } = await signUp();
    clock.advance(25 * 3_600_000);
    expect((await verify(token)).body.error.code).to.equal('token_expired');
    await post(`${web.url}/v1/auth/signup`, { name: 'Grace Hopper', email, organization: 'Navy' });
    const fresh = verificationLinkIn((await latestEmailTo(web.app, email))!.text_body).token;
    const r = await verify(fresh);
    expect(r.status).to.equal(200);
    expect(r.body.email).to.equal(email);
  });

  it('closes the other open links of an account once one of them verified it', async () => {
    const { email, token: first } = await signUp();
    await post(`${web.url}/v1/auth/signup`, { name: 'Grace Hopper', email: email.toUpperCase(), organization: 'Navy' });
    const second = verificationLinkIn((await latestEmailTo(web.app, email))!.text_body).token;
    expect(second).not.to.equal(first);
    // Either link works (emails may arrive out of order) ...
    expect((await verify(second)).status).to.equal(200);
    // ... but only once per account.
    const r = await verify(first);
    expect(r.status).to.equal(400);
    expect(r.body.error.code).to.equal('token_used');
    expect(await keysOf(email)).to.have.length(1);
  });

  it('turns an unknown token down with 400 invalid_token', async () => {
    const r = await verify('A'.repeat(43));
    expect(r.status).to.equal(400);
    expect(r.body.error).to.include({ type: 'invalid_request_error', code: 'invalid_token', param: 'token' });
  });

  it('answers 422 with the interface body when the token is missing', async () => {
    const r = await get(`${web.url}/v1/auth/verify`);
    expect(r.status).to.equal(422);
    expect(r.body).to.deep.equal({
      detail: [{ loc: ['query', 'token'], msg: 'Field required', type: 'missing' }],
      error: {
        message: "Invalid 'token': Field required",
        type: 'invalid_request_error',
        code: 'missing',
        param: 'token',
      },
    });
  });

  it('shows a browser a page whose button verifies, and spends nothing until it is pressed (mail scanners open links)', async () => {
    const { email, token } = await signUp();
    const r = await verify(token, BROWSER_ACCEPT);
    expect(r.status).to.equal(200);
    expect(r.headers.get('content-type')).to.match(/^text\/html/);
    expect(r.headers.get('cache-control')).to.equal('no-store');
    expect(r.headers.get('content-security-policy')).to.include("script-src 'none'").and.include("form-action 'self'");
    expect(r.text).to.include('<form method="post" action="/v1/auth/verify">');
    expect(r.text).not.to.match(/sk-svc-/);
    expect((await account(email)).verified_at).to.equal(null);
    expect(await keysOf(email)).to.have.length(0);
  });

  it('answers a used token with an HTML error page (and no key) when the browser asks for HTML', async () => {
    const { token } = await signUp();
    await verify(token);
    const r = await verify(token, BROWSER_ACCEPT);
    expect(r.status).to.equal(400);
    expect(r.headers.get('content-type')).to.match(/^text\/html/);
    expect(r.headers.get('cache-control')).to.equal('no-store');
    expect(r.text).to.include('This link was already used');
    expect(r.text).not.to.match(/sk-svc-/);
  });

  /** What a link scanner sees and leaves behind: the button page, no key, the token unspent. */
  async function expectUnspentButtonPage(r: HttpResult, email: string): Promise<void> {
    expect(r.status).to.equal(200);
    expect(r.headers.get('content-type')).to.match(/^text\/html/);
    expect(r.headers.get('cache-control')).to.equal('no-store');
    expect(r.text).to.include('<form method="post" action="/v1/auth/verify">');
    expect(r.text).not.to.match(/sk-svc-/);
    expect((await account(email)).verified_at).to.equal(null);
    expect(await keysOf(email)).to.have.length(0);
    expect(await tokenUsedAt(email)).to.equal(null);
  }
  const tokenUsedAt = async (email: string) => {
    const { id } = await account(email);
    const row = await web.app.db
      .selectFrom('email_verification_tokens')
      .select('used_at')
      .where('account_id', '=', id)
      .executeTakeFirstOrThrow();
    return row.used_at;
  };

  it('answers a client that accepts anything (*/*: mail scanners, chat previews, curl) with the button page, and spends nothing', async () => {
    const { email, token } = await signUp();
    await expectUnspentButtonPage(await verify(token, '*/*'), email);
  });

  it('answers a request without an Accept header with the button page, and spends nothing', async () => {
    const { email, token } = await signUp();
    await expectUnspentButtonPage(await getWithoutAccept(`${web.url}/v1/auth/verify?token=${token}`), email);
  });

  it('answers JSON only when application/json is preferred to text/html', async () => {
    const { email, token } = await signUp();
    await expectUnspentButtonPage(await verify(token, 'text/html, application/json;q=0.9'), email);
    const r = await verify(token, 'application/json, text/html;q=0.9');
    expect(r.status).to.equal(200);
    expect(r.body.api_key).to.match(/^sk-svc-/);
  });

  it('never spends the token on HEAD, even one asking for JSON', async () => {
    const { email, token } = await signUp();
    for (const accept of ['application/json', '*/*', BROWSER_ACCEPT]) {
      const r = await request('HEAD', `${web.url}/v1/auth/verify?token=${token}`, { headers: { accept } });
      expect(r.status, accept).to.equal(200);
      expect(r.text, accept).to.equal('');
    }
    expect((await account(email)).verified_at).to.equal(null);
    expect(await keysOf(email)).to.have.length(0);
    expect(await tokenUsedAt(email)).to.equal(null);
  });

  it('still gives a JSON client the key after scanners opened the link, and spends the token exactly once', async () => {
    const { email, token } = await signUp();
    await verify(token, '*/*');
    await request('HEAD', `${web.url}/v1/auth/verify?token=${token}`);
    const r = await verify(token);
    expect(r.status).to.equal(200);
    expect(r.body.email).to.equal(email);
    expect(await keysOf(email)).to.have.length(1);
    expect(await tokenUsedAt(email)).to.deep.equal(clock.now());
  });
});

/** A GET with no Accept header at all (fetch always sends one), as some link scanners send it. */
function getWithoutAccept(url: string): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => {
          const headers = new Headers();
          for (const [name, value] of Object.entries(res.headers))
            if (typeof value === 'string') headers.set(name, value);
          resolve({ status: res.statusCode!, headers, text, body: undefined });
        });
      })
      .on('error', reject);
  });
}
