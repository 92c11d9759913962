import { createHash } from 'node:crypto';
import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { closeOutboxFor, createTestAccount, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { fromBrowser, sessionCookieSet, signIn, signInLinkFor, type Browser } from '../support/console.js';
import { uniqueEmail } from '../support/env.js';
import { get, post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

describe('console sign-in, sessions and tokens', () => {
  let web: TestWeb;
  const clock = new ManualClock(Date.now());
  const used: string[] = [];
  const browser = (): Browser => ({ origin: web.url });
  const verified = async () => {
    const t = await createTestAccount(web.app);
    used.push(t.account.email);
    return t;
  };

  before(async () => {
    web = await startTestWeb({ clock });
  });
  after(async () => {
    await closeOutboxFor(web.app, used);
    await web.close();
  });

  describe('asking for a sign-in link', () => {
    it('answers 202 sent and emails a one-time link, stored only as its hash, that lasts 15 minutes', async () => {
      const { account } = await verified();
      const token = await signInLinkFor(web.app, browser(), account.email);
      const rows = await web.app.db
        .selectFrom('sign_in_tokens')
        .selectAll()
        .where('account_id', '=', account.id)
        .execute();
      expect(rows).to.have.length(1);
      expect(rows[0]!.token_hash).to.equal(sha256(token));
      expect(rows[0]!.expires_at.getTime() - clock.now().getTime()).to.equal(15 * 60_000);
      expect(rows[0]!.return_to).to.equal('/console/');
      const message = await latestEmailTo(web.app, account.email);
      expect(message!.kind).to.equal('sign_in_link');
    });

    it('sends an unverified account a fresh verification link instead, and an unknown address a note that it has no account', async () => {
      const unverified = await createTestAccount(web.app, { verified: false });
      used.push(unverified.account.email);
      const unknown = uniqueEmail('nobody');
      used.push(unknown);
      for (const email of [unverified.account.email, unknown]) {
        const r = await fromBrowser(browser(), 'POST', '/console/sign-in', { json: { email } });
        expect(r.status).to.equal(202);
        expect(r.body).to.deep.equal({ status: 'sent' });
      }
      const toUnverified = await latestEmailTo(web.app, unverified.account.email);
      expect(toUnverified!.kind).to.equal('verification');
      expect(verificationLinkIn(toUnverified!.text_body).token).to.be.a('string');
      const toUnknown = await latestEmailTo(web.app, unknown);
      expect(toUnknown!.kind).to.equal('sign_in_no_account');
      expect(toUnknown!.text_body).not.to.match(/token=/);
      expect(toUnknown!.text_body).to.match(/https?:\/\/\S+\/console\/sign-up\n/);
    });

    it('points the "you already have an account" email at the console sign-in, not at a dashboard login', async () => {
      const { account } = await verified();
      await post(`${web.url}/v1/auth/signup`, { name: 'Ada', email: account.email, organization: 'Engines' });
      const message = await latestEmailTo(web.app, account.email);
      expect(message!.kind).to.equal('account_exists');
      expect(message!.text_body).to.include(`/console/sign-in`);
      expect(message!.text_body).not.to.match(/dashboard/i);
    });
  });

  describe('following the link', () => {
    it('shows a page whose button signs in, without spending the link (a mail scanner fetches it first)', async () => {
      const { account } = await verified();
      const token = await signInLinkFor(web.app, browser(), account.email);
      const page = await get(`${web.url}/console/sign-in/confirm?token=${token}`, {
        headers: { accept: BROWSER_ACCEPT },
      });
      expect(page.status).to.equal(200);
      expect(page.headers.get('content-type')).to.match(/^text\/html/);
      expect(page.headers.get('cache-control')).to.equal('no-store');
      expect(page.headers.get('content-security-policy'))
        .to.include("script-src 'none'")
        .and.include("frame-ancestors 'none'");
      expect(page.text).to.include('<form method="post" action="/console/sign-in/confirm">');
      expect(page.text).to.include(`name="token" value="${token}"`);
      expect(page.text).not.to.include('<script');
      const row = await web.app.db
        .selectFrom('sign_in_tokens')
        .selectAll()
        .where('token_hash', '=', sha256(token))
        .executeTakeFirstOrThrow();
      expect(row.used_at).to.equal(null);
    });

    it('signs in on the button: a new session (stored hashed), an HttpOnly SameSite=Lax cookie, and 303 to the console', async () => {
      const { account } = await verified();
      const token = await signInLinkFor(web.app, browser(), account.email);
      const r = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { form: { token } });
      expect(r.status).to.equal(303);
      expect(r.headers.get('location')).to.equal('/console/');
      const [line] = r.headers.getSetCookie();
      expect(line).to.match(/^svc_session=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Lax; Max-Age=604800$/);
      const value = sessionCookieSet(r)!;
      const sessions = await web.app.db
        .selectFrom('console_sessions')
        .selectAll()
        .where('account_id', '=', account.id)
        .execute();
      expect(sessions.map((s) => s.id_hash)).to.deep.equal([sha256(value)]);
    });

    it('goes to the return path the link was asked for', async () => {
      const { account } = await verified();
      const token = await signInLinkFor(web.app, browser(), account.email, '/console/usage?range=30d');
      const r = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { json: { token } });
      expect(r.status).to.equal(303);
      expect(r.headers.get('location')).to.equal('/console/usage?range=30d');
    });
  });

  describe('a session', () => {
    it('names its account and CSRF token, never cached', async () => {
      const { account } = await verified();
      const b = await signIn(web.app, web.url, account.email);
      const r = await fromBrowser(b, 'GET', '/console/session');
      expect(r.status).to.equal(200);
      expect(r.headers.get('cache-control')).to.equal('no-store');
      expect(r.body).to.deep.equal({
        signed_in: true,
        account: {
          id: account.id,
          email: account.email,
          name: account.name,
          organization: account.organization,
          tier: 'free',
        },
        csrf_token: b.csrf,
        jwt_available: true,
        billing_configured: web.app.config.stripe.secretKey !== undefined,
      });
    });

    it('says whether billing is configured (a Stripe key set), so the billing page can say so before any action', async () => {
      for (const [key, configured] of [
        ['', false],
        ['sk_test_console', true],
      ] as const) {
        const other = await startTestWeb({ clock, env: { STRIPE_SECRET_KEY: key } });
        try {
          const { account } = await verified();
          const b = await signIn(other.app, other.url, account.email);
          const r = await fromBrowser(b, 'GET', '/console/session');
          expect(r.body.billing_configured, `STRIPE_SECRET_KEY '${key}'`).to.equal(configured);
        } finally {
          await other.close();
        }
      }
    });

    it('answers signed_in false without a cookie, or with one naming no session', async () => {
      expect((await fromBrowser(browser(), 'GET', '/console/session')).body).to.deep.equal({
        signed_in: false,
        jwt_available: true,
      });
      const r = await fromBrowser({ origin: web.url, cookie: 'made-up-value' }, 'GET', '/console/session');
      expect(r.body).to.deep.equal({ signed_in: false, jwt_available: true });
    });

    it('issues short-lived JWTs that the /v1 JWT endpoints accept', async () => {
      const { account } = await verified();
      const b = await signIn(web.app, web.url, account.email);
      const r = await fromBrowser(b, 'POST', '/console/token');
      expect(r.status).to.equal(200);
      expect(r.headers.get('cache-control')).to.equal('no-store');
      expect(r.body.expires_in).to.equal(300);
      expect(new Date(r.body.expires_at).getTime()).to.equal(Math.floor(clock.now().getTime() / 1000) * 1000 + 300_000);
      const info = await get(`${web.url}/v1/subscription/info`, { bearer: r.body.token });
      expect(info.status).to.equal(200);
      expect(info.body.tier).to.equal('free');
      const models = await get(`${web.url}/v1/models`, { bearer: r.body.token });
      expect(models.status).to.equal(200);
    });

    it('ends after CONSOLE_SESSION_IDLE_MINUTES without a request', async () => {
      const { account } = await verified();
      const b = await signIn(web.app, web.url, account.email);
      clock.advance(12 * 3_600_000 - 1000);
      expect((await fromBrowser(b, 'GET', '/console/session')).body.signed_in).to.equal(true);
      clock.advance(12 * 3_600_000 + 1000);
      expect((await fromBrowser(b, 'GET', '/console/session')).body.signed_in).to.equal(false);
      expect((await fromBrowser(b, 'POST', '/console/token')).status).to.equal(401);
    });

    it('ends CONSOLE_SESSION_MAX_HOURS after sign-in however active it is', async () => {
      const { account } = await verified();
      const b = await signIn(web.app, web.url, account.email);
      for (let hour = 0; hour < 7 * 24 - 6; hour += 6) {
        clock.advance(6 * 3_600_000);
        expect((await fromBrowser(b, 'GET', '/console/session')).body.signed_in, `hour ${hour + 6}`).to.equal(true);
      }
      clock.advance(6 * 3_600_000);
      expect((await fromBrowser(b, 'GET', '/console/session')).body.signed_in).to.equal(false);
    });
  });

  describe('signing out', () => {
    it('ends this session and clears its cookie; the old cookie is refused afterwards', async () => {
      const { account } = await verified();
      const b = await signIn(web.app, web.url, account.email);
      const r = await fromBrowser(b, 'POST', '/console/sign-out');
      expect(r.status).to.equal(204);
      expect(sessionCookieSet(r)).to.equal('');
      expect(r.headers.getSetCookie()[0]).to.include('Max-Age=0');
      expect((await fromBrowser(b, 'GET', '/console/session')).body.signed_in).to.equal(false);
      const token = await fromBrowser(b, 'POST', '/console/token');
      expect(token.status).to.equal(401);
      expect(token.body.error.code).to.equal('not_signed_in');
    });

    it('everywhere: every session of the account ends, another account’s stays', async () => {
      const { account } = await verified();
      const other = await verified();
      const laptop = await signIn(web.app, web.url, account.email);
      const phone = await signIn(web.app, web.url, account.email);
      const theirs = await signIn(web.app, web.url, other.account.email);
      expect((await fromBrowser(phone, 'POST', '/console/sign-out-everywhere')).status).to.equal(204);
      expect((await fromBrowser(laptop, 'GET', '/console/session')).body.signed_in).to.equal(false);
      expect((await fromBrowser(phone, 'GET', '/console/session')).body.signed_in).to.equal(false);
      expect((await fromBrowser(theirs, 'GET', '/console/session')).body.signed_in).to.equal(true);
    });
  });

  describe('signing out everywhere, with links and tokens already out', () => {
    const asJwt = (token: string) => get(`${web.url}/v1/subscription/info`, { bearer: token });

    it('voids the sign-in links already sent and every JWT issued before it, and later ones work', async () => {
      const { account, jwt: minted } = await verified();
      const laptop = await signIn(web.app, web.url, account.email);
      const consoleJwt = (await fromBrowser(laptop, 'POST', '/console/token')).body.token as string;
      const pendingLink = await signInLinkFor(web.app, { origin: web.url }, account.email);
      expect((await asJwt(consoleJwt)).status).to.equal(200);
      expect((await asJwt(minted)).status).to.equal(200);

      clock.advance(1000);
      expect((await fromBrowser(laptop, 'POST', '/console/sign-out-everywhere')).status).to.equal(204);
      for (const token of [consoleJwt, minted]) {
        const r = await asJwt(token);
        expect(r.status).to.equal(401);
        expect(r.body.error.code).to.equal('token_revoked');
      }
      const link = await fromBrowser({ origin: web.url }, 'POST', '/console/sign-in/confirm', {
        form: { token: pendingLink },
      });
      expect(link.status).to.equal(400);
      expect(link.text).to.match(/already used/);

      clock.advance(1000);
      const again = await signIn(web.app, web.url, account.email);
      const fresh = (await fromBrowser(again, 'POST', '/console/token')).body.token as string;
      expect((await asJwt(fresh)).status).to.equal(200);
    });
  });

  describe('verifying in a browser', () => {
    async function signUp(): Promise<{ email: string; token: string }> {
      const email = uniqueEmail('console-verify');
      used.push(email);
      await post(`${web.url}/v1/auth/signup`, { name: 'Grace Hopper', email, organization: 'Navy' });
      return { email, token: verificationLinkIn((await latestEmailTo(web.app, email))!.text_body).token };
    }

    it('shows a button page on GET and spends nothing; API clients still get the key as JSON', async () => {
      const { email, token } = await signUp();
      const page = await get(`${web.url}/v1/auth/verify?token=${token}`, { headers: { accept: BROWSER_ACCEPT } });
      expect(page.status).to.equal(200);
      expect(page.text).to.include('<form method="post" action="/v1/auth/verify">');
      expect(page.text).not.to.match(/sk-svc-/);
      const account = await web.app.db
        .selectFrom('accounts')
        .selectAll()
        .where('email', '=', email)
        .executeTakeFirstOrThrow();
      expect(account.verified_at).to.equal(null);
      const json = await get(`${web.url}/v1/auth/verify?token=${token}`, { headers: { accept: 'application/json' } });
      expect(json.status).to.equal(200);
      expect(json.body.api_key).to.match(/^sk-svc-/);
    });

    it('verifies on the button, signs in, and the console shows the key exactly once', async () => {
      const { email, token } = await signUp();
      const b: Browser = browser();
      const r = await fromBrowser(b, 'POST', '/v1/auth/verify', { form: { token } });
      expect(r.status).to.equal(303);
      expect(r.headers.get('location')).to.equal('/console/key?new=1');
      b.cookie = sessionCookieSet(r)!;
      const session = await fromBrowser(b, 'GET', '/console/session');
      expect(session.body.account.email).to.equal(email);
      b.csrf = session.body.csrf_token;
      const key = await fromBrowser(b, 'GET', '/console/new-key');
      expect(key.status).to.equal(200);
      expect(key.body.model).to.equal(web.app.catalog.forTier('free')[0]!.id);
      expect(key.headers.get('cache-control')).to.equal('no-store');
      expect(key.body.api_key).to.match(/^sk-svc-/);
      expect((await get(`${web.url}/v1/models`, { bearer: key.body.api_key })).status).to.equal(200);
      const again = await fromBrowser(b, 'GET', '/console/new-key');
      expect(again.status).to.equal(404);
      expect(again.body.error.code).to.equal('no_new_api_key');
    });

    it('keeps the key sealed: the stored session holds no key in the clear, and it needs the CSRF token', async () => {
      const { email, token } = await signUp();
      const b: Browser = browser();
      const r = await fromBrowser(b, 'POST', '/v1/auth/verify', { form: { token } });
      b.cookie = sessionCookieSet(r)!;
      const row = await web.app.db
        .selectFrom('console_sessions')
        .innerJoin('accounts', 'accounts.id', 'console_sessions.account_id')
        .select('pending_api_key')
        .where('accounts.email', '=', email)
        .executeTakeFirstOrThrow();
      expect(row.pending_api_key)
        .to.be.a('string')
        .and.not.match(/sk-svc-/);
      const noCsrf = await fromBrowser(b, 'GET', '/console/new-key');
      expect(noCsrf.status).to.equal(403);
      expect(noCsrf.body.error.code).to.equal('csrf_token_invalid');
    });
  });

  describe('with an external identity provider (JWT_JWKS_URL only)', () => {
    let idp: TestWeb;
    before(async () => {
      idp = await startTestWeb({
        clock,
        env: {
          JWT_JWKS_URL: 'http://127.0.0.1:9/jwks.json',
          JWT_ISSUER: 'https://idp.example.test/',
          JWT_AUDIENCE: 'completions-api',
        },
      });
    });
    after(() => idp.close());

    it('says jwt_available false, and the token endpoint answers 501 saying why', async () => {
      expect((await fromBrowser({ origin: idp.url }, 'GET', '/console/session')).body).to.deep.equal({
        signed_in: false,
        jwt_available: false,
      });
      const t = await createTestAccount(idp.app);
      used.push(t.account.email);
      const b = await signIn(idp.app, idp.url, t.account.email);
      const r = await fromBrowser(b, 'POST', '/console/token');
      expect(r.status).to.equal(501);
      expect(r.body.error.code).to.equal('console_jwt_unavailable');
      expect(r.body.error.message).to.match(/external identity provider \(JWT_JWKS_URL\)/);
    });

    it('shows the key once on its own page, its example naming a model the account may use (issue 22, item 6)', async () => {
      const email = uniqueEmail('idp-verify');
      used.push(email);
      await post(`${idp.url}/v1/auth/signup`, { name: 'Ada', email, organization: 'Engines' });
      const token = verificationLinkIn((await latestEmailTo(idp.app, email))!.text_body).token;
      const r = await fromBrowser({ origin: idp.url }, 'POST', '/v1/auth/verify', { form: { token } });
      expect(r.status).to.equal(200);
      expect(r.text).to.match(/<code class="secret" id="api-key">sk-svc-/);
      const model = idp.app.catalog.forTier('free')[0]!.id;
      expect(r.text).to.include(`"model": "${model}"`);
      expect(r.text).not.to.include('"model": "…"');
    });
  });
});
