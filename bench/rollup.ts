// `npm run bench -- rollup`: GET /v1/billing/usage/daily and GET /v1/billing/usage for one account
// with 1,000,000 ledger rows over the last year, made with several API keys, through the real web
// process over HTTP. Seeds the ledger in generate_series statements (the statement triggers fill
// the monthly and daily totals as they do for metering), checks the endpoints' totals, in all and
// per key, against the ledger, warms up, then times requests one after another for several periods
// and reports the median, p99 and mean. For comparison it also times the same year's figures summed
// straight from the ledger, the scan the rollup avoids.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import { loadConfig } from '../src/config.js';
import { createContext } from '../src/context.js';
import { generateApiKey } from '../src/accounts/api-keys.js';
import { addDays, dayKey, monthOf, startOfUtcDay } from '../src/calendar.js';
import type { DailyUsage, RecentRequests } from '../src/billing/usage-activity.service.js';
import type { CurrentUsage } from '../src/billing/billing.service.js';
import { sumDecimals } from '../src/billing/money.js';
import { percentile } from './loadgen.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.resolve(here, '..');

const { values: a } = parseArgs({
  options: {
    rows: { type: 'string', default: '1000000' },
    requests: { type: 'string', default: '500' },
    warmup: { type: 'string', default: '100' },
    // How many API keys made the account's requests (0: none recorded, as before keys were).
    keys: { type: 'string', default: '5' },
    // Measure again over the ledger a previous run seeded (same --rows), without seeding it anew.
    'keep-data': { type: 'boolean', default: false },
  },
});
const ROWS = Number(a.rows);
const REQUESTS = Number(a.requests);
const WARMUP = Number(a.warmup);
const KEYS = Number(a.keys);
const TARGET_MEDIAN_MS = 50;

const say = (line: string) => process.stdout.write(`${line}\n`);
// Thousands of reads a minute from one account is the measurement, not abuse: the budget is lifted.
const env = {
  ...process.env,
  LOG_LEVEL: 'warn',
  NODE_ENV: 'development',
  REDIS_PREFIX: 'bench_rollup',
  ABUSE_BUDGET_PAID_REQUESTS_PER_MINUTE: '100000000',
};
// Seeding a million rows takes longer than a request's statement timeout; the web process keeps its own.
const config = loadConfig({ ...env, DB_STATEMENT_TIMEOUT_MS: '0' });
if (!/bench/.test(new URL(config.db.url).pathname))
  throw new Error(`refusing to empty ${config.db.url}: the rollup benchmark runs on a database of its own`);
const app = createContext(config, { role: 'bench' });
let web: ChildProcess | undefined;

try {
  const { accountId, apiKey } = await prepare();
  const { child, url } = await startWeb();
  web = child;
  const today = startOfUtcDay(new Date());
  const periods: { name: string; query: string }[] = [
    { name: 'this month to date (default)', query: '' },
    { name: 'last 30 days', query: range(addDays(today, -29), today) },
    { name: 'last 90 days', query: range(addDays(today, -89), today) },
    { name: 'last 366 days (the most allowed)', query: range(addDays(today, -365), today) },
    ...(KEYS > 0
      ? [{ name: 'last 366 days, group_by=key', query: `${range(addDays(today, -365), today)}&group_by=key` }]
      : []),
  ];
  const ok = await verify(url, apiKey, accountId, periods[3]!.query);
  say('');
  say(
    `GET /v1/billing/usage/daily, ${ROWS.toLocaleString('en')} ledger rows for the account made with ${KEYS} API keys, ${REQUESTS} requests each, one at a time, after ${WARMUP} to warm up:`,
  );
  say('');
  say('| period | entries (day × model) | median | p99 | mean |');
  say('|---|---:|---:|---:|---:|');
  let worstMedian = 0;
  for (const p of periods) {
    const m = await measure(url, apiKey, `/v1/billing/usage/daily${p.query}`);
    // The target is the default view's; group_by=key is an export a client asks for, up to KEYS times the entries.
    if (!p.query.includes('group_by')) worstMedian = Math.max(worstMedian, m.median);
    say(`| ${p.name} | ${m.entries} | ${fmt(m.median)} | ${fmt(m.p99)} | ${fmt(m.mean)} |`);
  }
  const scan = await ledgerScanMs(accountId, addDays(today, -365), addDays(today, 1));
  say('');
  say(
    `The same 366 days summed from the ledger instead (the scan the rollup avoids): ${fmt(scan)} (median of 5, in Postgres alone).`,
  );
  const usage = await measure(url, apiKey, '/v1/billing/usage');
  worstMedian = Math.max(worstMedian, usage.median);
  say(`GET /v1/billing/usage (this month, per model and per key): median ${fmt(usage.median)}, p99 ${fmt(usage.p99)}.`);
  const page = await measure(url, apiKey, '/v1/billing/requests');
  say(`GET /v1/billing/requests (first page of 20): median ${fmt(page.median)}, p99 ${fmt(page.p99)}.`);
  const pass = ok && worstMedian < TARGET_MEDIAN_MS;
  say('');
  say(
    `target: median under ${TARGET_MEDIAN_MS} ms for every period (group_by=key aside) and for this month's usage: ${pass ? 'met' : 'NOT MET'}${ok ? '' : ' (and the totals did not match the ledger)'}`,
  );
  process.exitCode = pass ? 0 : 1;
} finally {
  web?.kill('SIGTERM');
  if (web && web.exitCode === null) await new Promise((r) => web!.once('exit', r));
  await app.close();
}

