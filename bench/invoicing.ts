// `npm run bench:invoicing`: a monthly invoicing run over many accounts against the fake Stripe
// behaving as Stripe does under load (50-150 ms a call, 100 operations a second, 429 above it),
// fanned out to worker processes. Reports the wall time against the time the rate limit alone
// imposes, the call rate achieved, the 429s met, and checks that every account got exactly one
// invoice whose lines sum to its ledger, in Postgres and in the fake Stripe.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import { loadConfig } from '../src/config.js';
import { createContext } from '../src/context.js';
import { runJob } from '../src/scheduler/job-runner.js';
import { JOBS } from '../src/scheduler/jobs.js';
import { insertUsageEvents } from '../src/usage/usage.repository.js';
import type { UsageEvent } from '../src/usage/usage-event.js';
import { FakeStripe } from '../test/fakes/stripe.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.resolve(here, '..');

const { values: a } = parseArgs({
  options: {
    accounts: { type: 'string', default: '10000' },
    workers: { type: 'string', default: '2' },
    // Stripe's limit in the fake, and the pace the service is told to keep under it.
    limit: { type: 'string', default: '100' },
    pace: { type: 'string', default: '97' },
    concurrency: { type: 'string', default: '16' },
  },
});
const ACCOUNTS = Number(a.accounts);
const WORKERS = Number(a.workers);
const LIMIT = Number(a.limit);
const PACE = Number(a.pace);
const MONTH = '2013-01';
const MODELS = ['gpt-4.1', 'claude-haiku-4-5', 'gemini-2.5-flash'];

const say = (line: string) => process.stdout.write(`${line}\n`);
const prefix = `bench_inv_${randomUUID().slice(0, 8)}`;
const fake = await new FakeStripe({ traffic: { latencyMs: [50, 150], opsPerSecond: LIMIT } }).start();
const env = {
  ...process.env,
  ...fake.env({ STRIPE_MAX_OPS_PER_SECOND: String(PACE) }),
  REDIS_PREFIX: prefix,
  LOG_LEVEL: 'warn',
  INVOICING_CONCURRENCY: a.concurrency,
};
const config = loadConfig(env);
if (!/bench/.test(new URL(config.db.url).pathname))
  throw new Error(`refusing to empty ${config.db.url}: the invoicing benchmark runs on a database of its own`);
const app = createContext(config, { role: 'bench' });
const children: ChildProcess[] = [];

try {
  await prepare();
  for (let i = 0; i < WORKERS; i++) children.push(await startWorker(i));
  say(
    `invoicing ${ACCOUNTS} accounts for ${MONTH} with ${WORKERS} worker process(es), ${a.concurrency} accounts at once each; Stripe fake: 50-150 ms a call, ${LIMIT} calls/s; service paced to ${PACE} calls/s`,
  );
  const first = fake.requests.length;
  const t0 = performance.now();
  const run = await runJob(app, JOBS.invoices, MONTH, { force: true });
  const wallS = (performance.now() - t0) / 1000;
  if (run.outcome !== 'ran') throw new Error(`the run did not run: ${run.outcome}`);
  const calls = fake.requests.slice(first);
  const refused = calls.filter((c) => c.status === 429).length;
  const served = calls.length - refused;
  const imposedS = served / LIMIT;
  const ok = await verify();
  say('');
  say(
    '| accounts | workers | Stripe calls | 429s | wall time | calls/s achieved (limit) | time the limit imposes | wall ÷ imposed | every account invoiced once, lines = ledger |',
  );
  say('|---:|---:|---:|---:|---:|---:|---:|---:|---|');
  say(
    `| ${ACCOUNTS} | ${WORKERS} | ${served} | ${refused} | ${wallS.toFixed(1)} s | ${(served / wallS).toFixed(1)} (${LIMIT}) | ${imposedS.toFixed(1)} s | ${(wallS / imposedS).toFixed(3)} | ${ok ? 'yes' : 'NO'} |`,
  );
  say(`run summary: ${JSON.stringify({ ...run.summary, failures: (run.summary.failures as unknown[]).length })}`);
  process.exitCode = ok && run.ok ? 0 : 1;
} finally {
  for (const c of children) c.kill('SIGTERM');
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once('exit', r)))));
  await app.close();
  await fake.close();
}

