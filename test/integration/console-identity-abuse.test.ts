import { createHash } from 'node:crypto';
import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { closeOutboxFor, createTestAccount, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { fromBrowser, sessionCookieSet, signIn, signInLinkFor, type Browser } from '../support/console.js';
import { isolatedPrefix, uniqueEmail } from '../support/env.js';
import { get, post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const EVIL = 'https://evil.example';

// Issue 23, item 6: the ways into someone else's console, each tried and refused.

/** Emails written to the outbox for an address. */
const outboxCount = async (web: TestWeb, email: string) =>
  Number(
    (
      await web.app.db
        .selectFrom('email_outbox')
        .select((eb) => eb.fn.countAll().as('n'))
        .where('to_address', '=', email)
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('console identity under attack', () => {
  let web: TestWeb;
  const clock = new ManualClock(Date.now());
  const used: string[] = [];
  const browser = (): Browser => ({ origin: web.url });
  const verified = async (opts: { name?: string } = {}) => {
    const t = await createTestAccount(web.app);
    if (opts.name !== undefined)
      await web.app.db.updateTable('accounts').set({ name: opts.name }).where('id', '=', t.account.id).execute();
    used.push(t.account.email);
    return t.account;
  };
  const sessionsOf = (accountId: string) =>
    web.app.db.selectFrom('console_sessions').selectAll().where('account_id', '=', accountId).execute();

  before(async () => {
    web = await startTestWeb({ clock });
  });
  after(async () => {
    await closeOutboxFor(web.app, used);
    await web.close();
  });

  describe('sign-in links', () => {
    it('work once: a reused link is refused with token_used and starts no second session', async () => {
      const account = await verified();
      const token = await signInLinkFor(web.app, browser(), account.email);
      expect((await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { json: { token } })).status).to.equal(
        303,
      );
      const again = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { json: { token } });
      expect(again.status).to.equal(400);
      expect(again.body.error).to.include({ code: 'token_used', param: 'token' });
      expect(sessionCookieSet(again)).to.equal(undefined);
      expect(await sessionsOf(account.id)).to.have.length(1);
    });

    it('let exactly one of several concurrent uses through', async () => {
      const account = await verified();
      const token = await signInLinkFor(web.app, browser(), account.email);
      const results = await Promise.all(
        Array.from({ length: 5 }, () =>
          fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { json: { token } }),
        ),
      );
      expect(results.map((r) => r.status).sort()).to.deep.equal([303, 400, 400, 400, 400]);
      expect(await sessionsOf(account.id)).to.have.length(1);
    });

    it('expire after 15 minutes (a page and an envelope saying so), and work until then', async () => {
      const account = await verified();
      const late = await signInLinkFor(web.app, browser(), account.email);
      const inTime = await signInLinkFor(web.app, browser(), account.email);
      clock.advance(15 * 60_000 - 1000);
      expect(
        (await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { json: { token: inTime } })).status,
      ).to.equal(303);
      clock.advance(1001);
      const r = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { json: { token: late } });
      expect(r.status).to.equal(400);
      expect(r.body.error.code).to.equal('token_expired');
      const page = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { form: { token: late } });
      expect(page.status).to.equal(400);
      expect(page.text).to.include('This sign-in link has expired');
      const opened = await get(`${web.url}/console/sign-in/confirm?token=${late}`, {
        headers: { accept: 'text/html' },
      });
      expect(opened.status).to.equal(400);
      expect(opened.text).not.to.include('<form');
    });

    it('sign in only the address they were sent to, whatever else the request names', async () => {
      const mine = await verified();
      const theirs = await verified();
      const token = await signInLinkFor(web.app, browser(), mine.email);
      const r = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', {
        json: { token, email: theirs.email, account_id: theirs.id },
      });
      expect(r.status).to.equal(303);
      const b: Browser = { origin: web.url, cookie: sessionCookieSet(r)! };
      expect((await fromBrowser(b, 'GET', '/console/session')).body.account.email).to.equal(mine.email);
      expect(await sessionsOf(theirs.id)).to.have.length(0);
    });

    it('are not taken from another address’s email: a token is only the one in that email', async () => {
      const a = await verified();
      const b = await verified();
      const tokenA = await signInLinkFor(web.app, browser(), a.email);
      const tokenB = await signInLinkFor(web.app, browser(), b.email);
      expect(tokenA).not.to.equal(tokenB);
      const row = await web.app.db
        .selectFrom('sign_in_tokens')
        .selectAll()
        .where('token_hash', '=', sha256(tokenB))
        .executeTakeFirstOrThrow();
      expect(row.account_id).to.equal(b.id);
      const unknown = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', {
        json: { token: tokenA.slice(0, -2) + 'xx' },
      });
      expect(unknown.status).to.equal(400);
      expect(unknown.body.error.code).to.equal('invalid_token');
    });
  });

  describe('session fixation', () => {
    it('gives a new session id at every sign-in, and ends the one the browser had', async () => {
      const account = await verified();
      const before = await signIn(web.app, web.url, account.email);
      const token = await signInLinkFor(web.app, before, account.email);
      const r = await fromBrowser(before, 'POST', '/console/sign-in/confirm', { form: { token } });
      const after = sessionCookieSet(r)!;
      expect(after).to.be.a('string').and.not.equal(before.cookie);
      expect((await fromBrowser(before, 'GET', '/console/session')).body.signed_in).to.equal(false);
      expect((await fromBrowser({ ...before, cookie: after }, 'GET', '/console/session')).body.signed_in).to.equal(
        true,
      );
    });

    it('never adopts a cookie value planted in the browser before sign-in', async () => {
      const account = await verified();
      const planted = 'attacker-chosen-value-0123456789abcdefghijklmn';
      const b: Browser = { origin: web.url, cookie: planted };
      const token = await signInLinkFor(web.app, b, account.email);
      const r = await fromBrowser(b, 'POST', '/console/sign-in/confirm', { form: { token } });
      expect(r.status).to.equal(303);
      expect(sessionCookieSet(r)).not.to.equal(planted);
      expect((await fromBrowser(b, 'GET', '/console/session')).body.signed_in).to.equal(false);
      const rows = await sessionsOf(account.id);
      expect(rows.map((s) => s.id_hash)).not.to.include(sha256(planted));
    });

    it('ends an attacker’s own session planted in the victim’s browser when the victim signs in', async () => {
      const attacker = await verified();
      const victim = await verified();
      const planted = await signIn(web.app, web.url, attacker.email);
      const token = await signInLinkFor(web.app, planted, victim.email);
      const r = await fromBrowser(planted, 'POST', '/console/sign-in/confirm', { form: { token } });
      const b: Browser = { origin: web.url, cookie: sessionCookieSet(r)! };
      expect((await fromBrowser(b, 'GET', '/console/session')).body.account.email).to.equal(victim.email);
      expect((await fromBrowser(planted, 'GET', '/console/session')).body.signed_in).to.equal(false);
    });
  });

  describe('cross-site requests that change state', () => {
    it('are refused without the session’s CSRF token', async () => {
      const account = await verified();
      const b = await signIn(web.app, web.url, account.email);
      for (const path of ['/console/token', '/console/sign-out', '/console/sign-out-everywhere']) {
        const r = await fromBrowser(b, 'POST', path, { csrf: false });
        expect(r.status, path).to.equal(403);
        expect(r.body.error, path).to.include({ type: 'permission_error', code: 'csrf_token_invalid' });
      }
      const other = await signIn(web.app, web.url, (await verified()).email);
      const wrong = await fromBrowser(b, 'POST', '/console/token', { headers: { 'x-csrf-token': other.csrf } });
      expect(wrong.status).to.equal(403);
      expect((await fromBrowser(b, 'GET', '/console/session')).body.signed_in).to.equal(true);
    });

    it('are refused from another origin, or with no Origin, even with the CSRF token', async () => {
      const account = await verified();
      const b = await signIn(web.app, web.url, account.email);
      for (const origin of [EVIL, 'null', `${web.url}.evil.example`]) {
        const r = await fromBrowser(b, 'POST', '/console/sign-out', { headers: { origin } });
        expect(r.status, origin).to.equal(403);
        expect(r.body.error.code, origin).to.equal('cross_site_request');
      }
      const noOrigin = await post(`${web.url}/console/token`, undefined, {
        headers: { cookie: `svc_session=${b.cookie}`, 'x-csrf-token': b.csrf },
      });
      expect(noOrigin.status).to.equal(403);
      expect(noOrigin.body.error.code).to.equal('cross_site_request');
      expect((await fromBrowser(b, 'GET', '/console/session')).body.signed_in).to.equal(true);
    });

    it('cannot ask for a link, spend one, or verify an address from another site', async () => {
      const account = await verified();
      const ask = await fromBrowser(browser(), 'POST', '/console/sign-in', {
        json: { email: account.email },
        headers: { origin: EVIL },
      });
      expect(ask.status).to.equal(403);
      expect(await outboxCount(web, account.email)).to.equal(0);
      const token = await signInLinkFor(web.app, browser(), account.email);
      const spend = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', {
        form: { token },
        headers: { origin: EVIL },
      });
      expect(spend.status).to.equal(403);
      expect(sessionCookieSet(spend)).to.equal(undefined);
      const row = await web.app.db
        .selectFrom('sign_in_tokens')
        .select('used_at')
        .where('token_hash', '=', sha256(token))
        .executeTakeFirstOrThrow();
      expect(row.used_at).to.equal(null);

      const email = uniqueEmail('csrf-verify');
      used.push(email);
      await post(`${web.url}/v1/auth/signup`, { name: 'Eve', email, organization: 'Evil' });
      const verifyToken = verificationLinkIn((await latestEmailTo(web.app, email))!.text_body).token;
      const verify = await fromBrowser(browser(), 'POST', '/v1/auth/verify', {
        form: { token: verifyToken },
        headers: { origin: EVIL },
      });
      expect(verify.status).to.equal(403);
      const signedUp = await web.app.db
        .selectFrom('accounts')
        .select('verified_at')
        .where('email', '=', email)
        .executeTakeFirstOrThrow();
      expect(signedUp.verified_at).to.equal(null);
    });
  });

  describe('return paths', () => {
    const OPEN_REDIRECTS = [
      '//evil.example',
      'https://evil.example',
      'http:evil.example',
      '/\\evil.example',
      '\\\\evil.example',
      '/%2F%2Fevil.example',
      '/%2fevil.example',
      '/%5Cevil.example',
      '/%5cevil.example',
      '%2F%2Fevil.example',
      '/\t/evil.example',
      '/%09/evil.example',
      'javascript:alert(1)',
      'console/usage',
      '/%E0%A4%A',
    ];

    it('are refused unless they are a path on this service, and no email goes out', async () => {
      const account = await verified();
      for (const returnTo of OPEN_REDIRECTS) {
        const r = await fromBrowser(browser(), 'POST', '/console/sign-in', {
          json: { email: account.email, return_to: returnTo },
        });
        expect(r.status, returnTo).to.equal(422);
        expect(r.body.detail[0].loc, returnTo).to.deep.equal(['body', 'return_to']);
      }
      expect(await outboxCount(web, account.email)).to.equal(0);
    });

    it('lead only to same-origin paths after sign-in', async () => {
      const account = await verified();
      for (const returnTo of ['/console/usage', '/console/billing?upgrade=done', '/console/key#copy']) {
        const token = await signInLinkFor(web.app, browser(), account.email, returnTo);
        const r = await fromBrowser(browser(), 'POST', '/console/sign-in/confirm', { form: { token } });
        expect(r.headers.get('location')).to.equal(returnTo);
        expect(new URL(r.headers.get('location')!, web.url).origin).to.equal(web.url);
      }
    });
  });

  describe('credentials that have ended', () => {
    it('refuses a signed-out session’s cookie everywhere', async () => {
      const account = await verified();
      const b = await signIn(web.app, web.url, account.email);
      expect((await fromBrowser(b, 'POST', '/console/sign-out')).status).to.equal(204);
      for (const [method, path] of [
        ['POST', '/console/token'],
        ['POST', '/console/sign-out-everywhere'],
        ['GET', '/console/new-key'],
      ] as const) {
        const r = await fromBrowser(b, method, path);
        expect(r.status, path).to.equal(401);
        expect(r.body.error.code, path).to.equal('not_signed_in');
      }
    });

    it('refuses the console’s JWT once it has expired', async () => {
      const account = await verified();
      const b = await signIn(web.app, web.url, account.email);
      const { token, expires_in } = (await fromBrowser(b, 'POST', '/console/token')).body;
      expect((await get(`${web.url}/v1/subscription/info`, { bearer: token })).status).to.equal(200);
      // jose allows 5 seconds of clock skew.
      clock.advance((expires_in + 6) * 1000);
      const r = await get(`${web.url}/v1/subscription/info`, { bearer: token });
      expect(r.status).to.equal(401);
      expect(r.body.error).to.include({ code: 'invalid_token', message: 'The token has expired' });
    });
  });

  it('puts a name holding markup into the sign-in email as text', async () => {
    const account = await verified({ name: '<img src=x onerror=alert(1)>' });
    await signInLinkFor(web.app, browser(), account.email);
    const message = await latestEmailTo(web.app, account.email);
    expect(message!.html_body).to.include('&lt;img src=x onerror=alert(1)&gt;');
    expect(message!.html_body).not.to.include('<img');
  });
});