function range(from: Date, to: Date): string {
  return `?start_date=${dayKey(from)}&end_date=${dayKey(to)}`;
}

function fmt(v: number): string {
  return `${v.toFixed(1)} ms`;
}

/**
 * An empty bench database, one paid account with its default key and KEYS - 1 more (one of them
 * revoked), and ROWS ledger rows spread over the last 365 days and the keys.
 */
async function prepare(): Promise<{ accountId: string; apiKey: string }> {
  if (a['keep-data']) {
    const kept = await keptAccount();
    if (kept) return kept;
    say('no ledger of that size to keep: seeding one');
  }
  await sql`truncate accounts, usage_events, invoices, scheduler_runs cascade`.execute(app.db);
  const account = await app.db
    .insertInto('accounts')
    .values({
      name: 'Bench',
      email: 'bench-rollup@example.com',
      organization: 'Bench',
      tier: 'paid',
      verified_at: new Date(),
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  const key = generateApiKey();
  const keyIds = [
    (
      await app.db
        .insertInto('api_keys')
        .values({ account_id: account.id, key_hash: key.hash, display_prefix: key.displayPrefix })
        .returning('id')
        .executeTakeFirstOrThrow()
    ).id,
  ];
  for (let k = 1; k < KEYS; k++) {
    const other = generateApiKey();
    const row = await app.db
      .insertInto('api_keys')
      .values({
        account_id: account.id,
        key_hash: other.hash,
        display_prefix: other.displayPrefix,
        last4: other.last4,
        name: `Program ${k}`,
        is_default: false,
        revoked_at: k === KEYS - 1 ? new Date() : null,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    keyIds.push(row.id);
  }
  // Unequal shares, as programs' traffic is: of every ten rows (by g / 10), the first key makes
  // four, the second three, the rest one each (with 5 keys: 40%, 30%, 10%, 10%, 10%).
  const slots = Array.from({ length: 10 }, (_, i) => keyIds[Math.min(i < 4 ? 0 : i < 7 ? 1 : i - 5, KEYS - 1)]);
  const keyColumn = KEYS > 0 ? sql`, key_id` : sql``;
  const keyValue =
    KEYS > 0 ? sql`, (array[${sql.join(slots.map((id) => sql`${id}::uuid`))}])[1 + (g / 10) % 10]` : sql``;
  const started = performance.now();
  const now = new Date();
  // Three models with their catalog prices, a tenth on the free tier, a third streamed, a few
  // cancelled or failed: newest at now, one row every 365 days / ROWS before it.
  const models = ['gpt-4.1', 'claude-haiku-4-5', 'gemini-2.5-flash'].map((id) => app.catalog.find(id)!);
  const names = sql.join(models.map((m) => sql.lit(m.id)));
  const inputs = sql.join(models.map((m) => sql`${m.input_price_per_million}::numeric`));
  const outputs = sql.join(models.map((m) => sql`${m.output_price_per_million}::numeric`));
  // In batches of 100,000 rows: one statement each, as a metering batch is, so the triggers run per batch.
  const BATCH = 100_000;
  for (let first = 1; first <= ROWS; first += BATCH) {
    const last = Math.min(ROWS, first + BATCH - 1);
    await sql`
      insert into usage_events (request_id, account_id, model, tier, status, prompt_tokens, completion_tokens,
                                input_price_per_million, output_price_per_million, cost_usd, created_at, stream${keyColumn})
      select 'chatcmpl-bench-' || g, ${account.id}, (array[${names}])[1 + g % 3],
             case when g % 10 = 0 then 'free' else 'paid' end,
             case when g % 50 = 0 then 'cancelled' when g % 97 = 0 then 'failed' else 'completed' end,
             200 + g % 900, 50 + g % 400,
             (array[${inputs}])[1 + g % 3], (array[${outputs}])[1 + g % 3],
             ((200 + g % 900) * (array[${inputs}])[1 + g % 3] + (50 + g % 400) * (array[${outputs}])[1 + g % 3]) / 1000000,
             ${now}::timestamptz - (g - 1) * (interval '365 days' / ${ROWS}::int), g % 3 = 0${keyValue}
        from generate_series(${first}::int, ${last}::int) g`.execute(app.db);
  }
  await sql`analyze usage_events, usage_daily_totals, usage_monthly_totals`.execute(app.db);
  say(`seeded ${ROWS.toLocaleString('en')} ledger rows in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return { accountId: account.id, apiKey: key.key };
}

/** The account a previous run seeded with ROWS rows, with a new API key (its key was shown only to that run). */
async function keptAccount(): Promise<{ accountId: string; apiKey: string } | undefined> {
  const found = await sql<{ id: string; n: string }>`
    select a.id, (select count(*) from usage_events u where u.account_id = a.id)::text as n
      from accounts a where a.email = 'bench-rollup@example.com'`.execute(app.db);
  const row = found.rows[0];
  if (!row || Number(row.n) !== ROWS) return undefined;
  const key = generateApiKey();
  await app.db.updateTable('api_keys').set({ revoked_at: new Date() }).where('account_id', '=', row.id).execute();
  await app.db
    .insertInto('api_keys')
    .values({ account_id: row.id, key_hash: key.hash, display_prefix: key.displayPrefix })
    .execute();
  say(`kept the ${ROWS.toLocaleString('en')} ledger rows of the previous run`);
  return { accountId: row.id, apiKey: key.key };
}

function startWeb(): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [path.join(dist, 'src', 'http', 'server.js')], {
    env: { ...env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/[^\s"]+)/.exec(out);
      if (m) {
        child.stdout.off('data', onData);
        child.stderr.off('data', onData);
        child.stdout.resume();
        child.stderr.resume();
        resolve({ child, url: m[1]! });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`the web process exited with ${code}:\n${out}`)));
  });
}

async function call(
  url: string,
  apiKey: string,
  pathAndQuery: string,
): Promise<{ ms: number; body: DailyUsage & RecentRequests }> {
  const t0 = performance.now();
  const res = await fetch(`${url}${pathAndQuery}`, { headers: { authorization: `Bearer ${apiKey}` } });
  const body = (await res.json()) as DailyUsage & RecentRequests;
  const elapsed = performance.now() - t0;
  if (res.status !== 200) throw new Error(`${pathAndQuery} answered ${res.status}: ${JSON.stringify(body)}`);
  return { ms: elapsed, body };
}

async function measure(url: string, apiKey: string, pathAndQuery: string) {
  for (let i = 0; i < WARMUP; i++) await call(url, apiKey, pathAndQuery);
  const times: number[] = [];
  let entries = 0;
  for (let i = 0; i < REQUESTS; i++) {
    const r = await call(url, apiKey, pathAndQuery);
    times.push(r.ms);
    entries = r.body.data?.length ?? 0;
  }
  return {
    entries,
    median: percentile(times, 50),
    p99: percentile(times, 99),
    mean: times.reduce((s, t) => s + t, 0) / times.length,
  };
}

/**
 * The whole year through the daily endpoint, and this month through GET /v1/billing/usage, against
 * the ledger itself: every row counted once, the same tokens and cost, in all and per key.
 */
async function verify(url: string, apiKey: string, accountId: string, yearQuery: string): Promise<boolean> {
  const { body } = await call(url, apiKey, `/v1/billing/usage/daily${yearQuery}`);
  const from = new Date(`${body.start_date}T00:00:00Z`);
  const to = addDays(new Date(`${body.end_date}T00:00:00Z`), 1);
  const year = await ledgerByKey(accountId, from, to);
  const t = year.reduce(
    (sum, k) => ({
      requests: sum.requests + BigInt(k.requests),
      prompt: sum.prompt + BigInt(k.prompt),
      completion: sum.completion + BigInt(k.completion),
    }),
    { requests: 0n, prompt: 0n, completion: 0n },
  );
  const totalsOk =
    String(body.totals.requests) === String(t.requests) &&
    String(body.totals.prompt_tokens) === String(t.prompt) &&
    String(body.totals.completion_tokens) === String(t.completion) &&
    body.totals.cost_usd === sumDecimals(year.map((k) => k.cost)) &&
    body.totals.requests === ROWS;
  const month = monthOf(new Date());
  const usage = (await call(url, apiKey, '/v1/billing/usage')).body as unknown as CurrentUsage;
  const thisMonth = await ledgerByKey(accountId, month.start, month.end);
  // Before keys were read (--keys 0 on a build without by_key) there is nothing per key to compare.
  const byKeyOk =
    KEYS === 0 ||
    (sameKeys(body.by_key, year) && sameKeys((usage as unknown as Pick<DailyUsage, 'by_key'>).by_key, thisMonth));
  const ok = totalsOk && byKeyOk;
  say(
    `checked: ${body.start_date} to ${body.end_date}: ${body.totals.requests.toLocaleString('en')} requests, ${body.totals.total_tokens.toLocaleString('en')} tokens, ${body.totals.cost_usd} USD; per key over the year and this month (${month.key}, ${usage.total.requests.toLocaleString('en')} requests): ${ok ? 'equal to the ledger' : `DIFFER from the ledger (${JSON.stringify({ year, thisMonth })})`}`,
  );
  return ok;
}

type LedgerKey = { key_id: string | null; requests: string; prompt: string; completion: string; cost: string };

/** The ledger summed per key over [from, to), apart from the service's totals. */
async function ledgerByKey(accountId: string, from: Date, to: Date): Promise<LedgerKey[]> {
  const r = await sql<LedgerKey>`
    select key_id, count(*)::text as requests, sum(prompt_tokens)::text as prompt,
           sum(completion_tokens)::text as completion,
           trim_scale(coalesce(sum(cost_usd) filter (where tier = 'paid'), 0))::text as cost
      from usage_events
     where account_id = ${accountId} and created_at >= ${from} and created_at < ${to}
     group by key_id`.execute(app.db);
  return r.rows;
}

function sameKeys(byKey: DailyUsage['by_key'] | undefined, ledger: LedgerKey[]): boolean {
  const seen = (byKey ?? []).map((k) =>
    [k.key_id, k.requests, k.prompt_tokens, k.completion_tokens, k.cost_usd].map(String).join(' '),
  );
  const truth = ledger.map((k) => [k.key_id, k.requests, k.prompt, k.completion, k.cost].map(String).join(' '));
  return seen.length === truth.length && truth.every((line) => seen.includes(line));
}

async function ledgerScanMs(accountId: string, from: Date, to: Date): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    await sql`
      select (created_at at time zone 'UTC')::date as day, model, count(*), sum(prompt_tokens), sum(completion_tokens),
             sum(cost_usd) filter (where tier = 'paid')
        from usage_events where account_id = ${accountId} and created_at >= ${from} and created_at < ${to}
       group by 1, 2`.execute(app.db);
    times.push(performance.now() - t0);
  }
  return percentile(times, 50);
}