/** An empty bench database, then the accounts (paid, each a Stripe customer) and a month of their usage. */
async function prepare(): Promise<void> {
  await sql`truncate accounts, usage_events, invoices, scheduler_runs cascade`.execute(app.db);
  const started = performance.now();
  for (let i = 0; i < ACCOUNTS; i += 1000) {
    const n = Math.min(1000, ACCOUNTS - i);
    const rows = Array.from({ length: n }, (_, j) => {
      const email = `bench-${i + j}@example.com`;
      const customer = fake.createCustomerDirectly({ email, name: `Bench ${i + j}` });
      return {
        name: `Bench ${i + j}`,
        email,
        organization: 'Bench',
        tier: 'paid' as const,
        verified_at: new Date(),
        stripe_customer_id: String(customer.id),
      };
    });
    const ids = await app.db.insertInto('accounts').values(rows).returning('id').execute();
    const events: UsageEvent[] = [];
    ids.forEach(({ id }, j) => {
      // One to three models an account, as customers use them: 3 + models Stripe calls each.
      for (const model of MODELS.slice(0, 1 + ((i + j) % 3))) {
        const m = app.catalog.find(model)!;
        events.push({
          request_id: `chatcmpl-bench-${randomUUID()}`,
          account_id: id,
          model,
          tier: 'paid',
          status: 'completed',
          prompt_tokens: 50_000 + ((i + j) % 97) * 1000,
          completion_tokens: 5_000 + ((i + j) % 31) * 100,
          input_price_per_million: m.input_price_per_million,
          output_price_per_million: m.output_price_per_million,
          created_at: `${MONTH}-15T12:00:00Z`,
        });
      }
    });
    await insertUsageEvents(app.db, events);
  }
  say(`prepared ${ACCOUNTS} accounts and their usage in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

function startWorker(i: number): Promise<ChildProcess> {
  // At info level the worker says when it is ready; its output is read until then, and dropped after.
  const child = spawn(process.execPath, [path.join(dist, 'workers', 'worker.js')], {
    env: { ...env, NODE_ENV: 'development', LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let ready = false;
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      if (ready) return;
      out += d.toString();
      if (/worker: running/.test(out)) {
        ready = true;
        out = '';
        resolve(child);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`worker ${i} exited with ${code}:\n${out}`)));
  });
}

/** Exactly one monthly invoice per account, its lines summing to the ledger per model, and one Stripe invoice per customer of the same total. */
async function verify(): Promise<boolean> {
  const ledger = await sql<{ account_id: string; model: string; cents: string }>`
    select account_id, model, floor(sum(cost_usd) * 100 + 0.5)::bigint::text as cents
      from usage_events where tier = 'paid' group by account_id, model`.execute(app.db);
  const lines = await sql<{
    account_id: string;
    invoices: string;
    model: string;
    cents: string;
    total: string;
    customer: string;
    stripe_invoice_id: string;
  }>`
    select i.account_id, count(*) over (partition by i.account_id, l.model)::text as invoices, l.model, l.amount_cents::text as cents,
           i.amount_cents::text as total, a.stripe_customer_id as customer, i.stripe_invoice_id
      from invoices i join invoice_lines l on l.invoice_id = i.id join accounts a on a.id = i.account_id
     where i.kind = 'monthly' and i.status in ('open', 'paid')`.execute(app.db);
  const expected = new Map(ledger.rows.map((r) => [`${r.account_id}/${r.model}`, r.cents]));
  const got = new Map(lines.rows.map((r) => [`${r.account_id}/${r.model}`, r.cents]));
  let ok = expected.size === got.size && lines.rows.every((r) => r.invoices === '1');
  for (const [k, v] of expected) if (got.get(k) !== v) ok = false;
  const invoiced = new Set(lines.rows.map((r) => r.account_id));
  if (invoiced.size !== ACCOUNTS) ok = false;
  // In the fake Stripe: one finalized invoice per customer, of the total Postgres recorded.
  const byCustomer = new Map<string, { n: number; total: number }>();
  for (const inv of fake.invoices.values()) {
    const c = byCustomer.get(String(inv.customer)) ?? { n: 0, total: 0 };
    c.n += 1;
    c.total += Number(inv.total);
    byCustomer.set(String(inv.customer), c);
  }
  const totals = new Map(lines.rows.map((r) => [r.customer, Number(r.total)]));
  if (byCustomer.size !== ACCOUNTS) ok = false;
  for (const [customer, total] of totals) {
    const c = byCustomer.get(customer);
    if (!c || c.n !== 1 || c.total !== total) ok = false;
  }
  say(
    `checked: ${invoiced.size} accounts invoiced, ${lines.rows.length} lines against ${ledger.rows.length} ledger sums, ${byCustomer.size} Stripe customers invoiced: ${ok ? 'every account once, lines equal to the ledger' : 'MISMATCH'}`,
  );
  return ok;
}
