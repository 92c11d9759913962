import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { startEmailSender, type EmailSender } from '../../workers/email-sender.js';
import { FakePostmark } from '../fakes/postmark.js';
import { closeOutboxFor, createTestAccount, verificationLinkIn } from '../support/accounts.js';
import { fromBrowser, signInTokenIn } from '../support/console.js';
import { uniqueEmail } from '../support/env.js';
import { get, post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Whoever reads the outbox (a backup, a replica, a support tool) must find no link that works: a
// message's one-time token is cut out of the row once the message is sent or given up, while the
// mail itself, as the provider receives it, carries the link unchanged.

// An API client asks for JSON; anything else gets the button page, which spends nothing (accounts.md).
const asksForJson = { headers: { accept: 'application/json' } };

describe('email outbox: no usable token at rest', () => {
  const clock = new ManualClock(Date.now());
  let fake: FakePostmark;
  let web: TestWeb;
  let sender: EmailSender;
  const used: string[] = [];

  before(async () => {
    fake = await new FakePostmark().start();
    web = await startTestWeb({ clock, env: { ...fake.env(), MAIL_MAX_ATTEMPTS: '4' } });
    sender = startEmailSender(web.app, { poll: false });
  });
  after(async () => {
    await sender.stop();
    await closeOutboxFor(web.app, used);
    await web.close();
    await fake.close();
  });

  /** Every row the outbox holds for the address, every column, as one text. */
  const outboxText = async (email: string) =>
    JSON.stringify(await web.app.db.selectFrom('email_outbox').selectAll().where('to_address', '=', email).execute());
  /** Anything in the rows shaped like a token (32 bytes in base64url), to try as one. */
  const tokenLike = (text: string) => [...new Set(text.match(/[A-Za-z0-9_-]{43}/g) ?? [])];

  it('keeps no usable verification token in the outbox once the verification email is sent', async () => {
    const email = uniqueEmail('at-rest-verify');
    used.push(email);
    expect(
      (await post(`${web.url}/v1/auth/signup`, { name: 'Grace Hopper', email, organization: 'Navy' })).status,
    ).to.equal(200);
    await sender.drainOnce();

    const [mail] = fake.accepted(email);
    const { token } = verificationLinkIn(mail!.TextBody!);
    expect(mail!.HtmlBody).to.include(`token=${token}`);
    const rows = await outboxText(email);
    expect(rows).not.to.include(token);
    expect(rows).to.include('token=[removed once sent]');
    for (const candidate of tokenLike(rows)) {
      const r = await get(`${web.url}/v1/auth/verify?token=${encodeURIComponent(candidate)}`, asksForJson);
      expect(r.status, candidate).to.equal(400);
      expect(r.body.error.code).to.equal('invalid_token');
    }
    // The mail itself still works: the token was taken from the row, not from the message.
    const verified = await get(`${web.url}/v1/auth/verify?token=${token}`, asksForJson);
    expect(verified.status).to.equal(200);
    expect(verified.body.api_key).to.match(/^sk-svc-/);
  });

  it('keeps no usable sign-in token in the outbox once the sign-in email is sent', async () => {
    const { account } = await createTestAccount(web.app);
    used.push(account.email);
    const browser = { origin: web.url };
    expect(
      (await fromBrowser(browser, 'POST', '/console/sign-in', { json: { email: account.email } })).status,
    ).to.equal(202);
    await sender.drainOnce();

    const token = signInTokenIn(fake.accepted(account.email)[0]!.TextBody!);
    const rows = await outboxText(account.email);
    expect(rows).not.to.include(token);
    for (const candidate of tokenLike(rows)) {
      const r = await fromBrowser(browser, 'POST', '/console/sign-in/confirm', { form: { token: candidate } });
      expect(r.status, candidate).to.equal(400);
    }
    const signedIn = await fromBrowser(browser, 'POST', '/console/sign-in/confirm', { form: { token } });
    expect(signedIn.status).to.equal(303);
  });

  it('keeps no usable token in a message the provider refused for good', async () => {
    const email = uniqueEmail('at-rest-refused');
    used.push(email);
    fake.failFor(email, 1, 422);
    expect(
      (await post(`${web.url}/v1/auth/signup`, { name: 'Grace Hopper', email, organization: 'Navy' })).status,
    ).to.equal(200);
    await sender.drainOnce();

    const rows = await outboxText(email);
    expect(rows).to.include('"status":"failed"');
    expect(rows).to.include('token=[removed once sent]');
    for (const candidate of tokenLike(rows)) {
      expect(
        (await get(`${web.url}/v1/auth/verify?token=${encodeURIComponent(candidate)}`, asksForJson)).status,
      ).to.equal(400);
    }
  });
});
