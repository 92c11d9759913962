import { expect } from 'chai';
import { type Kysely, sql } from 'kysely';
import { migrations } from '../../db/migrations/index.js';
import { migrationDatabase } from '../support/migration-database.js';

// The daily-totals migration on a ledger that already has rows, in a database of its own: the
// rollup starts equal to the ledger, older rows read as not streamed, and the trigger takes over.

const DAILY = '2026-11-24T100000-usage-daily-totals';

describe('migration: usage_daily_totals over an existing ledger', function () {
  this.timeout(60_000);
  const scratch = migrationDatabase('daily_migration');
  const migrateTo = scratch.migrateTo;
  let db: Kysely<unknown>;
  before(() => {
    db = scratch.db();
  });

  type Totals = { account_id: string; day: string; model: string; requests: string; tokens: string; cost: string };
  const totals = () =>
    sql<Totals>`
      select account_id, to_char(day, 'YYYY-MM-DD') as day, model, requests::text,
             (prompt_tokens + completion_tokens)::text as tokens, cost_usd::text as cost
        from usage_daily_totals order by 1, 2, 3`
      .execute(db)
      .then((r) => r.rows);
  /** The ledger per account, UTC day and model; the cost is the paid tier's. */
  const ledger = () =>
    sql<Totals>`
      select account_id, to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day, model, count(*)::text as requests,
             sum(prompt_tokens + completion_tokens)::text as tokens,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost
        from usage_events group by 1, 2, 3 order by 1, 2, 3`
      .execute(db)
      .then((r) => r.rows);

  it('backfills the daily totals from the ledger, marks old rows not streamed, and keeps the totals current after', async () => {
    const before = Object.keys(migrations).filter((n) => n < DAILY);
    const { error } = await migrateTo(before);
    expect(error).to.equal(undefined);
    const account = await sql<{ id: string }>`
      insert into accounts (name, email, organization, tier) values ('M', 'm@example.com', 'O', 'paid') returning id`
      .execute(db)
      .then((r) => r.rows[0]!.id);
    // 500 requests over ten UTC days, two models, both tiers, some either side of midnight.
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at)
      select 'chatcmpl-old-' || g, ${account}, (array['gpt-4.1', 'claude-haiku-4-5'])[1 + g % 2],
             case when g % 7 = 0 then 'free' else 'paid' end, 'completed', g, 2 * g, 2.00, 8.00,
             (g * 2.00 + 2 * g * 8.00) / 1000000, timestamptz '2026-10-01T00:00:00Z' + g * interval '29 minutes'
        from generate_series(1, 500) g`.execute(db);

    const latest = await migrateTo(Object.keys(migrations));
    expect(latest.error).to.equal(undefined);
    expect(latest.results?.map((r) => r.migrationName)).to.include(DAILY);
    const backfilled = await totals();
    expect(backfilled).to.deep.equal(await ledger());
    expect(backfilled.length).to.be.greaterThan(15);
    const streamed = await sql<{ n: string }>`select count(*)::text as n from usage_events where stream`.execute(db);
    expect(streamed.rows[0]!.n).to.equal('0');

    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at, stream)
      values ('chatcmpl-new', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-02T12:00:00Z', true)`.execute(
      db,
    );
    expect(await totals()).to.deep.equal(await ledger());
  });
});
