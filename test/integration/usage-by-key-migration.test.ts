import { expect } from 'chai';
import { type Kysely, Migrator, sql } from 'kysely';
import { migrations } from '../../db/migrations/index.js';
import { migrationDatabase } from '../support/migration-database.js';

// The migrations that keep usage per API key (usage_events.key_id, the daily totals per key) and
// the daily totals' paid requests, on a ledger and daily totals that already have rows, in a
// database of its own.

const USAGE_BY_KEY = '2026-11-28T230000-usage-by-key';
const PAID_REQUESTS = '2026-11-28T233000-usage-daily-paid-requests';

describe('migration: daily totals per API key, with their paid requests, over an existing ledger', function () {
  this.timeout(60_000);
  const scratch = migrationDatabase('usage_by_key_migration');
  let db: Kysely<unknown>;
  let account: string;
  before(() => {
    db = scratch.db();
  });

  type Totals = { day: string; model: string; api: string; key: string; requests: string; paid: string; cost: string };
  const totals = () =>
    sql<Totals>`
      select to_char(day, 'YYYY-MM-DD') as day, model, api, coalesce(key_id::text, '-') as key, requests::text,
             paid_requests::text as paid, cost_usd::text as cost
        from usage_daily_totals order by 1, 2, 3, 4`
      .execute(db)
      .then((r) => r.rows);
  /** The ledger per UTC day, model, API and key; the cost and the paid requests are the paid tier's. */
  const ledger = () =>
    sql<Totals>`
      select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day, model, api,
             coalesce(key_id::text, '-') as key, count(*)::text as requests,
             count(*) filter (where tier = 'paid')::text as paid,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost
        from usage_events group by 1, 2, 3, 4 order by 1, 2, 3, 4`
      .execute(db)
      .then((r) => r.rows);
  const sums = () =>
    sql`
      select sum(requests)::text as requests, sum(prompt_tokens)::text as prompt,
             sum(completion_tokens)::text as completion, sum(cost_usd)::text as cost
        from usage_daily_totals`
      .execute(db)
      .then((r) => r.rows);

  it('keeps the existing totals as they were (as usage of no recorded key), counts their paid requests, and the trigger then keeps totals per key', async () => {
    const { error } = await scratch.migrateTo(Object.keys(migrations).filter((n) => n < USAGE_BY_KEY));
    expect(error).to.equal(undefined);
    account = await sql<{ id: string }>`
      insert into accounts (name, email, organization, tier) values ('M', 'm@example.com', 'O', 'paid') returning id`
      .execute(db)
      .then((r) => r.rows[0]!.id);
    // 300 requests over six UTC days, two models, both APIs, both tiers.
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at, api)
      select 'chatcmpl-old-' || g, ${account}, (array['gpt-4.1', 'claude-haiku-4-5'])[1 + g % 2],
             case when g % 7 = 0 then 'free' else 'paid' end, 'completed', g, 2 * g, 2.00, 8.00,
             (g * 2.00 + 2 * g * 8.00) / 1000000, timestamptz '2026-10-01T00:00:00Z' + g * interval '29 minutes',
             case when g % 3 = 0 then 'responses' else 'chat.completions' end
        from generate_series(1, 300) g`.execute(db);
    // A total that drifted from the ledger (the audit's to repair): the migrations keep its drift.
    await sql`update usage_daily_totals set requests = requests + 5 where day = '2026-10-01' and model = 'gpt-4.1' and api = 'chat.completions'`.execute(
      db,
    );
    const before = await sums();

    const latest = await scratch.migrateTo(Object.keys(migrations));
    expect(latest.error).to.equal(undefined);
    expect(latest.results?.map((r) => r.migrationName)).to.include.members([USAGE_BY_KEY, PAID_REQUESTS]);

    expect(await sums()).to.deep.equal(before);
    const drifted = (await ledger()).map((t) =>
      t.day === '2026-10-01' && t.model === 'gpt-4.1' && t.api === 'chat.completions'
        ? { ...t, requests: String(Number(t.requests) + 5) }
        : t,
    );
    const migrated = await totals();
    expect(migrated).to.deep.equal(drifted);
    expect(new Set(migrated.map((t) => t.key))).to.deep.equal(new Set(['-']));
    expect(migrated.some((t) => t.paid !== t.requests && t.paid !== '0')).to.equal(true);

    await sql`update usage_daily_totals set requests = requests - 5 where day = '2026-10-01' and model = 'gpt-4.1' and api = 'chat.completions'`.execute(
      db,
    );
    // Two keys' requests, on days with and without older usage, and one more without a key.
    const [k1, k2] = ['11111111-1111-1111-1111-111111111111', '22222222-2222-2222-2222-222222222222'];
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at, key_id)
      values ('chatcmpl-k1a', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-02T12:00:00Z', ${k1}),
             ('chatcmpl-k1b', ${account}, 'gpt-4.1', 'free', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-02T13:00:00Z', ${k1}),
             ('chatcmpl-k2a', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-02T14:00:00Z', ${k2}),
             ('chatcmpl-k2b', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-09T12:00:00Z', ${k2}),
             ('chatcmpl-none', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-02T15:00:00Z', null)`.execute(
      db,
    );
    const now = await totals();
    expect(now).to.deep.equal(await ledger());
    expect(
      now.filter((t) => t.day === '2026-10-02' && t.model === 'gpt-4.1' && t.api === 'chat.completions'),
    ).to.have.length(3);
  });

  it('folds every key back into one row per day, model and API when migrated down, and keeps them one per key when migrated up', async () => {
    const migrator = new Migrator({ db, provider: { getMigrations: () => Promise.resolve(migrations) } });
    const names = Object.keys(migrations);
    const down = await migrator.migrateTo(names[names.indexOf(USAGE_BY_KEY) - 1]!);
    expect(down.error).to.equal(undefined);
    expect(down.results?.map((r) => [r.migrationName, r.direction]).slice(-2)).to.deep.equal([
      [PAID_REQUESTS, 'Down'],
      [USAGE_BY_KEY, 'Down'],
    ]);
    const folded = await sql<Omit<Totals, 'key' | 'paid'>>`
      select to_char(day, 'YYYY-MM-DD') as day, model, api, requests::text, cost_usd::text as cost
        from usage_daily_totals order by 1, 2, 3`.execute(db);
    const ledgerPerApi = await sql<Omit<Totals, 'key' | 'paid'>>`
      select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day, model, api, count(*)::text as requests,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost
        from usage_events group by 1, 2, 3 order by 1, 2, 3`.execute(db);
    expect(folded.rows).to.deep.equal(ledgerPerApi.rows);
    // The trigger of before counts per day, model and API again.
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at)
      values ('chatcmpl-down', ${account}, 'gpt-4.1', 'paid', 'completed', 1, 1, 2.00, 8.00, 0.00001, '2026-10-02T16:00:00Z')`.execute(
      db,
    );

    const up = await migrator.migrateToLatest();
    expect(up.error).to.equal(undefined);
    // The ledger forgot its keys when migrated down: everything reads as usage of no recorded key.
    expect(await totals()).to.deep.equal(await ledger());
    expect(new Set((await totals()).map((t) => t.key))).to.deep.equal(new Set(['-']));
  });
});
