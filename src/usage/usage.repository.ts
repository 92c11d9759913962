import { sql } from 'kysely';
import type { Db } from '../infra/db.js';
import type { UsageEvent } from './usage-event.js';

/**
 * Inserts ledger rows, ignoring request ids already recorded (a redelivered stream entry or a
 * re-run job never counts twice). Cost is computed by Postgres in numeric: exact, never a float.
 * Returns how many rows were new.
 */
export async function insertUsageEvents(db: Db, events: UsageEvent[]): Promise<number> {
  if (events.length === 0) return 0;
  const result = await db
    .insertInto('usage_events')
    .values(
      events.map((e) => ({
        request_id: e.request_id,
        account_id: e.account_id,
        model: e.model,
        tier: e.tier,
        status: e.status,
        prompt_tokens: e.prompt_tokens,
        completion_tokens: e.completion_tokens,
        input_price_per_million: e.input_price_per_million,
        output_price_per_million: e.output_price_per_million,
        cost_usd: sql<string>`(${e.prompt_tokens}::numeric * ${e.input_price_per_million}::numeric + ${e.completion_tokens}::numeric * ${e.output_price_per_million}::numeric) / 1000000`,
        created_at: new Date(e.created_at),
      })),
    )
    .onConflict((oc) => oc.column('request_id').doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0);
}
