import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { ManualClock } from '../../src/clock.js';
import { maxRetryDelayMs } from '../../src/accounts/email-outbox.service.js';
import { flushUsage } from '../../src/usage/metering.service.js';
import { appendUsage } from '../../src/usage/usage-stream.js';
import type { UsageEvent } from '../../src/usage/usage-event.js';
import { startEmailSender, type EmailSender } from '../../workers/email-sender.js';
import { FakePostmark } from '../fakes/postmark.js';
import { closeOutboxFor, createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix } from '../support/env.js';
import { post, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// The 80% and 100% emails of a spending limit: found by metering as ledger rows land, or by
// admission when the limit first refuses a request; queued in the email outbox and sent through
// the postmark client to the fake Postmark. August 2017 is a month no other test uses.

describe('spending-limit alert emails', () => {
  const clock = new ManualClock('2017-08-20T10:00:00Z');
  let fake: FakePostmark;
  let web: TestWeb;
  let sender: EmailSender;
  const used: string[] = [];

  before(async () => {
    fake = await new FakePostmark().start();
    web = await startTestWeb({
      clock,
      env: { ...fake.env(), REDIS_PREFIX: isolatedPrefix(), QUEUE_PICKUP_TIMEOUT_MS: '100' },
    });
    sender = startEmailSender(web.app, { poll: false });
  });
  after(async () => {
    await sender.stop();
    await closeOutboxFor(web.app, used);
    await web.close();
    await fake.close();
  });

  async function limitedAccount(limit: string): Promise<TestAccount> {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    used.push(who.account.email);
    const r = await request('PUT', `${web.url}/v1/billing/spend-limit`, {
      bearer: who.jwt,
      json: { monthly_limit_usd: limit },
    });
    expect(r.status, r.text).to.equal(200);
    return who;
  }

  /** A gpt-4.1 request costing `usd` (prompt tokens only, at 2.00 per 1M), through the usage stream and metering. */
  async function meter(who: TestAccount, usd: number): Promise<void> {
    const event: UsageEvent = {
      request_id: `chatcmpl-${randomUUID()}`,
      account_id: who.account.id,
      model: 'gpt-4.1',
      tier: 'paid',
      status: 'completed',
      prompt_tokens: Math.round(usd * 500_000),
      completion_tokens: 0,
      input_price_per_million: '2.00',
      output_price_per_million: '8.00',
      created_at: clock.now().toISOString(),
    };
    await appendUsage(web.app.redis, web.app.config, 0, event);
    await flushUsage(web.app);
  }

  /** A request the limit may refuse: up to 8192 gpt-4.1 tokens, about 0.066 USD. */
  const ask = (who: TestAccount) =>
    post(
      `${web.url}/v1/chat/completions`,
      { model: 'gpt-4.1', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8192 },
      { bearer: who.apiKey },
    );

  const subjects = (who: TestAccount) => fake.accepted(who.account.email).map((m) => m.Subject);

  it('sends the 80% email once when metered spend reaches 80% of the limit, and the 100% one once when the limit first refuses a request', async () => {
    const who = await limitedAccount('1.00');
    await meter(who, 0.79);
    await sender.drainOnce();
    expect(subjects(who)).to.deep.equal([]);

    await meter(who, 0.01);
    await meter(who, 0.15);
    await sender.drainOnce();
    expect(subjects(who)).to.deep.equal(['You have used 80% of your monthly spending limit']);
    const [eighty] = fake.accepted(who.account.email);
    expect(eighty!.TextBody).to.include('$0.80 of your $1.00 monthly spending limit is spent in August 2017 (UTC).');
    expect(eighty!.Tag).to.equal('spend_limit_80');

    // 0.95 spent: a request that may cost 0.066 does not fit in the 0.05 left.
    for (let i = 0; i < 2; i++) {
      const refused = await ask(who);
      expect(refused.status).to.equal(429);
      expect(refused.body.error).to.include({ type: 'insufficient_quota', code: 'insufficient_quota' });
      expect(refused.body.error.message).to.include('monthly spending limit of $1.00');
      expect(refused.headers.get('x-should-retry')).to.equal('false');
    }
    await sender.drainOnce();
    expect(subjects(who)).to.deep.equal([
      'You have used 80% of your monthly spending limit',
      'Your monthly spending limit is reached',
    ]);
    expect(fake.accepted(who.account.email)[1]!.TextBody).to.include(
      'Your $1.00 monthly spending limit for August 2017 (UTC) is reached: $0.95 is spent',
    );

    // Metered spend past the limit later this month finds both alerts sent.
    await meter(who, 0.1);
    await sender.drainOnce();
    expect(subjects(who)).to.have.length(2);
  });

  it('sends both emails once when one metering batch takes the spend past the limit', async () => {
    const who = await limitedAccount('1.00');
    await meter(who, 1.2);
    await meter(who, 0.01);
    await sender.drainOnce();
    expect(subjects(who)).to.have.members([
      'You have used 80% of your monthly spending limit',
      'Your monthly spending limit is reached',
    ]);
    expect(subjects(who)).to.have.length(2);
  });

  it('delays an alert through a Postmark outage without losing or repeating it', async () => {
    const who = await limitedAccount('2.00');
    fake.failFor(who.account.email, 2, 503);
    await meter(who, 1.7);
    await sender.drainOnce();
    expect(fake.attempts(who.account.email)).to.have.length(1);
    expect(subjects(who)).to.deep.equal([]);
    for (let failed = 1; failed <= 2; failed++) {
      clock.advance(maxRetryDelayMs(failed));
      await sender.drainOnce();
    }
    expect(subjects(who)).to.deep.equal(['You have used 80% of your monthly spending limit']);
    expect(fake.attempts(who.account.email)).to.have.length(3);
  });

  it('sends nothing for an account without a limit, whatever it spends', async () => {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    used.push(who.account.email);
    await meter(who, 5);
    await sender.drainOnce();
    const queued = await web.app.db
      .selectFrom('email_outbox')
      .select('id')
      .where('to_address', '=', who.account.email)
      .execute();
    expect(queued).to.deep.equal([]);
  });
});
