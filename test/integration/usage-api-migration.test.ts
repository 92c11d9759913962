import { expect } from 'chai';
import { type Kysely, Migrator, sql } from 'kysely';
import { migrations } from '../../db/migrations/index.js';
import { migrationDatabase } from '../support/migration-database.js';

// The migration that records each request's API, on a ledger and daily totals that already have
// rows of both APIs, in a database of its own.

const USAGE_API = '2026-11-28T200000-usage-api';

describe('migration: usage_events.api and daily totals per API over an existing ledger', function () {
  this.timeout(60_000);
  const scratch = migrationDatabase('usage_api_migration');
  let db: Kysely<unknown>;
  before(() => {
    db = scratch.db();
  });

  type Totals = { day: string; model: string; api: string; requests: string; tokens: string; cost: string };
  const totals = () =>
    sql<Totals>`
      select to_char(day, 'YYYY-MM-DD') as day, model, api, requests::text,
             (prompt_tokens + completion_tokens)::text as tokens, cost_usd::text as cost
        from usage_daily_totals order by 1, 2, 3`
      .execute(db)
      .then((r) => r.rows);
  /** The ledger per UTC day, model and API; the cost is the paid tier's. */
  const ledger = () =>
    sql<Totals>`
      select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day, model, api, count(*)::text as requests,
             sum(prompt_tokens + completion_tokens)::text as tokens,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost
        from usage_events group by 1, 2, 3 order by 1, 2, 3`
      .execute(db)
      .then((r) => r.rows);

  it("marks the Responses API's rows, moves their share of the daily totals to rows of their own, and the trigger keeps them current", async () => {
    const { error } = await scratch.migrateTo(Object.keys(migrations).filter((n) => n < USAGE_API));
    expect(error).to.equal(undefined);
    const account = await sql<{ id: string }>`
      insert into accounts (name, email, organization, tier) values ('M', 'm@example.com', 'O', 'paid') returning id`
      .execute(db)
      .then((r) => r.rows[0]!.id);
    // 300 requests over six UTC days, two models, both tiers; every third one a Responses request,
    // and day 2026-10-07 has Responses requests only.
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at)
      select case when g % 3 = 0 or g > 290 then 'resp_old' || g else 'chatcmpl-old-' || g end,
             ${account}, (array['gpt-4.1', 'claude-haiku-4-5'])[1 + g % 2],
             case when g % 7 = 0 then 'free' else 'paid' end, 'completed', g, 2 * g, 2.00, 8.00,
             (g * 2.00 + 2 * g * 8.00) / 1000000,
             case when g > 290 then timestamptz '2026-10-07T12:00:00Z'
                  else timestamptz '2026-10-01T00:00:00Z' + g * interval '29 minutes' end
        from generate_series(1, 300) g`.execute(db);
    // A total that drifted from the ledger (the audit's to repair): the migration keeps its drift.
    await sql`update usage_daily_totals set requests = requests + 5 where day = '2026-10-01' and model = 'gpt-4.1'`.execute(
      db,
    );
    const sumsBefore = await sql`
      select sum(requests)::text as requests, sum(prompt_tokens)::text as prompt, sum(cost_usd)::text as cost
        from usage_daily_totals`.execute(db);

    const latest = await scratch.migrateTo(Object.keys(migrations));
    expect(latest.error).to.equal(undefined);
    expect(latest.results?.map((r) => r.migrationName)).to.include(USAGE_API);

    const apis = await sql<{ api: string; prefix: string; n: string }>`
      select api, split_part(request_id, 'old', 1) as prefix, count(*)::text as n
        from usage_events group by 1, 2 order by 1`.execute(db);
    expect(apis.rows).to.deep.equal([
      { api: 'chat.completions', prefix: 'chatcmpl-', n: '194' },
      { api: 'responses', prefix: 'resp_', n: '106' },
    ]);
    const drifted = (await ledger()).map((t) =>
      t.day === '2026-10-01' && t.model === 'gpt-4.1' && t.api === 'chat.completions'
        ? { ...t, requests: String(Number(t.requests) + 5) }
        : t,
    );
    const migrated = await totals();
    expect(migrated).to.deep.equal(drifted);
    expect(migrated.filter((t) => t.day === '2026-10-07').map((t) => t.api)).to.deep.equal(['responses', 'responses']);
    expect(
      (
        await sql`
          select sum(requests)::text as requests, sum(prompt_tokens)::text as prompt, sum(cost_usd)::text as cost
            from usage_daily_totals`.execute(db)
      ).rows,
    ).to.deep.equal(sumsBefore.rows);

    await sql`update usage_daily_totals set requests = requests - 5 where day = '2026-10-01' and model = 'gpt-4.1' and api = 'chat.completions'`.execute(
      db,
    );
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at, api)
      values ('resp_new', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-02T12:00:00Z', 'responses'),
             ('chatcmpl-new', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-09T12:00:00Z', default)`.execute(
      db,
    );
    expect(await totals()).to.deep.equal(await ledger());
  });

  it('folds the totals back into one row per day and model when migrated down, and splits them again when migrated up', async () => {
    const migrator = new Migrator({ db, provider: { getMigrations: () => Promise.resolve(migrations) } });
    // Down to the migration before it: any later ones are undone first.
    const names = Object.keys(migrations);
    const down = await migrator.migrateTo(names[names.indexOf(USAGE_API) - 1]!);
    expect(down.error).to.equal(undefined);
    expect(down.results?.map((r) => [r.migrationName, r.direction]).at(-1)).to.deep.equal([USAGE_API, 'Down']);
    const folded = await sql<Omit<Totals, 'api'>>`
      select to_char(day, 'YYYY-MM-DD') as day, model, requests::text,
             (prompt_tokens + completion_tokens)::text as tokens, cost_usd::text as cost
        from usage_daily_totals order by 1, 2`.execute(db);
    const ledgerPerModel = await sql<Omit<Totals, 'api'>>`
      select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day, model, count(*)::text as requests,
             sum(prompt_tokens + completion_tokens)::text as tokens,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost
        from usage_events group by 1, 2 order by 1, 2`.execute(db);
    expect(folded.rows).to.deep.equal(ledgerPerModel.rows);

    const up = await migrator.migrateToLatest();
    expect(up.error).to.equal(undefined);
    expect(await totals()).to.deep.equal(await ledger());
  });
});
