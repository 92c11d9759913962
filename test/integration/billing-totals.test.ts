import { expect } from 'chai';
import { sql } from 'kysely';
import { ManualClock } from '../../src/clock.js';
import { createContext, type AppContext } from '../../src/context.js';
import { auditUsageTotals } from '../../src/billing/usage-totals.service.js';
import { parseMonthKey } from '../../src/calendar.js';
import { createTestAccount } from '../support/accounts.js';
import { recordUsage } from '../support/billing.js';
import { testConfig } from '../support/env.js';

// The monthly and daily totals the usage endpoints read are kept by triggers on the ledger; the
// rollup job audits them against the ledger. Months of 2018 belong to this file.

describe('monthly usage totals', () => {
  let app: AppContext;
  before(() => {
    app = createContext(testConfig(), { role: 'test', clock: new ManualClock('2018-03-01T00:05:00Z') });
  });
  after(async () => app.close());

  /** The ledger summed directly, per account, month, model and tier, for comparison. */
  const ledger = (accountId: string) =>
    sql<{
      month: string;
      model: string;
      tier: string;
      requests: string;
      prompt_tokens: string;
      completion_tokens: string;
      cost_usd: string;
    }>`
      select to_char(date_trunc('month', created_at at time zone 'UTC'), 'YYYY-MM') as month, model, tier, count(*)::text as requests,
             sum(prompt_tokens)::text as prompt_tokens, sum(completion_tokens)::text as completion_tokens, sum(cost_usd)::text as cost_usd
        from usage_events where account_id = ${accountId} group by 1, 2, 3 order by 1, 2, 3`
      .execute(app.db)
      .then((r) => r.rows);
  const totals = (accountId: string) =>
    sql<{
      month: string;
      model: string;
      tier: string;
      requests: string;
      prompt_tokens: string;
      completion_tokens: string;
      cost_usd: string;
    }>`
      select to_char(month, 'YYYY-MM') as month, model, tier, requests::text, prompt_tokens::text, completion_tokens::text, cost_usd::text
        from usage_monthly_totals where account_id = ${accountId} order by 1, 2, 3`
      .execute(app.db)
      .then((r) => r.rows);

  it('match the ledger per month, model and tier as rows arrive, counting a replayed request once', async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    const ids = await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 1_234,
        completion: 567,
        at: '2018-01-31T23:59:59.999Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 10,
        completion: 20,
        at: '2018-02-01T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'free',
        prompt: 30,
        completion: 40,
        at: '2018-02-11T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'claude-haiku-4-5',
        tier: 'paid',
        prompt: 50,
        completion: 60,
        at: '2018-02-12T00:00:00Z',
      },
    ]);
    // The metering worker redelivers a batch after a crash: ON CONFLICT DO NOTHING, and no double count.
    const again = await app.db
      .selectFrom('usage_events')
      .selectAll()
      .where('request_id', '=', ids[1]!)
      .executeTakeFirstOrThrow();
    await sql`insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens, input_price_per_million, output_price_per_million, cost_usd, created_at)
              values (${again.request_id}, ${again.account_id}, ${again.model}, ${again.tier}, ${again.status}, ${again.prompt_tokens}, ${again.completion_tokens},
                      ${again.input_price_per_million}, ${again.output_price_per_million}, ${again.cost_usd}, ${again.created_at})
              on conflict (request_id) do nothing`.execute(app.db);
    const t = await totals(who.account.id);
    expect(t).to.deep.equal(await ledger(who.account.id));
    expect(t.map((r) => [r.month, r.model, r.tier, r.requests])).to.deep.equal([
      ['2018-01', 'gpt-4.1', 'paid', '1'],
      ['2018-02', 'claude-haiku-4-5', 'paid', '1'],
      ['2018-02', 'gpt-4.1', 'free', '1'],
      ['2018-02', 'gpt-4.1', 'paid', '1'],
    ]);
  });

  it('are rebuilt from the ledger by the rollup audit when they drift, and left alone when they agree', async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 1_000,
        completion: 100,
        at: '2018-02-03T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 2_000,
        completion: 200,
        at: '2018-02-04T00:00:00Z',
      },
    ]);
    const truth = await ledger(who.account.id);
    await sql`update usage_monthly_totals set requests = requests + 5, cost_usd = cost_usd + 1 where account_id = ${who.account.id}`.execute(
      app.db,
    );
    const lines: string[] = [];
    const repaired = await auditUsageTotals(app, parseMonthKey('2018-02')!, { progress: (l) => lines.push(l) });
    expect(repaired.ok).to.equal(true);
    expect(repaired.summary.repaired).to.be.greaterThan(0);
    expect(lines.join('\n')).to.match(/rollup 2018-02: \d+ total\(s\) differed from the ledger and were rebuilt/);
    expect(await totals(who.account.id)).to.deep.equal(truth);

    const clean = await auditUsageTotals(app, parseMonthKey('2018-02')!);
    expect(clean.summary.repaired).to.equal(0);
  });
});

