import { spawn } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { sql } from 'kysely';
import pg from 'pg';
import type { Env } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import { createDb } from '../../src/infra/db.js';
import { withRunClaim } from '../../src/scheduler/scheduler-runs.repository.js';
import { addMonths, monthOf } from '../../src/calendar.js';
import { verificationLinkIn } from '../support/accounts.js';
import { createBillingAccount, invoiceCreatesFor, invoicesOf, recordUsage } from '../support/billing.js';
import { isolatedPrefix, testConfig, testEnv, uniqueEmail } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { PrivatePgBouncer } from '../support/private-pgbouncer.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';
import { FakeStripe } from '../fakes/stripe.js';

// The service behind PgBouncer in transaction mode (a private one on a loopback port, in front of
// the test Postgres), with real web, worker, scheduler and run-job processes whose DATABASE_URL
// names the pooler: migrations, sign-up, a metered stream, an on-demand invoice, and the claims and
// locks of billing. The pooler turns every transaction to the server session idle longest, so
// anything that keeps state in a session breaks here every time. PgBouncer comes from Debian
// (`npm test` installs it as root; elsewhere the test fails saying how to get it).

const MIGRATE = fileURLToPath(new URL('../../scripts/migrate.js', import.meta.url));
const RUN_JOB = fileURLToPath(new URL('../../scripts/run-job.js', import.meta.url));

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function runScript(script: string, args: string[], env: Env): Promise<Exit> {
  const proc = spawn(process.execPath, ['--enable-source-maps', script, ...args], {
    env: testEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal, stdout, stderr })));
}

