import { expect } from 'chai';
import { type Kysely, Migrator, sql } from 'kysely';
import { migrations } from '../../db/migrations/index.js';
import { migrationDatabase } from '../support/migration-database.js';

// The migration that records the prompt cache and reasoning in the ledger, on a ledger and totals
// that already have rows, in a database of its own.

const CACHE_TOKENS = '2026-11-29T030000-usage-cache-tokens';

describe('migration: cached, cache-write and reasoning tokens in the ledger, over an existing ledger', function () {
  this.timeout(60_000);
  const scratch = migrationDatabase('usage_cache_migration');
  let db: Kysely<unknown>;
  let account: string;
  before(() => {
    db = scratch.db();
  });

  const monthly = () =>
    sql<Record<string, string>>`
      select to_char(month, 'YYYY-MM') as month, model, tier, requests::text, prompt_tokens::text,
             completion_tokens::text, cost_usd::text
        from usage_monthly_totals order by 1, 2, 3`
      .execute(db)
      .then((r) => r.rows);
  const daily = () =>
    sql<Record<string, string>>`
      select to_char(day, 'YYYY-MM-DD') as day, model, api, requests::text, paid_requests::text,
             prompt_tokens::text, completion_tokens::text, cost_usd::text
        from usage_daily_totals order by 1, 2, 3`
      .execute(db)
      .then((r) => r.rows);

  it('keeps every existing row valid with its new counts at zero and every total as it was', async () => {
    const { error } = await scratch.migrateTo(Object.keys(migrations).filter((n) => n < CACHE_TOKENS));
    expect(error).to.equal(undefined);
    account = await sql<{ id: string }>`
      insert into accounts (name, email, organization, tier) values ('M', 'm@example.com', 'O', 'paid') returning id`
      .execute(db)
      .then((r) => r.rows[0]!.id);
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at)
      select 'chatcmpl-old-' || g, ${account}, (array['gpt-4.1', 'claude-haiku-4-5'])[1 + g % 2],
             case when g % 5 = 0 then 'free' else 'paid' end, 'completed', 100 * g, 7 * g, 2.00, 8.00,
             (100 * g * 2.00 + 7 * g * 8.00) / 1000000, timestamptz '2026-10-01T00:00:00Z' + g * interval '3 hours'
        from generate_series(1, 200) g`.execute(db);
    const [monthsBefore, daysBefore] = [await monthly(), await daily()];

    const latest = await scratch.migrateTo(Object.keys(migrations));
    expect(latest.error).to.equal(undefined);
    expect(latest.results?.map((r) => r.migrationName)).to.include(CACHE_TOKENS);

    const parts = await sql<Record<string, string>>`
      select count(*)::text as rows, sum(cached_tokens)::text as cached, sum(cache_write_tokens)::text as written,
             sum(cache_write_1h_tokens)::text as written_1h, sum(reasoning_tokens)::text as reasoning,
             count(cached_input_price_per_million)::text as priced
        from usage_events`.execute(db);
    expect(parts.rows[0]).to.deep.equal({
      rows: '200',
      cached: '0',
      written: '0',
      written_1h: '0',
      reasoning: '0',
      priced: '0',
    });
    expect(await monthly()).to.deep.equal(monthsBefore);
    expect(await daily()).to.deep.equal(daysBefore);
    const totals = await sql<Record<string, string>>`
      select (select sum(cached_tokens) + sum(cache_write_tokens) + sum(reasoning_tokens) from usage_monthly_totals)::text as monthly_parts,
             (select sum(cache_savings_usd) from usage_monthly_totals)::text as monthly_savings,
             (select sum(cached_tokens) + sum(cache_write_tokens) + sum(reasoning_tokens) from usage_daily_totals)::text as daily_parts,
             (select sum(cache_savings_usd) from usage_daily_totals)::text as daily_savings`.execute(db);
    expect(totals.rows[0]).to.deep.equal({
      monthly_parts: '0',
      monthly_savings: '0',
      daily_parts: '0',
      daily_savings: '0',
    });
  });

  it('then sums new rows’ parts and what the cache saved on the paid tier, through the triggers', async () => {
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                cached_tokens, cache_write_tokens, cache_write_1h_tokens, reasoning_tokens,
                                input_price_per_million, output_price_per_million, cached_input_price_per_million,
                                cache_write_price_per_million, cache_write_1h_price_per_million, cost_usd, created_at)
      values ('chatcmpl-new-1', ${account}, 'claude-haiku-4-5', 'paid', 'completed', 10000, 100, 9000, 0, 0, 40,
              1.00, 5.00, 0.10, 1.25, 2.00, 0.0024, '2026-10-20T00:00:00Z'),
             ('chatcmpl-new-2', ${account}, 'claude-haiku-4-5', 'paid', 'completed', 4000, 0, 0, 4000, 0, 0,
              1.00, 5.00, 0.10, 1.25, 2.00, 0.005, '2026-10-20T01:00:00Z'),
             ('chatcmpl-new-3', ${account}, 'claude-haiku-4-5', 'free', 'completed', 10000, 0, 9000, 0, 0, 0,
              1.00, 5.00, 0.10, 1.25, 2.00, 0.0019, '2026-10-20T02:00:00Z')`.execute(db);
    const month = await sql<Record<string, string>>`
      select sum(cached_tokens)::text as cached, sum(cache_write_tokens)::text as written,
             sum(reasoning_tokens)::text as reasoning, sum(cache_savings_usd)::text as saved
        from usage_monthly_totals where model = 'claude-haiku-4-5'`.execute(db);
    // Saved on the paid tier: 0.0081 by the reads, -0.001 by the writes' surcharge; the free row saves nothing billable.
    expect(month.rows[0]).to.deep.include({ cached: '18000', written: '4000', reasoning: '40' });
    expect(Number(month.rows[0]!.saved)).to.equal(0.0071);
    const day = await sql<Record<string, string>>`
      select sum(cached_tokens)::text as cached, sum(cache_savings_usd)::text as saved
        from usage_daily_totals where day = '2026-10-20'`.execute(db);
    expect(day.rows[0]!.cached).to.equal('18000');
    expect(Number(day.rows[0]!.saved)).to.equal(0.0071);
  });

  it('drops the new columns when migrated down, the totals as they were, and adds them again when migrated up', async () => {
    const migrator = new Migrator({ db, provider: { getMigrations: () => Promise.resolve(migrations) } });
    const names = Object.keys(migrations);
    const down = await migrator.migrateTo(names[names.indexOf(CACHE_TOKENS) - 1]!);
    expect(down.error).to.equal(undefined);
    const columns = await sql<{ n: string }>`
      select count(*)::text as n from information_schema.columns
       where table_name in ('usage_events', 'usage_monthly_totals', 'usage_daily_totals')
         and column_name in ('cached_tokens', 'cache_savings_usd')`.execute(db);
    expect(columns.rows[0]!.n).to.equal('0');
    // The trigger of before still keeps the totals.
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at)
      values ('chatcmpl-down', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-11-15T00:00:00Z')`.execute(
      db,
    );
    const up = await migrator.migrateToLatest();
    expect(up.error).to.equal(undefined);
    const counted = await sql<{ n: string }>`
      select sum(requests)::text as n from usage_daily_totals where day = '2026-11-15'`.execute(db);
    expect(counted.rows[0]!.n).to.equal('1');
  });
});