describe('a sign-in flood', () => {
  let web: TestWeb;
  const used: string[] = [];

  before(async () => {
    web = await startTestWeb({
      env: { REDIS_PREFIX: isolatedPrefix(), SIGNIN_PER_ADDRESS_PER_HOUR: '3', SIGNIN_PER_CLIENT_PER_HOUR: '40' },
    });
  });
  after(async () => {
    await closeOutboxFor(web.app, used);
    await web.close();
  });

  const ask = (email: string) => fromBrowser({ origin: web.url }, 'POST', '/console/sign-in', { json: { email } });
  /** What an answer shows the asker: status, body, and the names of its headers (not the values that vary). */
  const shape = (r: Awaited<ReturnType<typeof ask>>) => ({
    status: r.status,
    body: r.status === 429 ? { ...r.body, error: { ...r.body.error, message: typeof r.body.error.message } } : r.body,
    headers: [...r.headers.keys()].filter((h) => !['date', 'x-request-id', 'content-length'].includes(h)).sort(),
  });

  it('is limited per address, with the same answers for a known and an unknown address', async () => {
    const known = (await createTestAccount(web.app)).account.email;
    const unknown = uniqueEmail('flood-unknown');
    used.push(known, unknown);
    const answers = { known: [] as unknown[], unknown: [] as unknown[] };
    for (let i = 0; i < 4; i++) {
      answers.known.push(shape(await ask(known)));
      answers.unknown.push(shape(await ask(unknown)));
    }
    expect(answers.known).to.deep.equal(answers.unknown);
    expect(answers.known.map((a) => (a as { status: number }).status)).to.deep.equal([202, 202, 202, 429]);
    const refused = await ask(known);
    expect(refused.body.error).to.include({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded' });
    // The wait is up to an hour: no Retry-After for an SDK to sleep through, x-should-retry: false instead.
    expect(refused.headers.get('x-should-retry')).to.equal('false');
    expect(refused.body.error.message).to.match(
      /^Too many sign-in links asked for this email address or from your network/,
    );
  });

  it('does the same work for a known and an unknown address: one email written to the outbox with the answer', async () => {
    // Timing cannot tell the two apart when both answers wait on the same transaction and write one
    // row each; that is what is checked here, not a wall-clock race on a shared machine.
    const known = (await createTestAccount(web.app)).account.email;
    const unknown = uniqueEmail('same-work');
    used.push(known, unknown);
    const [beforeKnown, beforeUnknown] = [await outboxCount(web, known), await outboxCount(web, unknown)];
    expect((await ask(known)).status).to.equal(202);
    expect((await ask(unknown)).status).to.equal(202);
    expect(await outboxCount(web, known)).to.equal(beforeKnown + 1);
    expect(await outboxCount(web, unknown)).to.equal(beforeUnknown + 1);
  });

  it('is limited per client network across addresses', async () => {
    const limited = await startTestWeb({
      env: { REDIS_PREFIX: isolatedPrefix(), SIGNIN_PER_ADDRESS_PER_HOUR: '10', SIGNIN_PER_CLIENT_PER_HOUR: '4' },
    });
    try {
      const emails = Array.from({ length: 5 }, () => uniqueEmail('flood-client'));
      used.push(...emails);
      const statuses: number[] = [];
      for (const email of emails)
        statuses.push(
          (await fromBrowser({ origin: limited.url }, 'POST', '/console/sign-in', { json: { email } })).status,
        );
      expect(statuses).to.deep.equal([202, 202, 202, 202, 429]);
    } finally {
      await closeOutboxFor(limited.app, used);
      await limited.close();
    }
  });
});