describe('daily usage totals', () => {
  let app: AppContext;
  before(() => {
    app = createContext(testConfig(), { role: 'test', clock: new ManualClock('2018-08-01T00:05:00Z') });
  });
  after(async () => app.close());

  type Row = {
    day: string;
    model: string;
    requests: string;
    prompt_tokens: string;
    completion_tokens: string;
    cost_usd: string;
  };
  /** The ledger summed directly, per account, UTC day and model (cost: the paid tier's), for comparison. */
  const ledger = (accountId: string) =>
    sql<Row>`
      select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day, model, count(*)::text as requests,
             sum(prompt_tokens)::text as prompt_tokens, sum(completion_tokens)::text as completion_tokens,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost_usd
        from usage_events where account_id = ${accountId} group by 1, 2 order by 1, 2`
      .execute(app.db)
      .then((r) => r.rows);
  const totals = (accountId: string) =>
    sql<Row>`
      select to_char(day, 'YYYY-MM-DD') as day, model, requests::text, prompt_tokens::text, completion_tokens::text, cost_usd::text
        from usage_daily_totals where account_id = ${accountId} order by 1, 2`
      .execute(app.db)
      .then((r) => r.rows);
  /** Inserts the ledger row again as a redelivered stream entry would: ON CONFLICT DO NOTHING. */
  const replay = async (requestId: string) => {
    const again = await app.db
      .selectFrom('usage_events')
      .selectAll()
      .where('request_id', '=', requestId)
      .executeTakeFirstOrThrow();
    const r =
      await sql`insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens, input_price_per_million, output_price_per_million, cost_usd, created_at)
              values (${again.request_id}, ${again.account_id}, ${again.model}, ${again.tier}, ${again.status}, ${again.prompt_tokens}, ${again.completion_tokens},
                      ${again.input_price_per_million}, ${again.output_price_per_million}, ${again.cost_usd}, ${again.created_at})
              on conflict (request_id) do nothing`.execute(app.db);
    expect(Number(r.numAffectedRows)).to.equal(0);
  };

  it("match the ledger per UTC day and model as rows arrive, with the paid tier's cost, counting a replayed request once", async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    const ids = await recordUsage(app, [
      // Either side of UTC midnight: two days.
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 1_234,
        completion: 567,
        at: '2018-06-01T23:59:59.999Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 10,
        completion: 20,
        at: '2018-06-02T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 11,
        completion: 21,
        at: '2018-06-02T13:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'free',
        prompt: 30,
        completion: 40,
        at: '2018-06-02T14:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'claude-haiku-4-5',
        tier: 'paid',
        prompt: 50,
        completion: 60,
        at: '2018-06-02T15:00:00Z',
      },
    ]);
    // In one statement, as a metering batch inserts: the trigger sees the batch as one transition table.
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 5,
        completion: 6,
        at: '2018-06-02T16:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 7,
        completion: 8,
        at: '2018-06-03T01:00:00Z',
      },
    ]);
    await replay(ids[1]!);
    await replay(ids[4]!);
    const t = await totals(who.account.id);
    expect(t).to.deep.equal(await ledger(who.account.id));
    expect(t.map((r) => [r.day, r.model, r.requests])).to.deep.equal([
      ['2018-06-01', 'gpt-4.1', '1'],
      ['2018-06-02', 'claude-haiku-4-5', '1'],
      ['2018-06-02', 'gpt-4.1', '4'],
      ['2018-06-03', 'gpt-4.1', '1'],
    ]);
    // 10 + 11 + 5 prompt and 20 + 21 + 6 completion tokens at 2.00 / 8.00 per million; the free request costs nothing.
    expect(t.find((r) => r.day === '2018-06-02' && r.model === 'gpt-4.1')!.cost_usd).to.match(/^0\.0004280*$/);
  });

  it('are rebuilt from the ledger by the rollup audit when they drift, and left alone when they agree', async () => {
    const who = await createTestAccount(app, { tier: 'paid' });
    await recordUsage(app, [
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 1_000,
        completion: 100,
        at: '2018-07-03T00:00:00Z',
      },
      {
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 2_000,
        completion: 200,
        at: '2018-07-04T00:00:00Z',
      },
    ]);
    const truth = await ledger(who.account.id);
    await sql`update usage_daily_totals set requests = requests + 5, cost_usd = cost_usd + 1 where account_id = ${who.account.id} and day = '2018-07-03'`.execute(
      app.db,
    );
    // A total with no ledger row behind it (a manual edit) goes too.
    await sql`insert into usage_daily_totals (account_id, day, model, requests, prompt_tokens, completion_tokens, cost_usd)
              values (${who.account.id}, '2018-07-09', 'gpt-4.1', 1, 1, 1, 1)`.execute(app.db);
    const lines: string[] = [];
    const repaired = await auditUsageTotals(app, parseMonthKey('2018-07')!, { progress: (l) => lines.push(l) });
    expect(repaired.ok).to.equal(true);
    expect(repaired.summary).to.deep.include({ repaired: 0, repaired_daily: 2 });
    expect(lines.join('\n')).to.include(
      'rollup 2018-07: 2 total(s) differed from the ledger and were rebuilt (0 monthly, 2 daily)',
    );
    expect(await totals(who.account.id)).to.deep.equal(truth);

    const clean = await auditUsageTotals(app, parseMonthKey('2018-07')!);
    expect(clean.summary).to.deep.include({ repaired: 0, repaired_daily: 0 });
  });
});
