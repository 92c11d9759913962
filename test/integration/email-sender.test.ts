import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { expect } from 'chai';
import { pino } from 'pino';
import { ManualClock } from '../../src/clock.js';
import { createContext, type AppContext } from '../../src/context.js';
import { maxRetryDelayMs } from '../../src/accounts/email-outbox.service.js';
import { startEmailSender, type EmailSender } from '../../workers/email-sender.js';
import { FakePostmark } from '../fakes/postmark.js';
import { closeOutboxFor, verificationLinkIn } from '../support/accounts.js';
import { randomId, testConfig, uniqueEmail } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { metricValue } from '../support/metrics.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

describe('email delivery from the outbox', () => {
  const clock = new ManualClock(Date.now());
  let fake: FakePostmark;
  let web: TestWeb;
  let sender: EmailSender;
  const extra: { stop(): Promise<void> }[] = [];
  const used: string[] = [];

  const signUp = async (tag = 'mail') => {
    const email = uniqueEmail(tag);
    used.push(email);
    const r = await post(`${web.url}/v1/auth/signup`, { name: 'Katherine Johnson', email, organization: 'NASA' });
    expect(r.status).to.equal(200);
    return email;
  };
  const outboxRow = (email: string) =>
    web.app.db
      .selectFrom('email_outbox')
      .selectAll()
      .where('to_address', '=', email)
      .orderBy('id', 'desc')
      .executeTakeFirstOrThrow();

  before(async () => {
    fake = await new FakePostmark().start();
    web = await startTestWeb({
      clock,
      env: { ...fake.env(), MAIL_MAX_ATTEMPTS: '4', MAIL_FROM: 'Completions <no-reply@example.test>' },
    });
    sender = startEmailSender(web.app, { poll: false });
  });
  after(async () => {
    for (const s of extra.reverse()) await s.stop();
    await sender.stop();
    await closeOutboxFor(web.app, used);
    await web.close();
    await fake.close();
  });

  it('sends a sign-up’s verification email through the postmark client, and marks it sent with Postmark’s MessageID', async () => {
    const email = await signUp();
    await sender.drainOnce();
    const [message, more] = fake.accepted(email);
    expect(more).to.equal(undefined);
    expect(message).to.include({
      From: 'Completions <no-reply@example.test>',
      To: email,
      Subject: 'Verify your email address',
      MessageStream: 'outbound',
      Tag: 'verification',
    });
    expect(fake.attempts(email)[0]!.token).to.equal(fake.serverToken);
    const { link } = verificationLinkIn(message!.TextBody!);
    expect(message!.HtmlBody).to.include(link);
    const row = await outboxRow(email);
    expect(row).to.include({ status: 'sent', attempts: 1, provider_message_id: message!.MessageID, last_error: null });
    expect(row.sent_at).to.deep.equal(clock.now());
  });

  it('sends to an internationalised domain in punycode, which Postmark takes, and marks it sent', async () => {
    const email = `katherine.${randomId()}@exämple.com`;
    used.push(email);
    const r = await post(`${web.url}/v1/auth/signup`, { name: 'Katherine Johnson', email, organization: 'NASA' });
    expect(r.status).to.equal(200);
    expect(r.body.email).to.equal(email);
    await sender.drainOnce();
    const ascii = email.replace('exämple.com', 'xn--exmple-cua.com');
    expect(fake.accepted(ascii).map((m) => m.To)).to.deep.equal([ascii]);
    expect(await outboxRow(email)).to.include({ status: 'sent', to_address: email });
  });

  it('retries a failed send with exponential backoff and marks the message sent exactly once', async () => {
    const email = await signUp('retry');
    fake.failFor(email, 2, 500);

    await sender.drainOnce();
    let row = await outboxRow(email);
    expect(row).to.include({ status: 'pending', attempts: 1 });
    expect(row.last_error).to.match(/HTTP 500/);
    let wait = row.next_attempt_at.getTime() - clock.now().getTime();
    expect(wait).to.be.within(maxRetryDelayMs(1) / 2, maxRetryDelayMs(1));

    // Not due yet: nothing is sent before the backoff has passed.
    await sender.drainOnce();
    expect(fake.attempts(email)).to.have.length(1);

    clock.advance(wait);
    await sender.drainOnce();
    row = await outboxRow(email);
    expect(row).to.include({ status: 'pending', attempts: 2 });
    wait = row.next_attempt_at.getTime() - clock.now().getTime();
    expect(wait).to.be.within(maxRetryDelayMs(2) / 2, maxRetryDelayMs(2));
    expect(maxRetryDelayMs(2)).to.equal(2 * maxRetryDelayMs(1));

    clock.advance(wait);
    await sender.drainOnce();
    row = await outboxRow(email);
    expect(row).to.include({ status: 'sent', attempts: 3 });

    clock.advance(3_600_000);
    await sender.drainOnce();
    expect(fake.attempts(email).map((a) => a.outcome)).to.deep.equal(['failed', 'failed', 'accepted']);
    expect(fake.accepted(email)).to.have.length(1);
    expect(row.provider_message_id).to.equal(fake.accepted(email)[0]!.MessageID);
  });

  it('does not retry a message Postmark rejects as invalid (422), and marks it failed', async () => {
    const email = await signUp('invalid');
    fake.failFor(email, 1, 422);
    await sender.drainOnce();
    const row = await outboxRow(email);
    expect(row).to.include({ status: 'failed', attempts: 1 });
    expect(row.last_error).to.match(/HTTP 422, ErrorCode 300/);
    clock.advance(3_600_000);
    await sender.drainOnce();
    expect(fake.attempts(email)).to.have.length(1);
  });

  it('gives up after MAIL_MAX_ATTEMPTS failures and marks the message failed', async () => {
    const email = await signUp('giveup');
    fake.failFor(email, 100, 503);
    for (let attempt = 1; attempt <= 4; attempt++) {
      await sender.drainOnce();
      clock.advance(maxRetryDelayMs(attempt));
    }
    const row = await outboxRow(email);
    expect(row).to.include({ status: 'failed', attempts: 4 });
    await sender.drainOnce();
    expect(fake.attempts(email)).to.have.length(4);
  });

  it('keeps retrying when the server token is refused (401): an operator can fix the token', async () => {
    const email = await signUp('token');
    fake.failFor(email, 1, 401);
    await sender.drainOnce();
    expect(await outboxRow(email)).to.include({ status: 'pending', attempts: 1 });
    clock.advance(maxRetryDelayMs(1));
    await sender.drainOnce();
    expect(await outboxRow(email)).to.include({ status: 'sent', attempts: 2 });
  });

  it('shares the outbox between two senders without sending any message twice', async () => {
    const other = createContext(web.app.config, { role: 'worker', clock });
    extra.push({ stop: () => other.close() });
    const second = startEmailSender(other, { poll: false, parallel: 3 });
    extra.push(second);
    const emails = await Promise.all(Array.from({ length: 16 }, (_, i) => signUp(`shared${i}`)));
    await Promise.all([sender.drainOnce(), second.drainOnce(), sender.drainOnce(), second.drainOnce()]);
    for (const email of emails) {
      expect(fake.attempts(email), email).to.have.length(1);
      expect((await outboxRow(email)).status).to.equal('sent');
    }
  });

  it('answers sign-up promptly while Postmark hangs, and counts the hung send as a failed attempt', async () => {
    const slow = createContext(testConfig({ ...fake.env(), MAIL_SEND_TIMEOUT_MS: '400' }), { role: 'worker', clock });
    const polling = startEmailSender(slow, { pollMs: 50 });
    try {
      const stuck = uniqueEmail('hang');
      used.push(stuck);
      fake.hang(stuck);
      await post(`${web.url}/v1/auth/signup`, { name: 'K', email: stuck, organization: 'NASA' });
      await eventually(
        async () => (fake.attempts(stuck).some((a) => a.outcome === 'hung') ? true : undefined),
        'the sender to be stuck on Postmark',
      );

      const started = Date.now();
      const email = await signUp('while-hung');
      expect(Date.now() - started).to.be.below(1000);

      const row = await eventually(async () => {
        const r = await outboxRow(stuck);
        return r.attempts === 1 ? r : undefined;
      }, 'the hung send to time out');
      expect(row.status).to.equal('pending');
      expect(row.last_error).to.match(/Postmark send failed/);

      fake.release();
      clock.advance(maxRetryDelayMs(1));
      await eventually(
        async () => ((await outboxRow(stuck)).status === 'sent' ? true : undefined),
        'the retry to go through',
      );
      await eventually(
        async () => ((await outboxRow(email)).status === 'sent' ? true : undefined),
        'the other message to be sent',
      );
      expect(fake.accepted(stuck)).to.have.length(1);
    } finally {
      await polling.stop();
      await slow.close();
    }
  });

  it('counts every attempt in email_sends_total by transport and outcome: sent, retry, failed', async () => {
    const counter = (outcome: string) =>
      metricValue(web.app.metrics.registry, 'email_sends_total', { transport: 'postmark', outcome });
    const count = async () => ({
      sent: await counter('sent'),
      retry: await counter('retry'),
      failed: await counter('failed'),
    });
    const before = await count();
    const retried = await signUp('counted');
    fake.failFor(retried, 1, 500);
    const rejected = await signUp('counted-invalid');
    fake.failFor(rejected, 1, 422);
    await sender.drainOnce();
    clock.advance(maxRetryDelayMs(1));
    await sender.drainOnce();
    const after = await count();
    expect({
      sent: after.sent - before.sent,
      retry: after.retry - before.retry,
      failed: after.failed - before.failed,
    }).to.deep.equal({ sent: 1, retry: 1, failed: 1 });
  });

  describe('with the dev-outbox transport', () => {
    let dir: string;
    let dev: AppContext;
    let lines: string[];
    before(async () => {
      dir = await mkdtemp(path.join(os.tmpdir(), 'svc-mail-'));
      lines = [];
      const sink = new Writable({
        write(chunk, _enc, done) {
          lines.push(...String(chunk).split('\n').filter(Boolean));
          done();
        },
      });
      dev = createContext(testConfig({ MAIL_TRANSPORT: 'dev-outbox', MAIL_DEV_DIR: dir }), {
        role: 'worker',
        clock,
        logger: pino({ level: 'info' }, sink),
      });
    });
    after(async () => {
      await dev.close();
      await rm(dir, { recursive: true, force: true });
    });

    it('writes each message under MAIL_DEV_DIR and logs the verification link', async () => {
      const email = await signUp('devbox');
      const devSender = startEmailSender(dev, { poll: false });
      await devSender.drainOnce();
      await devSender.stop();
      const row = await outboxRow(email);
      expect(row.status).to.equal('sent');
      const stem = `${row.provider_message_id!.replace(/^dev-/, '')}`;
      const files = await readdir(dir);
      expect(files).to.include.members([`${stem}.json`, `${stem}.html`]);
      const saved = JSON.parse(await readFile(path.join(dir, `${stem}.json`), 'utf8'));
      expect(saved).to.include({ to: email, subject: 'Verify your email address', kind: 'verification' });
      const { link } = verificationLinkIn(saved.text);
      expect(await readFile(path.join(dir, `${stem}.html`), 'utf8')).to.include(link);
      const logged = lines.map((l) => JSON.parse(l)).find((l) => l.to === email);
      expect(logged.link).to.equal(link);
      expect(logged.msg).to.include(link);
    });
  });
});