/** A gate a test holds shut while something it started waits behind it. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open = () => {};
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe('behind PgBouncer in transaction mode', function () {
  this.timeout(60_000);
  const runDatabase = new URL(process.env.DATABASE_URL!).pathname.slice(1);
  // Named after the run's database, so `npm test` drops it even if this file cannot.
  const database = `${runDatabase}_pooled`;
  const serverUrl = process.env.PG_SERVER_URL ?? process.env.DATABASE_URL!;
  let admin: pg.Client;
  let bouncer: PrivatePgBouncer;
  let fake: FakeStripe;
  let mailDir: string;
  let env: Env;
  let migrated: Exit;
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  const roles: RoleProcess[] = [];

  /** Advisory locks held in the pooled database, by any session (seen from outside the pooler). */
  const advisoryLocks = async (): Promise<{ classid: number; objid: number; granted: boolean }[]> => {
    const r = await admin.query<{ classid: number; objid: number; granted: boolean }>(
      `select l.classid::bigint::int as classid, l.objid::bigint::int as objid, l.granted from pg_locks l join pg_database d on d.oid = l.database where l.locktype = 'advisory' and d.datname = $1`,
      [database],
    );
    return r.rows;
  };

  before(async () => {
    const server = new URL(serverUrl);
    server.pathname = '/postgres';
    admin = new pg.Client({ connectionString: server.toString() });
    await admin.connect();
    await admin.query(`drop database if exists "${database}" with (force)`);
    await admin.query(`create database "${database}"`);
    // Behind the pooler the service sends no statement_timeout (PgBouncer refuses it as a startup
    // parameter): the database, or the service's role, carries it into every server session.
    await admin.query(`alter database "${database}" set statement_timeout = '10s'`);
    bouncer = await new PrivatePgBouncer(serverUrl, { databases: [database], poolSize: 8 }).start();

    fake = await new FakeStripe().start();
    mailDir = await mkdtemp(path.join(os.tmpdir(), 'svc-pooled-mail-'));
    env = fake.env({
      DATABASE_URL: bouncer.url(database),
      DB_STATEMENT_TIMEOUT_MS: '0',
      REDIS_PREFIX: isolatedPrefix(),
      MAIL_DEV_DIR: mailDir,
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '2000',
      STRIPE_MAX_NETWORK_RETRIES: '0',
    });
    migrated = await runScript(MIGRATE, [], env);
    expect(migrated.code, migrated.stdout + migrated.stderr).to.equal(0);
    app = createContext(testConfig(env), { role: 'test' });
    // Each role names itself to the pooler (application_name), so its client connections can be told apart.
    const named = (role: string) => ({
      ...env,
      DATABASE_URL: `${bouncer.url(database)}?application_name=pooled-${role}`,
    });
    [web, worker] = await Promise.all([startRole('web', named('web')), startRole('worker', named('worker'))]);
  });

  afterEach(async () => {
    await Promise.all(roles.splice(0).map((r) => r.stop()));
  });

  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
    await fake?.close();
    await bouncer?.stop();
    if (mailDir) await rm(mailDir, { recursive: true, force: true });
    if (admin) {
      await admin.query(`drop database if exists "${database}" with (force)`).catch(() => undefined);
      await admin.end();
    }
  });

  describe('the pooler itself', () => {
    it('runs consecutive statements of one client in different server sessions', async () => {
      const client = new pg.Client({ connectionString: bouncer.url(database) });
      await client.connect();
      try {
        const pids = [];
        for (let i = 0; i < 4; i++)
          pids.push((await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid);
        expect(new Set(pids).size).to.be.greaterThan(1);
      } finally {
        await client.end();
      }
    });

    it('keeps a session-level advisory lock in its server session after the client that took it has gone, which is why the service takes none', async () => {
      const client = new pg.Client({ connectionString: bouncer.url(database) });
      await client.connect();
      await client.query('select pg_advisory_lock(4242, 4242)');
      await client.end();
      try {
        expect(await advisoryLocks()).to.deep.include({ classid: 4242, objid: 4242, granted: true });
      } finally {
        await admin.query(
          `select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory' and classid = 4242`,
        );
      }
    });

    it('refuses statement_timeout as a startup parameter, so DB_STATEMENT_TIMEOUT_MS is 0 and the database setting applies in every session', async () => {
      const refused = createDb(testConfig({ ...env, DB_STATEMENT_TIMEOUT_MS: '10000' }));
      try {
        const err = await sql`select 1`.execute(refused).then(
          () => undefined,
          (e: Error) => e.message,
        );
        expect(err).to.match(/unsupported startup parameter: statement_timeout/);
      } finally {
        await refused.destroy();
      }
      const timeouts = await Promise.all(
        Array.from({ length: 4 }, () => sql<{ statement_timeout: string }>`show statement_timeout`.execute(app.db)),
      );
      expect(timeouts.map((t) => t.rows[0]!.statement_timeout)).to.deep.equal(['10s', '10s', '10s', '10s']);
    });
  });

  describe('the service', () => {
    it('applies every migration through the pooler and leaves no lock behind', async () => {
      expect(migrated.stdout).to.include(
        'migrations applied: 2026-11-22T130000-initial-schema, 2026-11-22T140000-usage-monthly-totals',
      );
      const again = await runScript(MIGRATE, [], env);
      expect(again.stdout, again.stderr).to.include('migrations: already up to date');
      expect(await advisoryLocks()).to.deep.equal([]);
    });

    let apiKey = '';
    const email = uniqueEmail('pooled');

    it('signs up, emails the link from the worker and verifies, answering the API key', async () => {
      const signup = await post(`${web.url}/v1/auth/signup`, {
        name: 'Ada Lovelace',
        email,
        organization: 'Engines Ltd',
      });
      expect(signup.status, signup.text).to.equal(200);
      const text = await eventually(async () => {
        for (const f of (await readdir(mailDir)).filter((n) => n.endsWith('.json'))) {
          const message = JSON.parse(await readFile(path.join(mailDir, f), 'utf8')) as { to: string; text: string };
          if (message.to === email) return message.text;
        }
        return undefined;
      }, `the verification email to ${email}`);
      const verified = await get(`${web.url}/v1/auth/verify?token=${verificationLinkIn(text).token}`, {
        headers: { accept: 'application/json' },
      });
      expect(verified.status, verified.text).to.equal(200);
      expect(verified.body.api_key).to.be.a('string');
      apiKey = verified.body.api_key as string;
    });

    it('streams a completion and its worker meters the usage into the ledger', async () => {
      const s = await postStream(
        `${web.url}/v1/chat/completions`,
        { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 20 },
        apiKey,
      );
      expect(s.status).to.equal(200);
      expect(s.events.at(-1)).to.equal('[DONE]');
      const requestId = (s.chunks[0] as { id: string }).id;
      const row = await eventually(
        () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', requestId).executeTakeFirst(),
        'the usage row',
      );
      expect(row).to.include({ status: 'completed', tier: 'free', model: 'gemini-2.5-flash' });
      expect(row.completion_tokens).to.be.greaterThan(0);
    });

    it('issues one on-demand invoice through Stripe when two requests for it race', async () => {
      const who = await createBillingAccount(app);
      await recordUsage(app, [
        { accountId: who.account.id, model: 'gpt-4.1', tier: 'paid', prompt: 1_000_000, completion: 0, at: new Date() },
      ]);
      const answers = await Promise.all(
        [0, 1].map(() => post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey })),
      );
      expect(answers.map((a) => a.status)).to.deep.equal([200, 200]);
      expect(answers.map((a) => a.body.status as string).sort()).to.deep.equal(['invoiced', 'nothing_to_invoice']);
      const invoices = await invoicesOf(app, who.account.id);
      expect(invoices.map((i) => [i.kind, i.status, i.amount_cents])).to.deep.equal([['on_demand', 'open', '200']]);
      expect(invoiceCreatesFor(fake, who.customerId)).to.have.length(1);
    });

    it('tells run-job a period is busy while another process holds its claim, and runs it once that process lets go', async () => {
      const held = gate();
      const entered = gate();
      const holding = withRunClaim(app.db, 'rollup', '2015-09', async () => {
        entered.open();
        await held.opened;
      });
      await entered.opened;
      let busy: Exit;
      try {
        busy = await runScript(RUN_JOB, ['rollup', '--month', '2015-09'], env);
      } finally {
        held.open();
      }
      await holding;
      expect(busy.code, busy.stdout + busy.stderr).to.equal(75);
      const free = await runScript(RUN_JOB, ['rollup', '--month', '2015-09'], env);
      expect(free.code, free.stdout + free.stderr).to.equal(0);
      expect(free.stdout).to.include('rollup 2015-09: succeeded');
    });

    it('frees the claim and account lock of a run-job killed mid-invoice, and the next run resumes its draft without billing twice', async () => {
      const who = await createBillingAccount(app);
      await recordUsage(app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 300_000,
          completion: 30_000,
          at: '2015-10-07T00:00:00Z',
        },
      ]);
      // --here: run-job invoices the account itself, so the fault kills run-job mid-invoice.
      const killed = await runScript(RUN_JOB, ['invoices', '--month', '2015-10', '--here'], {
        ...env,
        FAULT_INJECT: 'crash-after-invoice-item',
      });
      expect(killed.signal, killed.stdout + killed.stderr).to.equal('SIGKILL');
      expect((await invoicesOf(app, who.account.id)).map((i) => i.status)).to.deep.equal(['draft']);
      // The pooler closes the server sessions of the dead client's open transactions: both locks go with them.
      await eventually(
        async () => ((await advisoryLocks()).length === 0 ? true : undefined),
        'the killed run to hold no lock',
      );
      expect(await withRunClaim(app.db, 'invoices', '2015-10', () => Promise.resolve('free'))).to.equal('free');

      const rerun = await runScript(RUN_JOB, ['invoices', '--month', '2015-10', '--here'], env);
      expect(rerun.code, rerun.stdout + rerun.stderr).to.equal(0);
      expect(rerun.stdout).to.match(/resumed/);
      expect((await invoicesOf(app, who.account.id)).map((i) => i.status)).to.deep.equal(['open']);
      expect([...fake.invoices.values()].filter((i) => i.customer === who.customerId)).to.have.length(1);
    });

    it('has two schedulers hand the previous month to the worker, which claims and runs it once, the schedulers opening no connection', async () => {
      const previous = addMonths(monthOf(new Date()), -1).key;
      const scheduler = { ...env, DATABASE_URL: `${bouncer.url(database)}?application_name=pooled-scheduler` };
      roles.push(await startRole('scheduler', scheduler), await startRole('scheduler', scheduler));
      const run = await eventually(
        async () => {
          const r = await app.db
            .selectFrom('scheduler_runs')
            .selectAll()
            .where('job', '=', 'invoices')
            .where('period_key', '=', previous)
            .executeTakeFirst();
          return r && r.status !== 'running' ? r : undefined;
        },
        `the invoices run for ${previous}`,
        30_000,
      );
      expect(run.status).to.equal('succeeded');
      // The other scheduler's hand-off may still be looking at the finished run: the claim is free once it has.
      await eventually(
        async () =>
          (await withRunClaim(app.db, 'invoices', previous, () => Promise.resolve('free'))) === 'free'
            ? true
            : undefined,
        `the claim on the invoices run for ${previous} to be free`,
      );
      const clients = (await bouncer.clients()).map((c) => c.application_name);
      expect(clients).to.include('pooled-worker');
      expect(clients).to.not.include('pooled-scheduler');
    });
  });
});
